"""The host thread's issue of an overlapped forward/backward pair (Megatron's combined 1F1B).

An ``OVERLAP_F_B`` pair's two chains (:mod:`sim.engine.overlap`) share the rank's compute
stream, but not its host: Megatron-Core's combined 1F1B issues both actions from the rank's one
Python thread, layer by layer. ``TransformerModelChunkSchedulePlan.run`` pairs forward layer
``i`` with backward layer ``n - 1 - i`` and ``TransformerLayerSchedulePlan.run`` issues the
pair's sub-modules in turn: combine backward, attention forward, MLP backward, dispatch forward,
MLP weight gradient and dispatch backward, MLP and combine forward, attention backward
(NVIDIA/Megatron-LM@b0cc270, the 3rdparty of Megatron-Bridge v0.3.0,
``megatron/core/models/common/model_chunk_schedule_plan.py`` lines 190-254 and 413-486). The
host therefore spends the forward's and the backward's host seconds one after the other, and
a host sync inside the forward (a MoE layer's token counts read on the host) waits for the
backward's kernels issued before it as well.

:func:`pair_work` gives that issue as one :class:`~sim.hardware.host_ops.HostWork`: each layer's
forward part then its backward partner's (an approximation of the order above, which puts the
combine and MLP backward before the forward's dispatch: the forward's syncs here wait for less
than they do in Megatron), each part's device seconds scaled so that the pair's add up to the
overlapped pair's device time (the chains' elapsed time), since the chains already overlapped
them. The pair then ends no earlier than that work's device end (:meth:`HostWork.finish`), and
the host clock moves to its host end.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sim.engine.host import LayerPart
from sim.engine.stage_cost import StageCost
from sim.hardware.host_ops import HostWork
from sim.memory.plan import StagePlan

LayeredWork = Callable[[str, tuple[LayerPart, ...]], HostWork]
"""``(op, parts) -> HostWork``: a rank's :meth:`~sim.engine.host.HostThreads.layered`."""


def full_only(plan: StagePlan) -> bool:
    """Whether the plan's recompute, if any, re-runs whole layers only (no selective part),
    so that a forward and its recompute can be issued layer by layer."""
    return plan.recompute_regions == len(plan.recompute_layers)


def pair_parts(cost: StageCost, plan: StagePlan, op: str) -> tuple[LayerPart, ...]:
    """The layer parts the host issues for action ``op`` (``"F"`` or ``"B"``) of a pair on a
    stage of ``cost`` under ``plan``, as the engine issues the action alone: per layer where
    the stage has per-layer costs (a forward only when its recompute is of whole layers,
    :func:`full_only`: the checkpointed layers without autograd recording), else one part for
    the whole action, whose forward issues ``plan.recompute_ops`` of its ops without autograd
    recording (the engine's forward: :func:`~sim.engine.host.action_work` with
    ``nograd_ops``).

    Example: a stage without per-layer costs, 100 forward ops of which 40 recomputed.

    >>> plan = StagePlan(0.0, 0.0, recompute_ops=40.0, recompute_regions=1)
    >>> pair_parts(StageCost(1.0, 2.0, 0.0, 0.0, fwd_ops=100.0), plan, "F")[0].nograd_ops
    40.0
    """
    if op == "F" and cost.fwd_layers and full_only(plan):
        return cost.forward_parts(plan.recompute_layers)
    if op == "B" and cost.bwd_layers:
        return cost.backward_parts()
    if op == "F":
        return (LayerPart(cost.fwd_s, cost.fwd_ops, plan.recompute_ops, 0.0, 0.0, 0.0),)
    return (LayerPart(cost.bwd_s, cost.bwd_ops, 0.0, 0.0, 0.0, 0.0),)


def pair_work(
    layered: LayeredWork,
    forward: Sequence[LayerPart],
    backward: Sequence[LayerPart],
    device_s: float,
) -> HostWork:
    """The host's issue of a forward (its layers' parts in order) and a backward (its parts
    in autograd's order, last layer first) run as one overlapped pair whose device time is
    ``device_s`` seconds (module doc): forward part ``i`` then backward part ``i``, in turn.

    Args:
        layered: the rank's layer-by-layer host work (``HostThreads.layered`` for its GPU).
        forward, backward: the two actions' :class:`~sim.engine.host.LayerPart` s.
        device_s: the overlapped pair's device seconds (each part's share of the two
            actions' device seconds, times it).

    Example: two one-layer actions with 1 ms of host each and 2 ms of device together,
    overlapped into 1.6 ms: a host free with its device at 0 issues both by 2 ms, so the pair
    ends at 2 ms plus the backward's last op (its 0.8 ms over its 100 ops), not at 1.6 ms.

    >>> from sim.engine.host import layered_work
    >>> from sim.hardware.host_ops import HostOverhead
    >>> h = HostOverhead(op_s=10e-6, backward_op_s=10e-6)
    >>> part = LayerPart(1e-3, 100.0, 0.0, 0.0, 0.0, 0.0)
    >>> w = pair_work(lambda op, p: layered_work(h, op, p), [part], [part], 1.6e-3)
    >>> [round(t * 1e6) for t in w.finish(0.0, 0.0)]
    [2008, 2000]
    """
    total = sum(p.device_s for p in forward) + sum(p.device_s for p in backward)
    scale = device_s / total if total > 0 else 0.0
    out = HostWork.device_only(0.0)
    works: dict[tuple[str, LayerPart], HostWork] = {}  # a stage's layers are mostly alike
    for i in range(max(len(forward), len(backward))):
        for op, parts in (("F", forward), ("B", backward)):
            if i < len(parts):
                part = parts[i]._replace(device_s=parts[i].device_s * scale)
                work = works.get((op, part))
                if work is None:
                    work = works[op, part] = layered(op, (part,))
                out = out.then(work)
    return out
