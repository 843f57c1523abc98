"""MoE parallel folding: the expert layers' own mesh over a pipeline stage's GPUs.

Megatron-Core folds the ``tp x cp x dp`` ranks of a pipeline stage twice
(``megatron/core/parallel_state.py::initialize_model_parallel``, ``expert_tensor_parallel_size``;
Liu et al., "MoE Parallel Folding", arXiv:2504.14960 §3): the dense layers as
``tp-cp-dp`` (tensor rank innermost), the expert layers as ``etp-ep-edp``
(``RankGenerator(tp=etp, ep=ep, dp=edp, pp=pp, cp=1, order=order)``), with ``etp x ep x edp =
tp x cp x dp``. So expert parallelism may span tensor, context and data ranks at once, and the
experts' tensor split ``etp`` may differ from ``tp`` (``etp = 1``: every expert whole on one GPU).

The engine names a GPU of a stage by ``(replica, tensor rank)``: replica ``r`` of the ``dp x cp``
data- and context-parallel ranks (context rank innermost), tensor rank ``k``; its rank within
the stage is ``g = k + tp*r`` (Megatron's order). Its expert coordinates are
``g = e + etp*(j + ep*i)``: expert-tensor rank ``e``, expert-parallel rank ``j``,
expert-data-parallel rank ``i``.

* :func:`expert_group`: the ``ep`` GPUs that exchange routed tokens (same ``e`` and ``i``);
* :func:`expert_dp_group`: the ``edp`` GPUs holding the same experts, which reduce their
  gradients (same ``e`` and ``j``);
* :func:`expert_tp_group`: the ``etp`` GPUs that split each expert's GEMMs.

Without folding (``etp = tp``, ``ep`` dividing ``dp x cp``) the expert group is ``ep``
consecutive replicas of one tensor rank, the expert-data-parallel group the replicas with the
same ``r mod ep``: what the engine did before folding.
"""

from __future__ import annotations

from sim.parallel.layout import ParallelLayout

Member = tuple[int, int]
"""``(replica, tensor rank)`` of a GPU of one pipeline stage."""


def _coords(lay: ParallelLayout, replica: int, tp_rank: int) -> tuple[int, int, int]:
    """``(e, j, i)``: the expert-tensor, expert-parallel and expert-data-parallel ranks."""
    g = tp_rank + lay.tp * replica
    etp = lay.expert_tp
    return g % etp, g // etp % lay.ep, g // (etp * lay.ep)


def _member(lay: ParallelLayout, e: int, j: int, i: int) -> Member:
    g = e + lay.expert_tp * (j + lay.ep * i)
    return g // lay.tp, g % lay.tp


def expert_group(lay: ParallelLayout, replica: int, tp_rank: int = 0) -> tuple[Member, ...]:
    """The expert-parallel group of ``(replica, tp_rank)``, in expert-parallel rank order.

    >>> lay = ParallelLayout(dp_replicate=4, tp=2, ep=8, etp=1)
    >>> expert_group(lay, 1, 1)
    ((0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1), (3, 0), (3, 1))
    """
    e, _, i = _coords(lay, replica, tp_rank)
    return tuple(_member(lay, e, j, i) for j in range(lay.ep))


def expert_dp_group(lay: ParallelLayout, replica: int, tp_rank: int = 0) -> tuple[Member, ...]:
    """The expert-data-parallel group of ``(replica, tp_rank)``: the GPUs holding its experts.

    >>> lay = ParallelLayout(dp_replicate=4, tp=2, ep=4, etp=1)
    >>> expert_dp_group(lay, 0, 1)
    ((0, 1), (2, 1))
    """
    e, j, _ = _coords(lay, replica, tp_rank)
    return tuple(_member(lay, e, j, i) for i in range(lay.expert_dp))


def expert_tp_group(lay: ParallelLayout, replica: int, tp_rank: int = 0) -> tuple[Member, ...]:
    """The expert-tensor-parallel group of ``(replica, tp_rank)``."""
    _, j, i = _coords(lay, replica, tp_rank)
    return tuple(_member(lay, e, j, i) for e in range(lay.expert_tp))


def folds(lay: ParallelLayout) -> bool:
    """Whether the expert groups leave a tensor rank's replicas (``etp != tp``)."""
    return lay.expert_tp != lay.tp


def expert_shard_group(lay: ParallelLayout, replica: int, tp_rank: int = 0) -> tuple[Member, ...]:
    """FSDP's shard group of ``(replica, tp_rank)``'s routed experts: the GPUs of its
    expert-data-parallel group inside its FSDP shard group (torchtitan's expert-FSDP mesh;
    :meth:`~sim.parallel.layout.ParallelLayout.shard_group`).

    >>> lay = ParallelLayout(dp_replicate=2, dp_shard=4, ep=2)
    >>> expert_shard_group(lay, 1), expert_shard_group(lay, 5)
    (((1, 0), (3, 0)), ((5, 0), (7, 0)))
    """
    n = lay.shard_size
    return tuple(m for m in expert_dp_group(lay, replica, tp_rank) if m[0] // n == replica // n)


def expert_replicate_group(
    lay: ParallelLayout, replica: int, tp_rank: int = 0
) -> tuple[Member, ...]:
    """The GPUs holding the same expert shard as ``(replica, tp_rank)`` (HSDP's replicate
    dimension for the experts): its position in every other replicate slice.

    >>> lay = ParallelLayout(dp_replicate=2, dp_shard=4, ep=2)
    >>> expert_replicate_group(lay, 3)
    ((3, 0), (7, 0))
    """
    n = lay.shard_size
    slices: dict[int, list[Member]] = {}
    for m in expert_dp_group(lay, replica, tp_rank):
        slices.setdefault(m[0] // n, []).append(m)
    pos = slices[replica // n].index((replica, tp_rank))
    return tuple(group[pos] for _, group in sorted(slices.items()))
