"""What :mod:`sim.api` returns: the output set of a run, a planned grid, one simulation, a
partition, a grid's peak memory; each converts to a :class:`pandas.DataFrame` (``to_frame()``)
and a simulation draws itself (``plot_timeline``, ``plot_memory``, ``plot_memory_timeline``:
each takes ``ax=`` and returns its matplotlib figure). pandas and matplotlib load on first use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sim.bands import Bands
from sim.events import EventLog
from sim.metrics import Metrics
from sim.parallel.partition import Partition
from sim.plan.memory_grid import GridMemory
from sim.plan.planner import PlanStats
from sim.point.config import PointConfig
from sim.point.rows import ResultRow
from sim.point.simulate import Resolved
from sim.report.outputs import results_frame
from sim.trace.schema import Trace

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class RunOutcome:
    """What :func:`sim.api.run` wrote.

    Attributes:
        code: the command's exit code: 0, 1 when a model has no configuration that fits, 3
            when some configurations failed with an internal error (their rows say so;
            :data:`sim.errors.EXIT_INTERNAL`).
        out_dir: the output folder (``results.csv``, ``winner.yaml``, plots, timeline).
        notes: every note and warning the run showed, in order, as ``{"level": "note" |
            "warning" | "error" | "debug", "text": ...}``: the ``sim`` logger's at its level
            (``sim -q``: warnings and errors; :class:`sim.report.console.NoteSink`; none below
            WARNING when logging is not set up) and the winners' reserve and MFU lines.
    """

    code: int
    out_dir: Path
    notes: list[dict[str, str]] = field(default_factory=list)

    @property
    def results(self) -> pd.DataFrame:
        """``results.csv``: one row per configuration (:class:`sim.point.rows.ResultRow`)."""
        import pandas as pd  # on first use: `import sim.api` stays fast

        return pd.read_csv(self.out_dir / "results.csv")

    def to_frame(self) -> pd.DataFrame:
        """:attr:`results` (one row per configuration)."""
        return self.results


@dataclass(frozen=True)
class Plan:
    """The planned grid of :func:`sim.api.plan`.

    Attributes:
        rows: one per configuration, in grid order (pruned ones say why in ``error``).
        winners: per model, the fastest configuration that fits (``None``: none fits).
        skipped: ``(configuration, reason)`` of the combinations that are not valid.
        stats: how many were simulated, pruned, cached.
    """

    rows: list[ResultRow]
    winners: dict[str, ResultRow | None]
    skipped: list[tuple[str, str]]
    stats: PlanStats
    bands: Bands | None = None

    def table(self) -> pd.DataFrame:
        """The rows as ``results.csv`` has them (prediction bands included: ``bands``, the
        hardware's, :func:`sim.report.row_bands.bands_for`)."""
        return results_frame(self.rows, self.bands)

    def to_frame(self) -> pd.DataFrame:
        """:meth:`table`: one row per configuration, as ``results.csv``."""
        return self.table()


@dataclass(frozen=True)
class Simulation:
    """One configuration simulated by :func:`sim.api.simulate`.

    Attributes:
        point: the configuration.
        metrics: iteration time (s), throughput (samples/s), bubble fraction, peak memory
            (bytes), whether it fits.
        log: the event log (compute, transfers, memory); ``sim.report`` draws it.
        resolved: the partition, placement and schedule it ran.
    """

    point: PointConfig
    metrics: Metrics
    log: EventLog
    resolved: Resolved

    def to_frame(self) -> pd.DataFrame:
        """One row: the configuration's fields, then the metrics' (:meth:`Metrics.to_frame`).
        The event log has its own: ``log.to_frame()`` (spans), ``log.memory_frame()``."""
        import pandas as pd  # on first use

        return pd.concat([pd.DataFrame([self.point.model_dump()]), self.metrics.to_frame()], axis=1)

    def plot_timeline(self, ax: Any = None, *, iteration: int | None = None) -> Any:
        """The Gantt timeline (:func:`sim.report.gantt.plot_gantt`); returns the figure."""
        from sim.report.gantt import plot_gantt  # matplotlib on first use

        return plot_gantt(self.log, ax=ax, iteration=iteration)

    def plot_memory(self, ax: Any = None) -> Any:
        """Peak memory per GPU by category (:func:`sim.report.memory_plots.plot_memory_per_gpu`)."""
        from sim.report.memory_plots import plot_memory_per_gpu

        return plot_memory_per_gpu(self.log, ax=ax)

    def plot_memory_timeline(self, ax: Any = None) -> Any:
        """Memory in use over time (:func:`sim.report.memory_plots.plot_memory_timeline`)."""
        from sim.report.memory_plots import plot_memory_timeline

        return plot_memory_timeline(self.log, ax=ax)


@dataclass(frozen=True)
class PartitionPlan:
    """A trace split into stages by :func:`sim.api.partition`.

    Attributes:
        trace: the trace as partitioned (brought to the micro-batch size and GPU).
        partition: the stages (:class:`sim.parallel.partition.Partition`).
        notes: how the trace was brought to that micro-batch size and GPU.
    """

    trace: Trace
    partition: Partition
    notes: tuple[str, ...]


@dataclass(frozen=True)
class MemoryAnswer:
    """What :func:`sim.api.memory` found.

    Attributes:
        results: per configuration of the grid, its peaks per pipeline rank and, when it does
            not fit, what to change (:class:`sim.plan.memory_grid.GridMemory`).
        skipped: ``(configuration, reason)`` of the combinations that are not valid.
        out_dir: where ``memory.csv`` and ``memory_ranks.png`` were written (None: nothing).
        wall_s: seconds the model took over the grid (reading the experiment excluded).
        notes: what the hardware description asked for and did not get (its topology's
            ``notes``: a ``gpu.memory`` replaced by the CUDA total).
    """

    results: list[GridMemory]
    skipped: list[tuple[str, str]]
    out_dir: Path | None = None
    wall_s: float = 0.0
    notes: tuple[str, ...] = ()

    def to_frame(self) -> pd.DataFrame:
        """One row per configuration and pipeline rank (:func:`sim.report.memory_ranks.
        memory_frame`), as ``memory.csv``."""
        from sim.report.memory_ranks import memory_frame  # on first use: pandas, matplotlib

        return memory_frame(self.results)

    def table(self) -> pd.DataFrame:
        """:meth:`to_frame`."""
        return self.to_frame()
