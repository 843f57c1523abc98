"""Collectives over a rank's expert-parallel or context-parallel group, as the engine runs them.

A :class:`GroupOp` is one exchange of one action (a forward or a backward of a stage) among the
ranks of a group: the ``ep`` ranks of an expert-parallel group (all-to-alls of routed tokens,
:mod:`sim.parallel.expert`) or the ``cp`` ranks of a context-parallel group (ring steps,
all-gathers, all-to-alls of attention tensors, :mod:`sim.parallel.context`). The engine
(:mod:`sim.engine.groups`) times it on the links of the group's GPUs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

Matrix = tuple[tuple[float, ...], ...]

GROUPS = ("ep", "cp", "etp")
KINDS = ("alltoall", "ring", "all_gather", "reduce_scatter")


@dataclass(frozen=True)
class GroupOp:
    """One exchange among a group's ranks.

    Attributes:
        group: ``ep``, ``cp`` or ``etp`` (the folded experts' tensor-parallel group,
            :mod:`sim.parallel.folding`).
        kind: ``alltoall`` (``pairs[i][j]`` bytes from group rank ``i`` to ``j``, or, without
            ``pairs``, ``nbytes`` from every rank split evenly over the others), ``ring``
            (every rank sends ``nbytes`` to the next rank of the group's ring, once per
            step), ``all_gather`` / ``reduce_scatter`` (``nbytes`` = the full buffer).
        nbytes: see ``kind``.
        count: how many times it runs, one after another (ring: steps).
        pairs: the per-pair bytes of an all-to-all.
        hidden_s: compute seconds each repetition (ring step) runs alongside; only the excess
            of the transfer over it is exposed (ring attention).
        routed: ``(experts, top_k)`` where ``pairs`` are the routed copies of balanced top-k
            routing (one row per token and chosen expert, :mod:`sim.parallel.expert`): a
            dispatcher that sends a token once per destination rank or server moves fewer
            bytes (:mod:`sim.comm.ep_dispatch`); None otherwise.
    """

    group: str
    kind: str
    nbytes: float
    count: int = 1
    pairs: Matrix | None = None
    hidden_s: float = 0.0
    routed: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if self.group not in GROUPS:
            raise ValueError(f"group must be one of {', '.join(GROUPS)}, got {self.group!r}")
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {self.kind!r}")

    def total_bytes(self, rank: int = 0) -> float:
        """Bytes group rank ``rank`` sends over all repetitions."""
        if self.pairs is not None:
            return self.count * sum(self.pairs[rank])
        return self.count * self.nbytes


def aggregate(ops: Iterable[GroupOp]) -> tuple[GroupOp, ...]:
    """``ops`` with equal ones merged into one with the summed ``count``, first-seen order."""
    counts: dict[GroupOp, int] = {}
    for op in ops:
        key = GroupOp(op.group, op.kind, op.nbytes, 1, op.pairs, op.hidden_s, op.routed)
        counts[key] = counts.get(key, 0) + op.count
    return tuple(
        GroupOp(k.group, k.kind, k.nbytes, c, k.pairs, k.hidden_s, k.routed)
        for k, c in counts.items()
    )
