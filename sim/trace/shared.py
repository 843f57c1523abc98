"""Shared and tied parameters on a partitioned chain: a copy per GPU and the all-reduce that
keeps the copies one parameter.

A trace's :attr:`~sim.trace.schema.Trace.shared` groups are counted once, in their first
holder's ``param_bytes``. When the partition puts the holders on several ranks, each rank keeps
a copy (weights, gradients, optimizer state: the memory model counts the copy's bytes in that
rank's layer) and, at every optimizer step, the copies' gradients are all-reduced between the
ranks that hold them before the update, as Megatron-LM does for the word embedding it keeps on
the first and the last stage (``megatron/core/distributed/finalize_model_grads.py``,
``_allreduce_word_embedding_grads``; ``sim.engine.collectives.Collectives.join_tied`` times it).
Holders on one rank (two stage chunks of one GPU) share one copy and need no all-reduce. A rank
all-reduces once per step, at the step of its last stage chunk, every group it holds in the
groups' order, as the replay does after its optimizer step's backward work
(``backends/torch/parallel/ties.py``): the same order on every rank, so the all-reduces cannot wait
on each other in a cycle (with one all-reduce per stage chunk, rank 0 could wait at stage 0 for
rank 1's stage 3 while rank 1 waits at stage 1 for rank 0's stage 0).

The replay all-reduces a group tensor by tensor (``Ties.reduce``: one ``dist.all_reduce`` per
parameter), so a group whose trace names ``n`` tensors is ``n`` all-reduces of an ``n``-th of
its bytes each (equal sizes: an assumption, as the trace records the group's total only); a
copy also adds its ``n`` tensors to the holding layer's ``param_tensors`` (the step's
per-tensor cost).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from sim.trace.schema import Trace


def stage_of_layers(boundaries: Sequence[int], n_layers: int) -> list[int]:
    """The stage of every layer of the chain, from the stages' start layers.

    Example:
        >>> stage_of_layers([0, 2, 3], 5)
        [0, 0, 1, 2, 2]
    """
    starts = list(boundaries)
    return [sum(1 for b in starts[1:] if b <= i) for i in range(n_layers)]


def place_shared(
    trace: Trace, boundaries: Sequence[int], stage_rank: Sequence[int]
) -> tuple[Trace, tuple[tuple[tuple[int, ...], float], ...]]:
    """``trace`` with a copy of each shared group on every further rank holding it, and the
    all-reduces that keep the copies equal.

    Args:
        trace: the chain (one tensor rank's), shared groups counted once.
        boundaries: start layer of each stage.
        stage_rank: the rank (GPU of a pipeline replica) of each stage.

    Returns:
        ``(trace, groups)``: the copies' bytes added to the first holding layer on each
        further rank; per group spanning ranks, ``(stages, grad_bytes)`` with, per holding
        rank, its last stage chunk (where it all-reduces: module docstring), ascending
        (``PipelineRuntime.tied_groups``); a group of ``n > 1`` named tensors is ``n``
        entries of ``grad_bytes / n`` (module docstring).

    Example (a head tied to the embedding, 4 layers on 2 stages):
        >>> from sim.trace.schema import LayerProfile, SharedParams
        >>> layers = tuple(LayerProfile(f"l{i}", 1, 1, 100, 0, 0) for i in range(4))
        >>> t = Trace("t", layers, 1, "fp32", "cpu", shared=(SharedParams((0, 3), 60.0),))
        >>> placed, groups = place_shared(t, [0, 2], [0, 1])
        >>> [x.param_bytes for x in placed.layers], groups
        ([100, 100, 100, 160.0], (((0, 1), 60.0),))
        >>> two = replace(t, shared=(SharedParams((0, 3), 60.0, ("0.w", "0.b")),))
        >>> place_shared(two, [0, 2], [0, 1])[1]
        (((0, 1), 30.0), ((0, 1), 30.0))
    """
    stage = stage_of_layers(boundaries, len(trace.layers))
    extra = [0.0] * len(trace.layers)
    tensors = [0] * len(trace.layers)
    groups = []
    for g in trace.shared:
        first_on: dict[int, int] = {}  # rank -> first holding layer there
        for layer in g.layers:
            first_on.setdefault(stage_rank[stage[layer]], layer)
        if len(first_on) < 2:
            continue
        for layer in list(first_on.values())[1:]:
            extra[layer] += g.param_bytes
            tensors[layer] += len(g.names)
        last = {r: max(s for s, r2 in enumerate(stage_rank) if r2 == r) for r in first_on}
        n = max(1, len(g.names))
        groups += [(tuple(sorted(last.values())), float(g.param_bytes) / n)] * n
    if not groups:
        return trace, ()
    layers = tuple(
        replace(x, param_bytes=x.param_bytes + e, param_tensors=_plus(x.param_tensors, n))
        if e
        else x
        for x, e, n in zip(trace.layers, extra, tensors, strict=True)
    )
    return replace(trace, layers=layers), tuple(groups)


def _plus(count: float | None, more: int) -> float | None:
    """A layer's ``param_tensors`` with ``more`` copied tensors (unknown stays unknown)."""
    return None if count is None else count + more
