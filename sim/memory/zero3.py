"""Policy ``zero3`` (ZeRO-3, Rajbhandari et al. SC'20 §5; ZeRO-Infinity SC'21 §5 for the CPU
offload form; memory.md §1, §5.2): parameters, gradients and optimizer state partitioned over the
data-parallel group.

``zero3[:offload][:recompute]``:

* **Partitions** (ZeRO §5.1-5.3, ``P_os+g+p``): each of the ``w`` replicas of a stage owns
  ``P / w`` of its parameters with their 16-bit gradient and fp32 optimizer state: ``16P / w``
  bytes of model state per replica with mixed-precision Adam (memory.md §1).
* **All-gather before use** (ZeRO §7.2.2): before each F and each B the stage's 16-bit
  parameters are all-gathered (``2P`` bytes, layer by layer with prefetch; the engine starts
  the next action's gather while the current one runs, as DeepSpeed's prefetcher does with
  ``stage3_prefetch_bucket_size``), used and freed: only the gathered parameters of the
  current and the prefetched layer are live, ``2 * largest layer``.
* **Reduce-scatter after the backward**: each B reduce-scatters the stage's gradients
  (``2P`` bytes) through a reduce bucket (DeepSpeed's ``reduce_bucket_size``, 5e8 elements).
  Per iteration with one micro-batch a replica moves ``3 * 2P`` bytes through its collectives,
  1.5x the ``2 * 2P`` of DP's all-reduce (ZeRO §7.2.2: "3Ψ ... 1.5x").
* **offload** (ZeRO-Infinity's CPU form, ``offload_optimizer`` and ``offload_param`` to
  ``cpu``): the partition's optimizer state, fp32 gradients and 16-bit parameters live in host
  DRAM (``18P / w`` bytes with mixed-precision Adam, :func:`sim.memory.deepspeed.zero3_offload_host`);
  the partition is copied up before each gather, the gradient partition
  goes down after each reduce-scatter, and CPU Adam updates it in place (in the server's
  CPU-Adam pool, :mod:`sim.memory.host_adam`). Nothing of the model state stays on the GPU.
* **recompute**: full activation checkpointing of every layer as well.

With ``w = 1`` nothing is partitioned: ``zero3`` is ``none`` and ``zero3:offload`` keeps the
parameters on the host and fetches them before every action.

With expert parallelism (DeepSpeed-MoE, ``deepspeed/moe/utils.py::
split_params_into_different_moe_groups_for_optimizer``: expert parameters form their own
parameter groups, partitioned over the expert-data-parallel process group) the routed experts'
share ``f`` of a stage is partitioned over the ``w_e`` ranks holding the same experts:
``P ((1 - f)/w + f/w_e)`` owned, and their gathers and reduce-scatters run over that group
(:mod:`sim.engine.partitioned`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sim.memory.base import MemoryPolicy
from sim.memory.compose import describe
from sim.memory.context import StageContext
from sim.memory.deepspeed import zero3_offload_host
from sim.memory.estimate import copy_s
from sim.memory.host_adam import adam_pool, adam_rate, pool_sharers
from sim.memory.plan import StagePlan
from sim.memory.states import StateBytes, optimizer_step_s
from sim.memory.zero_offload import (
    RECOMPUTE,
    REDUCE_BUCKET_ELEMS,
    base_plan,
    parse_options,
    with_overhead,
)

OFFLOAD = "offload"


def partition_states(ctx: StageContext, base: StagePlan, offload: bool) -> tuple[StagePlan, float]:
    """``base`` with ZeRO-3's partitioned model states (module doc), and the estimated seconds
    added per iteration (exposed gathers are left to the engine; this counts the host step and
    the GPU step's change)."""
    w, P = ctx.dp_width, ctx.params
    f = ctx.expert_share
    own = P * ((1.0 - f) / w + f / ctx.expert_replicas)
    d, g, o = ctx.state.weight, ctx.state.grad, ctx.state.optimizer
    largest = max((layer.param_bytes for layer in ctx.layers), default=0.0)
    gathered = P * d if w > 1 else 0.0
    versions = (ctx.weight_versions - 1) * own * d
    gpu: dict[str, Any]
    host: dict[str, Any]
    if offload:
        gpu = dict(weight_bytes=versions, grad_bytes=0.0, optimizer_bytes=0.0, optimizer_s=0.0)
        host = dict(
            host_bytes=zero3_offload_host(own) if o >= 12 else own * (d + g + o),
            host_optimizer_s=own / adam_rate(ctx),
            host_optimizer_pool=adam_pool(ctx),
            fetch_bytes=own * d,
            fetch_source=ctx.host,
            fetch_live_bytes=0.0 if w > 1 else min(own * d, 2 * largest),
            writeback_bytes=own * g,
        )
    else:
        hbm = ctx.topology.gpu(ctx.gpu_index).memory_bound_Bps
        gpu = dict(
            weight_bytes=own * d + versions,
            grad_bytes=own * g,
            optimizer_bytes=own * o,
            optimizer_s=optimizer_step_s(own, hbm, ctx.state),
        )
        host = {}
    plan = replace(
        base,
        **gpu,
        **host,
        gather_bytes=gathered,
        gather_live_bytes=min(gathered, 2 * largest),
        scatter_bytes=P * g if w > 1 else 0.0,
        grad_bucket_bytes=min(P, REDUCE_BUCKET_ELEMS) * g if w > 1 or offload else None,
        dp_sharded=w > 1,
        dp_grad_bytes=P * g,
    )
    added = plan.host_optimizer_s + plan.optimizer_s - base.optimizer_s
    if offload:
        added += 2 * ctx.microbatches * copy_s(ctx, ctx.host, ctx.gpu, own * d, ctx.host_sharers)
    return plan, added


class Zero3Policy(MemoryPolicy):
    """ZeRO-3 (module doc).

    Args:
        offload: optimizer state, gradients and parameters of the partition in host DRAM
            (ZeRO-Infinity with CPU offload).
        recompute: checkpoint every layer's activations too.
    """

    name = "zero3"
    shards_states = True
    shards_experts = True
    description = "ZeRO-3: parameters, gradients, optimizer state partitioned (':offload': host)"

    def __init__(self, offload: bool = False, recompute: bool = False):
        self.offload, self.recompute = offload, recompute
        self.mode = "full" if recompute else None

    @classmethod
    def from_args(cls, args: list[str]) -> Zero3Policy:
        size, words = parse_options(cls.name, args, (OFFLOAD, RECOMPUTE))
        if size is not None:
            raise ValueError(f"use zero3[:offload][:recompute], got {':'.join(args)!r}")
        return cls(OFFLOAD in words, RECOMPUTE in words)

    def plan_all(self, contexts, fixed=()) -> list[StagePlan]:
        out = []
        for ctx in contexts:
            plan, added = partition_states(ctx, base_plan(ctx, self.recompute), self.offload)
            added += (pool_sharers(contexts, ctx) - 1) * plan.host_optimizer_s
            added += ctx.microbatches * plan.recompute_s
            choice = f"zero3 1/{ctx.dp_width}" + (", offload" if self.offload else "")
            out.append(
                describe(
                    ctx,
                    with_overhead(ctx, plan),
                    choice + (", full recompute" if self.recompute else ""),
                    added,
                    state_gib_per_rank=round((plan.static_gpu_bytes + plan.host_bytes) / 2**30, 3),
                    host_state_gib=round(plan.host_bytes / 2**30, 3),
                )
            )
        return out

    def min_state_bytes_per_param(
        self, states: StateBytes, dp_width: int, versions: int, version_bytes: float
    ) -> float:
        """A ``1/w`` shard of every state on the GPU; nothing with ``:offload``."""
        return 0.0 if self.offload else states.total / dp_width

    def plan(self, ctx: StageContext) -> StagePlan:
        return self.plan_all([ctx])[0]
