"""The ``sim`` command line: run experiments and inspect hardware, traces, schedules, partitions.

One module per command, each a thin typer adapter over a function of :mod:`sim.api` (or of the
library below it) that tests and notebooks call directly:

=========================  ====================================  ================================
command                    module                                calls
=========================  ====================================  ================================
``sim run``                :mod:`sim.cli.run`                    :func:`sim.api.run`
``sim validate``           :mod:`sim.cli.validate`               :func:`sim.api.validate` with
                                                                 the torch replayer
``sim partition``          :mod:`sim.cli.partition`              :func:`sim.api.partition`
``sim memory``             :mod:`sim.cli.memory`                 :func:`sim.api.memory`
``sim profile``            :mod:`sim.cli.profile`                ``backends.torch.profile``
``sim calibrate``          :mod:`sim.cli.calibrate`              ``backends.torch.calibrate``
``sim hardware list|show`` :mod:`sim.cli.hardware`               :mod:`sim.hardware`
``sim schedule list|show`` :mod:`sim.cli.schedule`               :mod:`sim.schedules`
``sim trace list|show|import-kineto``  :mod:`sim.cli.trace`      :mod:`sim.trace`
``sim import``             :mod:`sim.cli.import_runs`            :func:`sim.import_runs.import_runs`
``sim compare``            :mod:`sim.cli.compare`                :func:`sim.compare.compare`
=========================  ====================================  ================================

Every command turns bad input into one message naming the file and field, exit code 2, and no
traceback (:func:`sim.cli.console.friendly`). ``sim.cli`` is the only part of ``sim`` that
imports ``backends``; importing it does not import torch.
"""

from __future__ import annotations

import gc

gc.disable()  # until the imports below are done (_settle_heap)
import typer  # noqa: E402

import sim  # noqa: E402
from sim.cli import (  # noqa: E402
    calibrate,
    compare,
    hardware,
    import_runs,
    memory,
    partition,
    profile,
    run,
    schedule,
    trace,
    validate,
)
from sim.cli.console import QUIET, VERBOSE, setup_logging  # noqa: E402


def _settle_heap() -> None:
    """Move what the imports allocated (about 220,000 objects: pandas, matplotlib, pydantic's
    models) out of the garbage collector's reach, then turn it back on.

    The objects live as long as the process, yet every full collection of the cyclic garbage
    collector walks them all: with the collector on during the imports and the run, the main
    process of ``sim run experiments/dgx1.yaml`` spent 1.5 to 1.8 s in 655 collections (most
    of it in full ones), and its shutdown 0.6 to 1.5 s more in the final collections (timed
    with ``gc.callbacks`` on the loaded 2-core machine for issue 17; with this, 0.15 to 0.3 s
    and 0.03 to 0.1 s, as issue 17's closing note reports). Disabling it for the imports and freezing
    the result (:func:`gc.freeze`) is what the Python documentation advises before ``fork()``
    (https://docs.python.org/3/library/gc.html#gc.freeze), which ``sim run`` does for its
    workers and drawings (:mod:`sim.plan.executors`, :func:`sim.report.outputs.draw`): the children
    inherit a frozen heap, and their collections skip it too. Nothing is leaked that would
    not live to the end anyway; objects made later are collected as usual."""
    gc.freeze()
    gc.enable()


app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,  # help text is plain: "pipesim[ray]" keeps its brackets
    help="pipesim: which pipeline schedule, partition, micro-batching and "
    "memory policy trains fastest on this server, and does it fit?\n\n"
    "Exit codes: 0 done; 1 nothing fits (or a disk or permission fault); 2 bad input (one "
    "line naming the file or option and field); 3 an internal error (a bug).",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"pipesim {sim.__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
    verbose: int = VERBOSE,
    quiet: bool = QUIET,
) -> None:
    """pipesim: which pipeline schedule, partition, micro-batching and memory policy trains
    fastest on this server, and does it fit?

    Exit codes: 0 done; 1 nothing fits (or a disk or permission fault); 2 bad input (one line
    naming the file or option and field); 3 an internal error (a bug).
    """
    setup_logging(verbose, quiet)


app.command("run")(run.run)
app.add_typer(hardware.app, name="hardware")
app.add_typer(schedule.app, name="schedule")
app.add_typer(trace.app, name="trace")
app.command("partition")(partition.partition)
app.command("memory")(memory.memory)
app.command("profile")(profile.profile)
app.command("calibrate")(calibrate.calibrate)
app.command("validate")(validate.validate)
app.command("import")(import_runs.import_cmd)
app.command("compare")(compare.compare_cmd)
_settle_heap()

__all__ = ["app"]
