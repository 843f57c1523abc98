"""Policy ``zero_offload`` (ZeRO-Offload, Ren et al. 2021; memory.md §5.2): optimizer on the host.

The GPU keeps the 16-bit weights (every version the schedule stashes) and the 16-bit gradient
buffer; the host keeps the fp32 master weights and Adam moments (12 B/param) plus a gradient
copy (2 B/param). At the optimizer step the gradients go to the host over PCIe, the host runs
CPU Adam (``Host.adam_params_per_s``; one socket runs one stage's step at a time), and the
updated 16-bit weights come back: ``4 * params`` bytes over PCIe per step, the paper's minimum.
With data parallelism the optimizer state is sharded (ZeRO-2): gradients are reduce-scattered,
each replica moves and updates ``1/w`` of them, and the weights are all-gathered.
Delayed parameter update (DPU) is not modelled: the host step is on the critical path.
"""

from __future__ import annotations

from dataclasses import replace

from sim.memory.base import MemoryPolicy, StageContext
from sim.memory.compose import describe
from sim.memory.estimate import copy_s
from sim.memory.plan import StagePlan, Transfer

HOST_GRAD_BYTES = 2
"""Bytes per parameter of the gradient copy on the host (16-bit, memory.md §5.2)."""


def adam_rate(ctx: StageContext) -> float:
    """CPU Adam throughput of the stage's host socket, parameters per second."""
    return ctx.topology.host(ctx.host).adam_params_per_s


def offload_states(ctx: StageContext, base: StagePlan) -> tuple[StagePlan, float]:
    """``base`` with the optimizer state and step moved to the host, and the estimated seconds
    the step adds per iteration (copies + CPU Adam - the GPU step it replaces)."""
    own = ctx.params / ctx.dp_width
    grads = own * ctx.state.grad
    plan = replace(
        base,
        optimizer_bytes=0.0,
        optimizer_s=0.0,
        host_bytes=own * (ctx.state.optimizer + HOST_GRAD_BYTES),
        host_optimizer_s=own / adam_rate(ctx),
        step_transfers_before=(Transfer(ctx.gpu, ctx.host, grads, f"grads s{ctx.stage}"),),
        step_transfers_after=(
            Transfer(ctx.host, ctx.gpu, own * ctx.state.weight, f"weights s{ctx.stage}"),
        ),
        dp_sharded=ctx.dp_width > 1,
        dp_grad_bytes=ctx.params * ctx.state.grad,
    )
    added = (
        copy_s(ctx, ctx.gpu, ctx.host, grads)
        + plan.host_optimizer_s
        + copy_s(ctx, ctx.host, ctx.gpu, own * ctx.state.weight)
        - base.optimizer_s
    )
    return plan, added


class ZeroOffloadPolicy(MemoryPolicy):
    """ZeRO-Offload: optimizer state and step on the host; activations stay resident."""

    name = "zero_offload"
    description = "optimizer state and Adam step on the host CPU (ZeRO-Offload)"

    def plan(self, ctx: StageContext) -> StagePlan:
        plan, added = offload_states(ctx, ctx.resident_plan())
        return describe(
            ctx, plan, "optimizer on host", added, host_state_gib=round(plan.host_bytes / 2**30, 3)
        )
