"""Contiguous layers -> pipeline stages, minimising the bottleneck stage under memory capacity.

Scenario: a chain of ``n`` layers is cut into ``P`` contiguous, non-empty stages, one per GPU.
Stage ``j`` covering layers ``a..b`` costs, per micro-batch,

    time_j = sum_{i=a..b} (fwd_s[i] + bwd_s[i]) + comm_j,
    comm_j = 2 * out_bytes[b] / bandwidth_Bps[j]   (j < P-1; 0 for the last stage),

the factor 2 being the activation sent forward plus the gradient of the same size sent back
across the boundary after stage ``j``. In steady state the pipeline runs at the pace of its
slowest stage, so :func:`partition` minimises ``max_j time_j`` (the bottleneck) exactly, by
dynamic programming over prefix sums (PipeDream's optimizer, restricted to a straight chain).

Memory: stage ``j`` needs ``stage_memory_bytes(j, param_bytes, act_bytes)`` bytes, from its
summed parameter bytes and summed per-micro-batch activation bytes; the caller encodes the
schedule there. The default, :func:`default_stage_memory`, is 1F1B with fp16 + Adam.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from rich.table import Table

from sim.errors import InputError
from sim.trace.schema import LayerProfile, Trace
from sim.units import fmt_bytes

StageMemoryFn = Callable[[int, float, float], float]
"""``(stage_index, param_bytes, act_bytes) -> bytes`` the stage needs on its device."""


@dataclass(frozen=True)
class Partition:
    """A split of ``n_layers`` layers into stages, with the cost of each stage.

    Attributes:
        boundaries: start layer index of each stage; ``boundaries[0] == 0``, strictly increasing.
        n_layers: layers in the chain.
        stage_time_s: seconds per micro-batch of each stage, compute (fwd + bwd) plus comm.
        stage_comm_s: the communication part of ``stage_time_s`` (0 for the last stage).
        stage_param_bytes: summed parameter bytes of each stage.
        stage_act_bytes: summed activation bytes (per micro-batch) of each stage.
        stage_memory_bytes: bytes each stage needs (see :func:`default_stage_memory`).
        fits: whether each stage's memory is within its capacity (all True without a capacity).

    Example:
        >>> layer = LayerProfile("l", 1.0, 2.0, 10, 1, 0)
        >>> p = partition([layer] * 4, 2)
        >>> p.boundaries, p.bottleneck_s, p.stage_slices()
        ((0, 2), 6.0, [range(0, 2), range(2, 4)])
    """

    boundaries: tuple[int, ...]
    n_layers: int
    stage_time_s: tuple[float, ...]
    stage_comm_s: tuple[float, ...]
    stage_param_bytes: tuple[float, ...]
    stage_act_bytes: tuple[float, ...]
    stage_memory_bytes: tuple[float, ...]
    fits: tuple[bool, ...]

    def __post_init__(self) -> None:
        if not _rising(self.boundaries, self.n_layers):
            raise ValueError(f"invalid boundaries {self.boundaries} for {self.n_layers} layers")

    @property
    def stages(self) -> int:
        """Number of stages ``P``."""
        return len(self.boundaries)

    @property
    def bottleneck_s(self) -> float:
        """Seconds per micro-batch of the slowest stage."""
        return max(self.stage_time_s)

    @property
    def feasible(self) -> bool:
        """True when every stage fits in memory."""
        return all(self.fits)

    def stage_slices(self) -> list[range]:
        """Layer indices of each stage, as ranges."""
        ends = (*self.boundaries[1:], self.n_layers)
        return [range(a, e) for a, e in zip(self.boundaries, ends, strict=True)]

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dict: every field as a list, plus ``bottleneck_s`` and ``feasible``."""
        d = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}
        return {**d, "bottleneck_s": self.bottleneck_s, "feasible": self.feasible}


def default_stage_memory(stages: int) -> StageMemoryFn:
    """The default memory model: ``param_bytes * 8 + act_bytes * (stages - j)`` bytes.

    ``8 * param_bytes`` is 16 B per parameter for fp16 weights (2 B) + fp16 gradients (2 B) +
    fp32 master weights and Adam moments (12 B); ``stages - j`` is the number of micro-batches
    whose activations stage ``j`` keeps in flight under 1F1B.
    """
    return lambda j, param_bytes, act_bytes: param_bytes * 8 + act_bytes * (stages - j)


def _rising(b: Sequence[int], n_layers: int) -> bool:
    return bool(b) and b[0] == 0 and b[-1] < n_layers and list(b) == sorted(set(b))


def _per_stage(value: Any, count: int, what: str, positive: bool = False) -> list[float] | None:
    if value is None:
        return None
    values = list(value) if isinstance(value, (list, tuple)) else [value] * count
    if len(values) != count:
        raise InputError(f"{what} needs {count} values (one per stage/boundary), got {len(values)}")
    if any(not isinstance(v, (int, float)) or not v >= 0 or (positive and v == 0) for v in values):
        raise InputError(f"{what} must be numbers {'>' if positive else '>='} 0, got {values}")
    return [float(v) for v in values]


class _Costs:
    """Prefix sums and per-stage costs shared by the DP and the final :class:`Partition`."""

    def __init__(
        self,
        trace_or_layers,
        stages,
        bandwidth_Bps=None,
        memory_capacity_bytes=None,
        stage_memory_bytes=None,
    ):
        layers = trace_or_layers.layers if isinstance(trace_or_layers, Trace) else trace_or_layers
        for i, layer in enumerate(layers):
            if problems := layer.problems():
                raise InputError(f"layer {i} ({layer.name}): {'; '.join(problems)}", field="layers")
        _check_stages(len(layers), stages)
        self.n, self.stages = len(layers), stages
        self.t, self.p, self.act = [0.0], [0.0], [0.0]
        for layer in layers:
            self.t.append(self.t[-1] + layer.fwd_s + layer.bwd_s)
            self.p.append(self.p[-1] + layer.param_bytes)
            self.act.append(self.act[-1] + layer.act_bytes)
        bw = _per_stage(bandwidth_Bps, stages - 1, "bandwidth_Bps", positive=True)
        # comm[j][b]: comm seconds after stage j ending at layer b (the last stage has none).
        self.comm = [
            [0.0 if bw is None else 2 * layer.out_bytes / bw[j] for layer in layers]
            for j in range(stages - 1)
        ] + [[0.0] * self.n]
        self.cap = _per_stage(memory_capacity_bytes, stages, "memory_capacity_bytes")
        self.mem_fn = stage_memory_bytes or default_stage_memory(stages)

    def memory(self, j: int, a: int, b: int) -> float:
        return self.mem_fn(j, self.p[b + 1] - self.p[a], self.act[b + 1] - self.act[a])

    def fits(self, j: int, a: int, b: int) -> bool:
        return self.cap is None or self.memory(j, a, b) <= self.cap[j]

    def build(self, boundaries: Sequence[int]) -> Partition:
        ends = [x - 1 for x in boundaries[1:]] + [self.n - 1]
        spans = list(enumerate(zip(boundaries, ends, strict=True)))
        comm = tuple(self.comm[j][b] for j, (_, b) in spans)
        return Partition(
            boundaries=tuple(boundaries),
            n_layers=self.n,
            stage_time_s=tuple(self.t[b + 1] - self.t[a] + comm[j] for j, (a, b) in spans),
            stage_comm_s=comm,
            stage_param_bytes=tuple(self.p[b + 1] - self.p[a] for _, (a, b) in spans),
            stage_act_bytes=tuple(self.act[b + 1] - self.act[a] for _, (a, b) in spans),
            stage_memory_bytes=tuple(float(self.memory(j, a, b)) for j, (a, b) in spans),
            fits=tuple(self.fits(j, a, b) for j, (a, b) in spans),
        )

    def solve(self, use_memory: bool) -> list[int] | None:
        """Optimal boundaries, or None when no partition fits (only with ``use_memory``)."""
        n, stages, t, inf = self.n, self.stages, self.t, math.inf
        prev: list[float] = []  # prev[e]: best bottleneck of stages 0..j-1 covering layers 0..e
        arg = []  # arg[j][b]: start layer of stage j in the best split ending stage j at b
        for j in range(stages):
            cur, arg_j, comm_j = [inf] * n, [-1] * n, self.comm[j]
            ends = [n - 1] if j == stages - 1 else range(j, n - stages + j + 1)
            for b in ends:
                best, best_a, tb, cb = inf, -1, t[b + 1], comm_j[b]
                for a in range(b, j - 1, -1) if j else (0,):
                    cost = tb - t[a] + cb
                    if cost >= best:  # cost only grows as the stage widens: nothing better left
                        break
                    cand = max(prev[a - 1], cost) if j else cost
                    if cand < best and (not use_memory or self.fits(j, a, b)):
                        best, best_a = cand, a
                cur[b], arg_j[b] = best, best_a
            prev = cur
            arg.append(arg_j)
        if prev[n - 1] == inf:
            return None
        boundaries, b = [], n - 1
        for j in range(stages - 1, -1, -1):
            boundaries.append(arg[j][b])
            b = arg[j][b] - 1
        return boundaries[::-1]


def _check_stages(n_layers: int, stages: int) -> None:
    if not 1 <= stages <= n_layers:
        raise InputError(
            f"cannot split {n_layers} layers into {stages} stages: the trace has {n_layers} "
            f"layers, so stages must be between 1 and {n_layers}",
            field="stages",
        )


def partition(
    trace_or_layers: Trace | Sequence[LayerProfile],
    stages: int,
    *,
    bandwidth_Bps: float | Sequence[float] | None = None,
    memory_capacity_bytes: float | Sequence[float] | None = None,
    stage_memory_bytes: StageMemoryFn | None = None,
) -> Partition:
    """The contiguous split into ``stages`` stages with the smallest bottleneck that fits.

    Exact, O(stages * n^2) time in the worst case (with early exit; ~ms for n=220, P=8).

    Args:
        trace_or_layers: a :class:`Trace` or its chain of :class:`LayerProfile`.
        stages: number of stages ``P``, ``1 <= P <= n``.
        bandwidth_Bps: bytes/s between stage ``j`` and ``j+1``: one number for every boundary,
            a list of ``P-1``, or None for free communication.
        memory_capacity_bytes: bytes available to each stage: one number or a list of ``P``;
            None means unlimited.
        stage_memory_bytes: ``(j, param_bytes, act_bytes) -> bytes`` stage ``j`` needs;
            default :func:`default_stage_memory` (1F1B, fp16 + Adam).

    Returns:
        The optimal feasible :class:`Partition`. When no split fits in memory it does not
        raise: it returns the split with the smallest bottleneck ignoring memory, whose
        ``fits`` marks the stages that overflow (``Partition.feasible`` is then False).

    Raises:
        InputError: ``stages`` outside ``1..n``, an invalid layer, or a bandwidth/capacity list
            of the wrong length, negative, or a zero bandwidth.
    """
    costs = _Costs(
        trace_or_layers, stages, bandwidth_Bps, memory_capacity_bytes, stage_memory_bytes
    )
    boundaries = costs.solve(use_memory=costs.cap is not None) or costs.solve(use_memory=False)
    assert boundaries is not None  # without the memory bound a split always exists
    return costs.build(boundaries)


def evaluate(
    trace_or_layers: Trace | Sequence[LayerProfile], boundaries: Sequence[int], **options: Any
) -> Partition:
    """The :class:`Partition` for given ``boundaries`` (e.g. :func:`uniform_partition`'s),
    costed exactly as :func:`partition` does; ``options`` are its keyword arguments.

    Raises:
        InputError: as :func:`partition`, or boundaries not rising strictly from 0 below n.
    """
    costs = _Costs(trace_or_layers, len(boundaries), **options)
    if not _rising(boundaries, costs.n):
        raise InputError(f"boundaries {list(boundaries)} must rise strictly from 0 below {costs.n}")
    return costs.build(boundaries)


def uniform_partition(n_layers: int, stages: int) -> tuple[int, ...]:
    """Boundaries giving each stage ``n // P`` layers, the first ``n % P`` stages one more.

    Raises:
        InputError: ``stages`` outside ``1..n_layers``.
    """
    _check_stages(n_layers, stages)
    size, extra = divmod(n_layers, stages)
    return tuple(j * size + min(j, extra) for j in range(stages))


def partition_json(part: Partition, trace: Trace | Sequence[LayerProfile]) -> dict[str, Any]:
    """JSON-friendly description of ``part`` (seconds, bytes): totals, then one dict per stage
    with its layer index range ``[first, last]`` and their names."""
    layers = trace.layers if isinstance(trace, Trace) else trace
    rows = [
        {
            "stage": j,
            "layers": [s.start, s.stop - 1],
            "first_layer": layers[s.start].name,
            "last_layer": layers[s.stop - 1].name,
            "time_s": part.stage_time_s[j],
            "comm_s": part.stage_comm_s[j],
            "param_bytes": part.stage_param_bytes[j],
            "act_bytes": part.stage_act_bytes[j],
            "memory_bytes": part.stage_memory_bytes[j],
            "fits": part.fits[j],
        }
        for j, s in enumerate(part.stage_slices())
    ]
    return {
        "trace": trace.name if isinstance(trace, Trace) else None,
        "n_layers": part.n_layers,
        "boundaries": list(part.boundaries),
        "bottleneck_s": part.bottleneck_s,
        "feasible": part.feasible,
        "stages": rows,
    }


def partition_table(part: Partition, trace: Trace | Sequence[LayerProfile]) -> Table:
    """A rich table of ``part``: layers, time and comm (ms), params, memory (GiB), fits."""
    title = f"{part.stages} stages, bottleneck {part.bottleneck_s * 1e3:.3f} ms"
    table = Table(title=title if part.feasible else f"{title} (DOES NOT FIT)")
    for col in ("stage", "layers", "time (ms)", "comm (ms)", "params", "memory (GiB)", "fits"):
        table.add_column(col, justify="left" if col == "layers" else "right")
    for row in partition_json(part, trace)["stages"]:
        table.add_row(
            str(row["stage"]),
            f"{row['first_layer']}..{row['last_layer']} ({row['layers'][1] - row['layers'][0] + 1})",
            f"{row['time_s'] * 1e3:.3f}",
            f"{row['comm_s'] * 1e3:.3f}",
            fmt_bytes(row["param_bytes"]),
            f"{row['memory_bytes'] / 2**30:.2f}",
            "yes" if row["fits"] else "[red]NO[/red]",
        )
    return table
