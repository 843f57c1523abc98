"""Policy ``dist_opt``: Megatron-LM's distributed optimizer (ZeRO stage 1), optionally with
full activation recompute.

``--use-distributed-optimizer`` (Megatron-LM ``megatron/core/distributed/`` and
``megatron/core/optimizer/distrib_optimizer.py``; ZeRO's ``P_os``, Rajbhandari et al.
arXiv:1910.02054 §5.1): every replica keeps the 16-bit weights and gradients of its stage whole,
but only ``1/w`` of the fp32 master weights and Adam moments, ``w`` being the replicas that hold
the same weights: the ``dp * cp`` data- and context-parallel ranks for the dense weights, the
``dp * cp / ep`` expert-data-parallel ranks for the routed experts' (:mod:`sim.parallel.expert`).
At the step the gradients are reduce-scattered (each replica updates its shard) and the updated
weights all-gathered: the same bytes as an all-reduce, split around the optimizer step (the
engine's ``dp_sharded`` path; the experts' part is reduced over its own group). The optimizer
step runs on the shard only, and copies only the shard's gradients to fp32
(``StagePlan.step_grad_share``, :mod:`sim.memory.step_moment`).

``dist_opt:instances=N`` (prefix of any form above): Megatron-Core's
``--num-distributed-optimizer-instances N``: the ``w`` replicas form ``N`` instances of ``w/N``
each, and every instance keeps a whole copy of the optimizer state sharded over its ``w/N``
ranks (``1/(w/N)`` of it per rank); the gradients are reduce-scattered inside an instance and
the shard all-reduced across instances, the parameters all-gathered inside it
(NVIDIA/Megatron-LM@d98e8a64 ``megatron/core/parallel_state.py`` lines 920-929,
``megatron/core/distributed/param_and_grad_buffer.py`` lines 676-745). The optimizer bytes and
the step's shard follow that; the engine times the reduce-scatter and all-gather over all ``w``
replicas (the reader marks that as an approximation).

``dist_opt:recompute``: with full activation recompute of every layer of a stage
(:mod:`sim.memory.recompute`), as ``--recompute-granularity full``.
``dist_opt:recompute:<choice>``: with any of :mod:`sim.memory.recompute`'s choices instead
(``dist_opt:recompute:selective:core_attn,mlp``: Megatron's ``--recompute-modules``;
``dist_opt:recompute:full:N``; ``dist_opt:recompute:sac``).
"""

from __future__ import annotations

from dataclasses import replace

from sim.memory.base import MemoryPolicy
from sim.memory.compose import activation_plan, describe, resident_plan
from sim.memory.context import StageContext
from sim.memory.plan import StagePlan
from sim.memory.recompute import RecomputePolicy
from sim.memory.stash import stash
from sim.memory.states import StateBytes, optimizer_step_s, stage_state_bytes_per_param

RECOMPUTE = "recompute"
INSTANCES = "instances="


class DistOptPolicy(MemoryPolicy):
    """Optimizer state sharded over the replicas (module doc).

    Args:
        recompute: full activation recompute as well.
        choice: a recompute choice instead (:class:`~sim.memory.recompute.RecomputePolicy`).
    """

    name = "dist_opt"
    description = "Megatron's distributed optimizer (ZeRO-1): optimizer state sharded"
    plans_to_capacity = False  # no plan reads ctx.capacity_bytes (only describe's notes)

    def __init__(
        self, recompute: bool = False, choice: RecomputePolicy | None = None, instances: int = 1
    ):
        self.recompute, self.choice, self.instances = recompute, choice, instances

    @classmethod
    def from_args(cls, args: list[str]) -> DistOptPolicy:
        if args[:1] and args[0].startswith(INSTANCES):
            n = args[0][len(INSTANCES) :]
            if not n.isdigit() or int(n) < 1:
                raise ValueError(f"{INSTANCES}N takes a positive integer, got {args[0]!r}")
            inner = cls.from_args(args[1:])
            inner.instances = int(n)
            return inner
        if args[:1] == [RECOMPUTE] and len(args) > 1:
            return cls(True, RecomputePolicy.from_args(args[1:]))
        if args not in ([], [RECOMPUTE]):
            raise ValueError(
                f"use dist_opt, dist_opt:recompute or dist_opt:recompute:<recompute choice>, "
                f"got {':'.join(args)!r}"
            )
        return cls(bool(args))

    def min_state_bytes_per_param(
        self, states: StateBytes, dp_width: int, versions: int, version_bytes: float
    ) -> float:
        """Every state but the optimizer's whole; that a ``1/w`` shard (the routed experts
        shard over fewer replicas, so ``1/w`` is a lower bound)."""
        whole = stage_state_bytes_per_param(states, versions, version_bytes)
        return whole - states.optimizer + states.optimizer / max(1, dp_width // self.instances)

    def bound_recompute_mode(self) -> str | None:
        """``full`` with ``dist_opt:recompute`` (every layer of every stage recomputes, the
        blocks among them), else None."""
        return "full" if self.recompute else None

    def plan(self, ctx: StageContext) -> StagePlan:
        n = self.instances if ctx.dp_width % self.instances == 0 else 1
        w = ctx.dp_width // n  # the ranks of one instance shard its state (module doc)
        f = ctx.expert_share
        we = max(1, ctx.expert_replicas // n) if ctx.expert_replicas % n == 0 else 1
        share = (1.0 - f) / w + f / we  # of the parameters, hence of their gradients
        owned = ctx.trainable_params * share
        hbm = ctx.topology.gpu(ctx.gpu_index).memory_bound_Bps
        base = resident_plan(
            ctx,
            optimizer_bytes=owned * ctx.state.optimizer,
            optimizer_s=optimizer_step_s(owned, hbm, ctx.state),
            dp_sharded=w > 1,
            step_grad_share=share,  # its fp32 gradient copy: the shard's (sim.memory.step_moment)
        )
        choice = f"optimizer state sharded over {w} replicas"
        if n > 1:
            choice += f" of each of {n} instances"
        if f and we != w:
            choice += f" (routed experts over {we})"
        added = base.optimizer_s - resident_plan(ctx).optimizer_s
        if not self.recompute:
            return describe(ctx, base, choice, added)
        if self.choice is not None:
            st = self.choice.stash(ctx)
            plan = replace(activation_plan(ctx, st, base=base), dp_sharded=w > 1)
            return describe(
                ctx, plan, f"{choice}; {st.label}", added + ctx.microbatches * st.recompute_s
            )
        st = stash(ctx, full=range(len(ctx.layers)))
        plan = activation_plan(ctx, st, base=base)
        plan = replace(plan, dp_sharded=w > 1)
        return describe(
            ctx, plan, f"{choice}; {st.label}", added + ctx.microbatches * st.recompute_s
        )
