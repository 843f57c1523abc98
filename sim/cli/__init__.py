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

import atexit
import gc
import os
import sys

gc.disable()  # until the imports below are done (_settle_heap)
from importlib import import_module  # noqa: E402
from typing import Any  # noqa: E402

import typer  # noqa: E402
from typer._click import Command, Context  # noqa: E402
from typer.core import TyperGroup  # noqa: E402
from typer.main import get_command_from_info, get_group_from_info  # noqa: E402
from typer.models import CommandInfo, TyperInfo  # noqa: E402

import sim  # noqa: E402
from sim.cli.console import QUIET, VERBOSE, setup_logging  # noqa: E402

COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("run", "run"),
    "partition": ("partition", "partition"),
    "memory": ("memory", "memory"),
    "profile": ("profile", "profile"),
    "calibrate": ("calibrate", "calibrate"),
    "validate": ("validate", "validate"),
    "import": ("import_runs", "import_cmd"),
    "compare": ("compare", "compare_cmd"),
    "hardware": ("hardware", "app"),
    "schedule": ("schedule", "app"),
    "trace": ("trace", "app"),
}
"""Each command: its module under ``sim.cli`` and the function (or typer app of subcommands)
in it. A module is imported when its command runs (or ``--help`` lists them all), not when
``sim.cli`` is: ``sim run`` does not import what ``sim calibrate`` or ``sim memory`` need
(``sim.calibrate_runs`` and the measured-run readers, pyplot; 0.3 CPU s of the 0.9 s that
importing every command took)."""


SHORT_HELP: dict[str, str] = {
    "run": "Simulate a grid: the fastest configuration that fits.",
    "partition": "Split a trace's layers into P stages, minimising the slowest.",
    "memory": "Peak memory per GPU of every configuration (no timing).",
    "profile": "Measure a torch model layer by layer into a trace.",
    "calibrate": "Measure this machine, or fit a cluster to its runs.",
    "validate": "Replay a configuration with torch against its prediction.",
    "import": "Launch arguments, configs and logs into experiments.",
    "compare": "Predicted against measured runs: error and band.",
    "hardware": "Hardware presets (GPUs, links, hosts): list, show.",
    "schedule": "Pipeline schedules as per-rank actions.",
    "trace": "Per-layer traces: list, show, import, from a config.json.",
}
"""Each command's line in ``sim --help`` (click cuts a docstring's first sentence at the
terminal's width with "...": "run  Simulate every configuration of an experiment's grid
and..."); short enough for 80 columns."""


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
    workers and drawings (:mod:`sim.plan.executors`, :func:`sim.report.drawing.draw`): the children
    inherit a frozen heap, and their collections skip it too. Nothing is leaked that would
    not live to the end anyway; objects made later are collected as usual. Called again
    once a command's module is imported (:func:`_load`)."""
    gc.freeze()
    gc.enable()


def _load(name: str) -> Command:
    """The click command of ``name`` (:data:`COMMANDS`), its module imported now with the
    collector off (:func:`_settle_heap`), made as ``app.command(name)`` or
    ``app.add_typer(sub, name=name)`` would make it."""
    module, attr = COMMANDS[name]
    gc.disable()
    try:
        obj = getattr(import_module(f"sim.cli.{module}"), attr)
    finally:
        _settle_heap()
    if isinstance(obj, typer.Typer):
        return get_group_from_info(
            TyperInfo(obj, name=name, short_help=SHORT_HELP[name]),
            pretty_exceptions_short=app.pretty_exceptions_short,
            suggest_commands=app.suggest_commands,
            rich_markup_mode=app.rich_markup_mode,
        )
    return get_command_from_info(
        CommandInfo(name=name, callback=obj, short_help=SHORT_HELP[name]),
        pretty_exceptions_short=app.pretty_exceptions_short,
        rich_markup_mode=app.rich_markup_mode,
    )


class LazyGroup(TyperGroup):
    """The ``sim`` group: each command (:data:`COMMANDS`) made when it is looked up
    (:func:`_load`), as in click's lazily loading group
    (https://click.palletsprojects.com/en/stable/complex/#lazily-loading-subcommands);
    ``commands`` (read by typer's "Did you mean" and by the documentation's command
    reference) makes them all."""

    @property  # type: ignore[override]
    def commands(self) -> dict[str, Command]:
        for name in COMMANDS:
            self._made(name)
        return self._commands

    @commands.setter
    def commands(self, value: dict[str, Command]) -> None:
        self._commands = value

    def _made(self, name: str) -> Command:
        if name not in self._commands:
            self._commands[name] = _load(name)
        return self._commands[name]

    def list_commands(self, ctx: Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        return self._made(cmd_name) if cmd_name in COMMANDS else None


class SimApp(typer.Typer):
    """The ``sim`` app; run as a program (the ``sim`` script, ``python -m sim.cli``) it ends
    the process without the interpreter's teardown (:func:`exit_now`)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            super().__call__(*args, **kwargs)
        except SystemExit as done:
            exit_now(done.code)
        exit_now(0)


def exit_now(code: object) -> None:
    """End the process with ``code`` (as :class:`SystemExit` would: None is 0, a string is
    printed to standard error and gives 1) once the exit handlers (:mod:`atexit`: logging,
    worker pools, temporary folders) have run and standard output and error are flushed, but
    without the interpreter's teardown, which frees every object of every module one by one:
    0.2 CPU s at the end of ``sim run experiments/dgx1.yaml``, with pandas, matplotlib and
    pydantic's models loaded, 0.8 s of wall time on the loaded 2-core machine (timed for issue
    28). Every file of a run is written and closed before (atomically, :mod:`sim.atomic`)."""
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed, or a broken pipe: nothing more to say
            pass
    os._exit(code)


app = SimApp(
    cls=LazyGroup,
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,  # help text is plain: "pipesim[ray]" keeps its brackets
    help="pipesim: which pipeline schedule, partition, micro-batching and "
    "memory policy trains fastest on this server, and does it fit?\n\n"
    "Exit codes: 0 done; 1 nothing fits, or nothing to compare (or a disk or permission fault); 2 bad input (one "
    "line naming the file or option and field); 3 an internal error (a bug); 130 interrupted "
    "(Ctrl-C: no file half-written).",
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

    Exit codes: 0 done; 1 nothing fits, or nothing to compare (or a disk or permission fault); 2 bad input (one line
    naming the file or option and field); 3 an internal error (a bug); 130 interrupted (Ctrl-C:
    no file half-written).
    """
    setup_logging(verbose, quiet)


_settle_heap()

__all__ = ["app"]
