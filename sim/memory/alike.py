"""Plan each distinct stage context once: the data-parallel replicas and tensor ranks of a
cluster's stage have equal contexts but for their names, hence equal plans.

A job of thousands of GPUs has ``p x w x t`` stage contexts (:class:`~sim.memory.context.
StageContext`), one per stage replica and tensor rank; when the simulation is mirrored
(:mod:`sim.engine.symmetry`) planning each costs more than simulating the pipeline.
:func:`plan_alike` groups the contexts by everything a plan depends on except the replica's
index and its GPU's and host's names (the stage's layers are the stage's), plans the first of
each group, finalizes it (:func:`~sim.memory.compose.finalize_plans`) and gives it to the
group. It applies only where that is exact: a policy that plans each context on its own (the
base :meth:`~sim.memory.base.MemoryPolicy.plan_all`), and plans that keep everything on their
GPU (a plan naming a host or a peer GPU would name the first context's): otherwise None, and
the caller plans every context.
"""

from __future__ import annotations

from dataclasses import fields

from sim.hardware.parts import GPU
from sim.memory.base import MemoryPolicy
from sim.memory.compose import finalize_plans
from sim.memory.context import StageContext
from sim.memory.plan import StagePlan

_NAMES = frozenset({"replica", "gpu", "host", "layers", "order", "topology"})
"""Context fields left out of its kind: names, and what the stage index already fixes (its
layers and its ops, :func:`sim.point.stages.stage_contexts`)."""
_GPU_FIELDS = tuple(f.name for f in fields(GPU) if f.name not in ("name", "host"))
"""What a context's kind holds of its GPU: its description without its names."""


def plan_alike(policy: MemoryPolicy, contexts: list[StageContext]) -> list[StagePlan] | None:
    """The finalized plan of every context, planned once per kind (module doc), or None when
    that would not be exact or saves nothing."""
    if type(policy).plan_all is not MemoryPolicy.plan_all:
        return None
    own = [f.name for f in fields(StageContext) if f.name not in _NAMES]
    keys = [_kind(c, own) for c in contexts]
    first: dict[tuple, int] = {}
    for i, key in enumerate(keys):
        first.setdefault(key, i)
    if len(first) == len(contexts):
        return None
    unique = [contexts[i] for i in first.values()]
    planned = dict(zip(first, finalize_plans(unique, policy.plan_all(unique)), strict=True))
    if any(p.off_gpu for p in planned.values()):
        return None
    return [planned[key] for key in keys]


def _kind(ctx: StageContext, own: list[str]) -> tuple:
    """What ``ctx``'s plan depends on besides names (:data:`_NAMES`): its fields ``own``
    and its GPU's description (every field but the GPU's and its host's names)."""
    gpu = ctx.topology.gpu(ctx.gpu_index)
    return (*(getattr(ctx, f) for f in own), *(getattr(gpu, f) for f in _GPU_FIELDS))
