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
``sim profile``            :mod:`sim.cli.profile`                ``backends.torch`` profilers
``sim calibrate``          :mod:`sim.cli.calibrate`              ``backends.torch.devices``
``sim hardware list|show`` :mod:`sim.cli.hardware`               :mod:`sim.hardware`
``sim schedule list|show`` :mod:`sim.cli.schedule`               :mod:`sim.schedules`
``sim trace list|show|import-kineto``  :mod:`sim.cli.trace`      :mod:`sim.trace`
=========================  ====================================  ================================

Every command turns bad input into one message naming the file and field, exit code 2, and no
traceback (:func:`sim.cli.console.friendly`). ``sim.cli`` is the only part of ``sim`` that
imports ``backends``; importing it does not import torch.
"""

from __future__ import annotations

import typer

from sim.cli import calibrate, hardware, partition, profile, run, schedule, trace, validate

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="pipesim: which pipeline schedule, partition, micro-batching and "
    "memory policy trains fastest on this server, and does it fit?",
)
app.command("run")(run.run)
app.add_typer(hardware.app, name="hardware")
app.add_typer(schedule.app, name="schedule")
app.add_typer(trace.app, name="trace")
app.command("partition")(partition.partition)
app.command("profile")(profile.profile)
app.command("calibrate")(calibrate.calibrate)
app.command("validate")(validate.validate)

__all__ = ["app"]
