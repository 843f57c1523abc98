"""One row of ``results.csv`` (:class:`ResultRow`) and the one ranking of rows (:func:`rank_key`).

Every place that picks "the best" configuration (the sweep's winner, each model's winner, the
summary table, the memory-policy summary) orders rows with :func:`rank_key`, so they agree:

1. rows that fit in memory (and simulated without error) first;
2. then higher throughput (samples/s) first; rows without a throughput last;
3. ties: fewer GPUs (``stages x dp_width x tensor_parallel x context_parallel``), then fewer micro-batches per
   iteration, then schedule, stages, dp_width, tensor_parallel, sequence_parallel,
   microbatch_size, memory_policy and model by name/value, so the
   order never depends on the grid's order or on which worker finished first.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from sim.events import EventLog
from sim.parallel.layout import ParallelLayout
from sim.point.config import PointConfig

ROW_FORMAT = 13
"""Bump when the columns of a result row change, so cached rows of the old shape are not reused."""
PRUNED = "pruned: "
"""Prefix of the ``error`` of a row the planner did not simulate (:mod:`sim.plan.planner`); such
rows depend on the rest of the grid and are never cached."""
INTERNAL = "internal error: "
"""Prefix of the ``error`` of a row whose simulation raised an unexpected exception (a bug in
the simulator, not in the input): the sweep goes on, ``sim run`` names the point and exits
with :data:`sim.errors.EXIT_INTERNAL`; such rows are never cached."""


_NonNeg = Field(None, ge=0, allow_inf_nan=False)


class ResultRow(BaseModel):
    """One configuration's result: the grid point, then what the simulator measured.

    Units: seconds (``_s``), bytes (``_bytes``), samples per second. A point that could not
    be simulated has ``fits = False``, the reason in ``error`` and no measurements (None).
    ``boundaries``, ``placement`` and ``policy_notes`` are JSON text (as in the CSV).

    ``trace_origin`` says where the trace's times come from (``measured``, ``roofline
    estimate``, ``analytic``, ``hand-written``, ``unknown``: :mod:`sim.trace.origin`). ``iteration_flops`` is the model
    FLOPs of one iteration (:func:`sim.compute.model_flops.model_flops`, Megatron-LM's count;
    None for a model without a transformer shape), ``flops_per_s_per_gpu`` those over the
    iteration time and the GPUs, ``mfu`` that over the GPU's dense peak at the trace's dtype
    (datasheet: :attr:`sim.hardware.parts.GPU.peak_flops`); ``flops_source`` says so in the row
    itself (the FLOP count's formula and the peak's GPU, figure and dtype;
    :func:`sim.plan.point_row.flops_source`), empty when there are no FLOPs.
    ``peak_reserve_source`` says where ``peak_reserve_bytes`` (runtime reserve + allocator
    margin + framework buffers) comes from (:func:`sim.plan.point_row.peak_reserve_source`),
    empty when the row has no tightest GPU. ``simulated_as`` says how the engine ran the point
    (:func:`sim.plan.point_row.simulated_as`): every GPU, or mirrored (replica 0, tensor rank
    0: :mod:`sim.engine.symmetry`), and whether the steady state was simulated once
    (:mod:`sim.engine.periodic`); empty for a point that did not run.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str
    schedule: str
    stages: int = Field(ge=1)
    dp_width: int = Field(ge=1)
    tensor_parallel: int = Field(1, ge=1)
    sequence_parallel: bool = False
    microbatch_size: int = Field(ge=1)
    microbatches: int = Field(ge=1)
    memory_policy: str
    global_batch: int = Field(ge=1)
    virtual_stages: int = Field(1, ge=1)
    expert_parallel: int = Field(1, ge=1)
    context_parallel: int = Field(1, ge=1)
    context_parallel_comm: str = "p2p"
    routing: str = "balanced"
    ep_overlap: bool = False
    framework: str = "pipesim"
    dp_shard: int = Field(1, ge=1)
    expert_tensor_parallel: int | None = Field(None, ge=1)
    precision: str = ""
    parameters: int = Field(ge=0)
    iteration_time_s: float | None = _NonNeg
    throughput_samples_per_s: float | None = _NonNeg
    bubble_fraction: float | None = Field(None, ge=0, le=1, allow_inf_nan=False)
    peak_memory_bytes: float | None = _NonNeg
    fits: bool = False
    oom_device: str = ""
    oom_peak_bytes: float | None = _NonNeg
    oom_capacity_bytes: float | None = _NonNeg
    swap_bytes: float | None = _NonNeg
    recompute_s: float | None = _NonNeg
    stall_s: float | None = _NonNeg
    comm_bytes: float | None = _NonNeg
    boundaries: str = ""
    placement: str = ""
    error: str = ""
    policy_notes: str = ""
    staleness_steps: int | None = Field(None, ge=0)
    attention: str = ""
    headroom_bytes: float | None = Field(None, allow_inf_nan=False)
    tightest_gpu: str = ""
    peak_weights_bytes: float | None = _NonNeg
    peak_gradients_bytes: float | None = _NonNeg
    peak_optimizer_bytes: float | None = _NonNeg
    peak_activations_bytes: float | None = _NonNeg
    peak_buffers_bytes: float | None = _NonNeg
    peak_working_bytes: float | None = _NonNeg
    peak_reserve_bytes: float | None = _NonNeg
    peak_reserve_source: str = ""
    peak_allocated_bytes: float | None = _NonNeg
    peak_reserved_bytes: float | None = _NonNeg
    trace_origin: str = ""
    iteration_flops: float | None = _NonNeg
    flops_per_s_per_gpu: float | None = _NonNeg
    mfu: float | None = _NonNeg
    flops_source: str = ""
    simulated_as: str = ""

    def __getitem__(self, name: str) -> Any:
        """``row["fits"]``: read a column by name, as from the CSV."""
        try:
            return getattr(self, name)
        except AttributeError:
            raise KeyError(name) from None

    def point(self) -> PointConfig:
        """The grid point this row is the result of."""
        return PointConfig(**{k: getattr(self, k) for k in PointConfig.model_fields})

    @property
    def layout(self) -> ParallelLayout:
        """The row's parallel layout (:class:`~sim.parallel.layout.ParallelLayout`)."""
        return ParallelLayout.from_flat(self)

    def problems(self) -> list[str]:
        """Inconsistencies no simulation produces (a forged or damaged row): throughput not
        ``microbatches x microbatch_size x dp_width / iteration_time_s`` (metrics.py), a row
        that fits yet names an out-of-memory device, a measured row without its numbers."""
        out: list[str] = []
        if self.error:
            return out
        it, tput = self.iteration_time_s, self.throughput_samples_per_s
        if it is None or tput is None or self.peak_memory_bytes is None:
            return ["iteration_time_s, throughput_samples_per_s, peak_memory_bytes: missing"]
        samples = self.microbatches * self.microbatch_size * self.dp_width
        if not it > 0 or not math.isclose(tput, samples / it, rel_tol=1e-9):
            out.append(
                f"throughput_samples_per_s: {tput} is not {samples} samples / iteration_time_s {it}"
            )
        if self.fits == bool(self.oom_device):
            out.append(f"fits: {self.fits} but oom_device is {self.oom_device!r}")
        return out

    @property
    def failed(self) -> bool:
        """The simulator raised an unexpected exception on this point (:data:`INTERNAL`)."""
        return self.error.startswith(INTERNAL)

    @property
    def ok(self) -> bool:
        """Simulated without error and fits in memory."""
        return self.fits and not self.error


def _get(row: Any, name: str, default: Any) -> Any:
    value = row.get(name, default) if isinstance(row, Mapping) else getattr(row, name, default)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return default
    return value


def rank_key(row: ResultRow | Mapping[str, Any]) -> tuple:
    """Sort key of a row (a :class:`ResultRow` or a results.csv record): smaller is better.

    See the module doc for the order. Missing columns count as absent values.
    """
    ok = bool(_get(row, "fits", False)) and not _get(row, "error", "")
    tput = float(_get(row, "throughput_samples_per_s", -math.inf))
    stages, width = int(_get(row, "stages", 0)), int(_get(row, "dp_width", 0))
    tp = int(_get(row, "tensor_parallel", 1))
    gpus = ParallelLayout(
        pp=stages, dp_replicate=width, tp=tp, cp=int(_get(row, "context_parallel", 1))
    ).gpus
    return (
        not ok,
        -tput,
        gpus,
        int(_get(row, "microbatches", 0)),
        str(_get(row, "schedule", "")),
        stages,
        width,
        tp,
        bool(_get(row, "sequence_parallel", False)),
        int(_get(row, "microbatch_size", 0)),
        str(_get(row, "memory_policy", "")),
        str(_get(row, "model", "")),
    )


def pick_winner(rows: Iterable[ResultRow]) -> ResultRow | None:
    """The best row that fits (by :func:`rank_key`), or None when none fits."""
    ok = [r for r in rows if r.ok]
    return min(ok, key=rank_key) if ok else None


class BestRows:
    """The best fitting row seen so far per model (by :func:`rank_key`), so that the event log
    of the one that ends as the winner is kept from the sweep instead of simulated again
    (:mod:`sim.plan.executors` send a log back only for a row that :meth:`improves`).

    Args:
        keys: a known best :func:`rank_key` per model (another process's :meth:`keys`).
    """

    def __init__(self, keys: Mapping[str, tuple] | None = None) -> None:
        self._keys: dict[str, tuple] = dict(keys or {})
        self._logs: dict[str, tuple[ResultRow, EventLog]] = {}

    def keys(self) -> dict[str, tuple]:
        """The best rank key per model (to seed another process's :class:`BestRows`)."""
        return dict(self._keys)

    def improves(self, row: ResultRow) -> bool:
        """True (and ``row`` is recorded) when it fits and ranks at least as well as the best
        row of its model so far (ties too: the winner's log is never lost to a tie)."""
        if not row.ok:
            return False
        key = rank_key(row)
        best = self._keys.get(row.model)
        if best is not None and key > best:
            return False
        self._keys[row.model] = key
        return True

    def merge(self, keys: Mapping[str, tuple]) -> None:
        """Take each model's key in ``keys`` (another :meth:`keys`) where it is better."""
        for model, key in keys.items():
            if model not in self._keys or key < self._keys[model]:
                self._keys[model] = key

    def offer(self, row: ResultRow, log: EventLog | None) -> None:
        """Keep ``log`` as its model's when ``row`` :meth:`improves` on the best so far (a
        better row without a log, read from the cache, drops the kept one)."""
        if not self.improves(row):
            return
        if log is None:
            self._logs.pop(row.model, None)
        else:
            self._logs[row.model] = (row, log)

    def log_of(self, row: ResultRow) -> EventLog | None:
        """The event log kept for ``row`` (:meth:`offer`), or None."""
        kept = self._logs.get(row.model)
        return kept[1] if kept is not None and kept[0] == row else None
