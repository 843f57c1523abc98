"""The optimizer step's memory passes on the GPU as a framework runs them.

A memory plan's ``optimizer_s`` is the fused update alone
(:func:`sim.memory.states.optimizer_step_s`: ``grad + 2 x optimizer + weight`` bytes per
parameter it updates). Around it a framework runs further memory-bound kernels each iteration,
with the device otherwise idle (they are on the compute stream between the backward and the
next forward; charged at the step):

* **per updated parameter** (the optimizer's own loops): a mixed-precision step's copies,
  unscaling, norm and copy back (``step_extra_bytes`` of the profile with 16-bit gradients;
  ``main_grad_step_bytes`` where the gradients accumulate in fp32 ``main_grad`` buffers). With
  the optimizer state sharded over ``w`` replicas (the distributed optimizer, ZeRO-1) these run
  on the replica's shard only.
* **over the whole local gradient buffer** (``grad_buffer_passes``: passes of the plan's
  ``grad_bytes``, ``(always, more when w > 1)``): zeroing it before the forward, checking it
  before the reduction, scaling it by ``1/w``. These run over every gradient the rank
  holds, sharded optimizer or not (ZeRO-1 keeps the gradients whole until they are
  reduce-scattered).

Every pass runs at the rate the memory policy timed the fused update (its bytes over its
``optimizer_s``), so the step's parts share one bandwidth convention. Steps on the host and
FSDP / ZeRO-3 plans (their own paths) are left as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.memory.plan import StagePlan
from sim.memory.states import StateBytes, stretched_step_s


@dataclass(frozen=True)
class StepWork:
    """What a framework's step moves besides the fused update (module doc).

    Attributes:
        extra_bytes: bytes per updated parameter with 16-bit gradients.
        main_grad_extra_bytes: bytes per updated parameter with fp32 main gradients for
            16-bit weights (None: ``extra_bytes`` as well).
        reduce_bytes: ``(always, more when w > 1)`` bytes per parameter around the gradient
            reduction (not on a sharded plan: its reduction is the reduce-scatter).
        grad_passes: ``(always, more when w > 1)`` passes over the local gradient buffer.
    """

    extra_bytes: float = 0.0
    main_grad_extra_bytes: float | None = None
    reduce_bytes: tuple[float, float] = (0.0, 0.0)
    grad_passes: tuple[float, float] = (0.0, 0.0)

    def per_param(self, state: StateBytes, dp_width: int, sharded: bool) -> float:
        """Bytes per updated parameter beyond the fused update's."""
        fp32_main = state.grad >= 4 > state.weight
        extra = self.extra_bytes
        if fp32_main and self.main_grad_extra_bytes is not None:
            extra = self.main_grad_extra_bytes
        if sharded:
            return extra
        always, with_dp = self.reduce_bytes
        return extra + always + (with_dp if dp_width > 1 else 0.0)

    def passes(self, dp_width: int) -> float:
        """Passes over the whole local gradient buffer."""
        always, with_dp = self.grad_passes
        return always + (with_dp if dp_width > 1 else 0.0)


def step_time_s(plan: StagePlan, state: StateBytes, extra_bytes: float) -> StagePlan:
    """``plan`` with its GPU optimizer step scaled from the fused kernel's traffic
    (``grad + 2 x optimizer + weight`` bytes per parameter,
    :func:`sim.memory.states.optimizer_step_s`) to that plus ``extra_bytes``, for 16-bit
    weights (mixed precision) only; a step on the host or a sharded one is unchanged."""
    if extra_bytes <= 0 or state.weight >= 4 or plan.optimizer_s <= 0 or _sharded(plan):
        return plan
    return replace(plan, optimizer_s=stretched_step_s(plan.optimizer_s, state, extra_bytes))


def with_step_work(plan: StagePlan, state: StateBytes, work: StepWork, dp_width: int) -> StagePlan:
    """``plan`` with the step's memory passes of ``work`` added to its ``optimizer_s``
    (module doc), for 16-bit weights and a step on the GPU whose update is sharded over the
    replicas (the distributed optimizer) or not at all; else ``plan`` unchanged.

    Example (1e9 parameters, bf16 weights and fp32 main gradients, Adam: the fused update
    moves 4 + 2 x 12 + 2 = 30 B each; 8 B more per parameter and 2 passes of the 4 GB
    gradient buffer add (8e9 + 8e9) / 30e9 of the update's time):
        >>> p = StagePlan(act_bytes=0.0, resident_act_bytes=0.0, grad_bytes=4e9,
        ...               optimizer_bytes=12e9, optimizer_s=3.0)
        >>> w = StepWork(main_grad_extra_bytes=8.0, grad_passes=(2.0, 2.0))
        >>> round(with_step_work(p, StateBytes(2, 4, 12), w, 1).optimizer_s, 6)
        4.6
    """
    if state.weight >= 4 or plan.optimizer_s <= 0 or plan.host_optimizer_s > 0:
        return plan
    if plan.fsdp is not None or plan.scatter_bytes > 0 or plan.gather_bytes > 0:
        return plan
    if state.optimizer <= 0 or plan.optimizer_bytes <= 0:
        return plan
    updated = plan.optimizer_bytes / state.optimizer
    fused = state.update_bytes
    rate_Bps = updated * fused / plan.optimizer_s
    extra = updated * work.per_param(state, dp_width, plan.dp_sharded)
    extra += work.passes(dp_width) * plan.grad_bytes
    if extra <= 0:
        return plan
    return replace(plan, optimizer_s=plan.optimizer_s + extra / rate_Bps)


def _sharded(plan: StagePlan) -> bool:
    return plan.dp_sharded or plan.scatter_bytes > 0 or plan.gather_bytes > 0


def shard_optimizer(plan: StagePlan, dp_width: int) -> StagePlan:
    """``plan`` with its optimizer state, update and the update's fp32 gradient copy
    (``step_grad_share``, :mod:`sim.memory.step_moment`) split ``dp_width`` ways (ZeRO stage 1:
    Rajbhandari et al. SC'20 §5.1, P_os; Megatron-LM ``DistributedOptimizer``; the routed
    experts' fewer replicas not told apart here: an assumption, as for the state)."""
    return replace(
        plan,
        optimizer_bytes=plan.optimizer_bytes / dp_width,
        optimizer_s=plan.optimizer_s / dp_width,
        dp_sharded=True,
        step_grad_share=plan.step_grad_share / dp_width,
        notes={**plan.notes, "distributed_optimizer": f"state and step 1/{dp_width}"},
    )
