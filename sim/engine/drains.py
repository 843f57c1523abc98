"""Collectives a layer's host sync drains: timed before the sync, not after the kernels.

A layer may name the first of its forward's tensor-parallel collectives that its first host
sync waits for (:meth:`~sim.engine.stage_cost.StageCost.drained`: Megatron-DeepSpeed's scalar
copies before the MLP wait for the attention's ``RowParallelLinear`` all-reduce). The engine
times them uncontended on the group's ring and puts them in the layer's device work before the
sync (:attr:`~sim.engine.host.LayerPart.drain_s`), and removes them from the collectives the
action joins after its kernels (:func:`drain`, :func:`less`). On the timeline they are what
they are: gaps in the action's compute span (:class:`~sim.engine.streams.ComputeStream`) and
collectives on the group's stream (:meth:`~sim.engine.tensor_collectives.TensorCollectives.
log_drained`), where the work before them lets them start (:func:`drained`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from sim.engine.stage_cost import StageCost
from sim.hardware.host_ops import HostWork

Triples = tuple[tuple[str, float, int], ...]
"""Collectives as ``(kind, bytes each, count)``."""


def drain(
    cost: StageCost, layers: Iterable[int], tp: Triples, comm_s: Callable[[str, float], float]
) -> tuple[tuple[float, ...], Triples]:
    """Per layer of the stage (those in ``layers``, else 0), the seconds of the collectives
    its first host sync waits for (:meth:`StageCost.drained`, each timed by ``comm_s(kind,
    bytes)``: uncontended on the group's ring, :meth:`~sim.engine.tensor_collectives.
    TensorCollectives.comm_s`), and ``tp`` (the action's collectives after its kernels)
    without them; ``((), tp)`` when there are none or ``tp`` does not hold them all (they then
    stay after the kernels)."""
    layers = tuple(layers)
    ops = [op for i in layers for op in cost.drained(i)]
    left = less(tp, ops) if ops else None
    if left is None:
        return (), tp
    drain_s = [0.0] * len(cost.fwd_layers)
    for i in layers:
        drain_s[i] = sum(comm_s(k, nb) for k, nb in cost.drained(i))
    return tuple(drain_s), left


class Drained(NamedTuple):
    """The collectives one layer's first host sync waits for, as an action's work runs them.

    Attributes:
        before: the action's work issued before them (:func:`~sim.engine.host.drain_prefixes`).
        ops: ``(kind, bytes, seconds)`` of each, in issue order, one after another.
    """

    before: HostWork
    ops: tuple[tuple[str, float, float], ...]

    @property
    def seconds(self) -> float:
        """Their seconds together (the layer's :attr:`~sim.engine.host.LayerPart.drain_s`)."""
        return sum(sec for _, _, sec in self.ops)


def drained(
    cost: StageCost,
    drain_s: Sequence[float],
    prefixes: tuple[HostWork, ...],
    comm_s: Callable[[str, float], float],
) -> tuple[Drained, ...]:
    """The drained collectives of an action's layered work, in order: one :class:`Drained`
    per layer with ``drain_s > 0`` (from :func:`drain`; increasing layer order, as
    :meth:`StageCost.forward_parts` and :meth:`StageCost.recompute_parts` order the parts),
    each with its ``prefixes`` entry (:func:`~sim.engine.host.drain_prefixes` of those parts)
    and its ops timed by ``comm_s`` as :func:`drain` timed them."""
    layers = [i for i, sec in enumerate(drain_s) if sec > 0]
    return tuple(
        Drained(before, tuple((kind, nb, comm_s(kind, nb)) for kind, nb in cost.drained(i)))
        for i, before in zip(layers, prefixes, strict=True)
    )


def less(tp: Triples, ops: list[tuple[str, float]]) -> Triples | None:
    """``tp`` (``(kind, bytes each, count)``) less one of each of ``ops`` (``(kind, bytes)``),
    entries left at 0 dropped; None when ``tp`` does not hold them all.

    >>> less((("allreduce", 8.0, 3), ("allreduce", 4.0, 1)), [("allreduce", 8.0)] * 2)
    (('allreduce', 8.0, 1), ('allreduce', 4.0, 1))
    >>> less((("allreduce", 8.0, 1),), [("allreduce", 8.0)] * 2) is None
    True
    """
    take: dict[tuple[str, float], int] = {}
    for op in ops:
        take[op] = take.get(op, 0) + 1
    out = []
    for kind, nbytes, count in tp:
        n = count - take.pop((kind, nbytes), 0)
        if n < 0:
            return None
        if n:
            out.append((kind, nbytes, n))
    return None if take else tuple(out)
