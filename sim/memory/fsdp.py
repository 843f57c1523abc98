"""FSDP2 (``torch.distributed.fsdp.fully_shard``) as torchtitan runs it: the memory plan.

A point that runs FSDP (:meth:`~sim.framework.base.Framework.runs_fsdp`: ``dp_shard > 1``;
torchtitan also with ``cp > 1`` at ``dp_shard = 1``, and over a shard of one for replicas
alone) shards its model states over the ``dp_shard x cp`` ranks of its shard group
(:attr:`~sim.parallel.layout.ParallelLayout.shard_size`) and replicates them over the
``dp_replicate`` groups (HSDP). The memory policy decides the activations (``none``,
``recompute:...``); :func:`fsdp_plans` then replaces the model states of its plans by FSDP's,
as the framework's :class:`FsdpSpec` says. The engine runs the per-unit collectives
(:mod:`sim.engine.fsdp`). Sources: the installed torch 2.13.0 (``git_version cf30153``,
``torch/distributed/fsdp/_fully_shard/``) and ``pytorch/torchtitan@b5bcd76``.

* **Units**: one ``fully_shard`` call is one parameter group with one all-gather and one
  reduce-scatter (``_fully_shard.py`` docstring, ``FSDPParamGroup``). torchtitan wraps every
  transformer block, the token embedding and ``[norm, output]``
  (``torchtitan/distributed/fsdp.py::apply_fsdp_to_decoder``): here every layer of a stage is
  a unit.
* **Persistent bytes** per parameter on a rank: its ``1/S`` shard of the parameter, gradient
  and optimizer state (``S`` the shard group). torchtitan keeps them in ``training.dtype =
  float32`` with ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``
  (``torchtitan/config/configs.py`` and ``distributed/fsdp.py``): fp32 parameter (it is the
  master copy: "FSDP does not require any extra memory to keep a high-precision copy",
  ``_fsdp_api.py``), fp32 gradient, Adam's two moments: ``16/S`` bytes (:attr:`FsdpSpec.fp32_shards`).
* **Unsharded bytes** (the engine's ledger): a unit's all-gather output in ``param_dtype``
  (``foreach_all_gather``), copied out into its unsharded parameters (``2 P`` more), the
  output freed after the next unit's copy-out; the unsharded parameters freed after the
  unit's forward when ``reshard_after_forward`` is True (re-gathered for its backward), kept
  when False, resharded to a world of ``k`` when an int (``P/k`` held; the backward gathers
  over ``k`` ranks). In backward the unit's gradients in ``param_dtype``, copied into a
  ``reduce_dtype`` reduce-scatter input (``foreach_reduce``), live until its reduce-scatter
  ends.
* **Routed experts** shard over the ranks of the shard group holding the same experts
  (torchtitan's expert-FSDP mesh, ``shard_placement_fn``; :func:`~sim.parallel.folding.
  expert_shard_group`).
* **Pipeline parallelism** (torch pipelining, ``pipelining/stage.py`` 781-855, 1164-1195):
  every micro-batch's backward runs with ``set_requires_gradient_sync(False)`` and
  ``set_reshard_after_backward(False)``: the stage's parameters stay unsharded from its first
  forward to the end of the step, its gradients accumulate unsharded in ``reduce_dtype``, and
  every unit's reduce-scatter runs at the step (:attr:`FsdpPlan.accumulate`); torchtitan also
  sets ``reshard_after_forward = False`` with PP (``fsdp.py`` 112-136).
* **Step**: the fused update of the rank's shard (``grad + 2 x optimizer + weight`` bytes per
  shard parameter) plus what the framework's step moves besides (:attr:`FsdpSpec.step`,
  :mod:`sim.memory.fsdp_step`: Megatron-FSDP's gradient cast, norm, main-weight copy and
  zeroing; torchtitan's gradient clipping and fused AdamW's read of the fp32 weight), at the
  GPU's memory-bound rate.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.memory.compose import gib
from sim.memory.context import StageContext
from sim.memory.estimate import activation_peak_bytes, budget_bytes, planned_peak_bytes
from sim.memory.fsdp_inflight import step_peak_bytes
from sim.memory.fsdp_step import FsdpStepWork
from sim.memory.fsdp_units import FsdpPlan, FsdpUnit, Reshard
from sim.memory.plan import StagePlan
from sim.memory.reserve import overhead
from sim.memory.states import StateBytes, optimizer_step_s, stretched_step_s
from sim.parallel.layout import ParallelLayout
from sim.trace.schema import layer_kind

__all__ = ["FsdpPlan", "FsdpSpec", "FsdpUnit", "fsdp_plan", "fsdp_problem", "state_split"]


@dataclass(frozen=True)
class FsdpSpec:
    """How a framework runs FSDP (its profile's ``fsdp`` setting, cited there).

    Attributes:
        param_bytes: bytes per element of the gathered parameters (``param_dtype``); None:
            the training dtype.
        reduce_bytes: bytes per element of the reduce-scatter (``reduce_dtype``); None: as
            ``param_bytes``.
        fp32_shards: the sharded parameters and gradients are fp32 (torchtitan's
            ``training.dtype = float32``; the parameter is the master copy); False: the
            training dtype's state bytes (a ZeRO-3 split of :class:`~sim.memory.states.StateBytes`).
        reshard_after_forward: the blocks' policy without pipeline parallelism.
        reshard_with_pp: the blocks' policy with pipeline parallelism.
        head_reshard: the output layer's (torchtitan keeps ``[norm, output]`` unsharded:
            "FSDP would prefetch them immediately").
        accumulate_with_pp: with pipeline parallelism the gradients accumulate unsharded
            and are reduce-scattered at the step (torch pipelining).
        compute_copies: torch FSDP2's all-gather copy-out and reduce-scatter copy-in run on
            the compute stream (:class:`~sim.memory.fsdp_units.FsdpPlan` ``copy_Bps``);
            False: not timed.
        step: what its optimizer step moves per shard parameter besides the fused update
            (:mod:`sim.memory.fsdp_step`); the default: nothing.
    """

    param_bytes: float | None = None
    reduce_bytes: float | None = None
    fp32_shards: bool = False
    reshard_after_forward: Reshard = True
    reshard_with_pp: Reshard = True
    head_reshard: Reshard = True
    accumulate_with_pp: bool = False
    compute_copies: bool = False
    step: FsdpStepWork = FsdpStepWork()


def _units(ctx: StageContext, expert_bytes: tuple[float, ...], spec: FsdpSpec) -> list[FsdpUnit]:
    """One unit per layer of the stage (module doc), with its reshard policy."""
    pp = ctx.stages > 1
    out = []
    for i, layer in enumerate(ctx.layers):
        experts = expert_bytes[i] if i < len(expert_bytes) else 0.0
        if layer_kind(layer.name) == "head":
            reshard = spec.head_reshard
        else:
            reshard = spec.reshard_with_pp if pp else spec.reshard_after_forward
        out.append(
            FsdpUnit(
                (i,),
                (layer.param_bytes - experts) / ctx.dtype_bytes,
                experts / ctx.dtype_bytes,
                reshard,
            )
        )
    return out


def state_split(ctx: StageContext, spec: FsdpSpec) -> tuple[float, float, float]:
    """``(weight, gradient, optimizer)`` bytes per sharded parameter (module doc)."""
    st = ctx.state
    if spec.fp32_shards and st.weight < 4:
        return 4.0, 4.0, float(max(0, st.optimizer - 4))
    return float(st.weight), float(st.grad), float(st.optimizer)


def fsdp_plan(
    ctx: StageContext,
    plan: StagePlan,
    spec: FsdpSpec,
    lay: ParallelLayout,
    expert_bytes: tuple[float, ...] = (),
) -> StagePlan:
    """``plan`` (a policy's, for the activations) with FSDP's model states (module doc).

    Args:
        ctx: the stage replica.
        plan: the memory policy's plan.
        spec: the framework's FSDP.
        lay: the point's layout (``dp_shard``, ``cp``, ``ep``...).
        expert_bytes: routed-expert parameter bytes of each layer of the stage on the rank.
    """
    shard = lay.shard_size  # dp_shard x cp: where the framework runs FSDP (runs_fsdp)
    expert_shard = max(1, shard * lay.tp // (lay.ep * lay.expert_tp))
    units = _units(ctx, expert_bytes, spec)
    dense = sum(u.params for u in units)
    expert = sum(u.expert_params for u in units)
    owned = dense / shard + expert / expert_shard
    frac = ctx.trainable_params / ctx.params if ctx.params else 1.0
    w, g, o = state_split(ctx, spec)
    hbm = ctx.topology.gpu(ctx.gpu_index).memory_bound_Bps
    param_b = spec.param_bytes or float(ctx.dtype_bytes)
    fsdp = FsdpPlan(
        tuple(units),
        param_b,
        spec.reduce_bytes or param_b,
        shard,
        expert_shard,
        accumulate=spec.accumulate_with_pp and ctx.stages > 1,
        copy_Bps=hbm if spec.compute_copies else 0.0,
        shard_bytes=w,
    )
    sharded = StateBytes(int(w), int(g), int(o))
    step_s = optimizer_step_s(owned * frac, hbm, sharded)
    if step_s > 0:  # the framework's step work, at the fused update's rate
        step_s = stretched_step_s(step_s, sharded, spec.step.bytes_per_param(g))
    out = replace(
        plan,
        weight_bytes=owned * w,
        grad_bytes=owned * frac * g,
        optimizer_bytes=owned * frac * o,
        optimizer_s=step_s,
        dp_sharded=True,
        gather_bytes=0.0,
        gather_live_bytes=None,
        scatter_bytes=0.0,
        grad_bucket_bytes=0.0,
        fsdp=fsdp,
    )
    over = overhead(ctx, activation_peak_bytes(out, ctx), 0.0)  # no DDP bucket
    out = replace(
        out,
        reserve_bytes=over["reserve_bytes"],
        allocator_bytes=over["allocator_bytes"],
        working_bytes=over["working_bytes"],
    )
    peak = planned_peak_bytes(out, ctx) + step_peak_bytes(fsdp)
    notes = {
        **plan.notes,
        "peak_gib": gib(peak),
        "fits": bool(peak <= budget_bytes(ctx)),
        "fsdp": f"{len(units)} units sharded over {shard}"
        + (f" (experts over {expert_shard})" if expert else "")
        + (f", replicated {lay.dp_replicate}x (HSDP)" if lay.dp_replicate > 1 else "")
        + (", gradients accumulated unsharded, reduced at the step" if fsdp.accumulate else ""),
    }
    notes.pop("saved_gib", None)
    return replace(out, notes=notes)


def fsdp_problem(lay: ParallelLayout) -> str:
    """Why FSDP cannot shard as ``lay`` says, or ``""``: with expert parallelism the expert
    groups must sit inside a shard group (torchtitan carves EP out of ``dp_shard x cp``)."""
    if lay.shard_size < 2 or lay.ep < 2:
        return ""
    if (lay.shard_size * lay.tp) % (lay.ep * lay.expert_tp):
        return (
            f"expert_parallel {lay.ep} x expert_tensor_parallel {lay.expert_tp} must divide "
            f"dp_shard x context_parallel x tensor_parallel = {lay.shard_size * lay.tp}"
        )
    return ""


class FsdpStates:
    """A memory policy's plans with FSDP's model states (:func:`fsdp_plan` on each), for the
    point's planning (:func:`sim.point.simulate.resolve`); not a registered policy.

    Args:
        inner: the point's memory policy (its activations).
        spec: the framework's FSDP.
        lay: the point's layout.
    """

    def __init__(self, inner, spec: FsdpSpec, lay: ParallelLayout):
        self.inner, self.spec, self.lay = inner, spec, lay

    def plan_all(self, contexts: list[StageContext]) -> list[StagePlan]:
        """Every context's plan: the inner policy's, with FSDP's states."""
        plans = self.inner.plan_all(contexts)
        return [
            fsdp_plan(c, p, self.spec, self.lay, c.layer_expert_bytes)
            for c, p in zip(contexts, plans, strict=True)
        ]
