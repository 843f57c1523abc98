"""torchtitan (pytorch/torchtitan@b5bcd76): FSDP2 data parallelism with torch pipelining.

With ``dp_shard x cp > 1`` (torchtitan's ``data_parallel_shard_degree`` times
``context_parallel_degree``: its FSDP mesh is ``dp_shard x cp``, :data:`_SHARD_CP`, so with
context parallelism it shards at ``dp_shard = 1`` too) parameters, gradients and optimizer
state are sharded by ``fully_shard`` per transformer block, the token embedding and
``[norm, output]`` over the ``dp_shard x cp`` ranks of a shard group (:mod:`sim.memory.fsdp`:
bf16 all-gathers, fp32 reduce-scatters, fp32 shards; reshard after forward except the output
unit, never with PP), replicated over ``dp_replicate`` (HSDP). With ``dp_shard x cp = 1`` and
several replicas torchtitan@b5bcd76 runs the same ``fully_shard`` per block over a shard group
of one (HSDP, option ``data_parallel`` ``fully_shard``, :meth:`Torchtitan.runs_fsdp`): no
all-gather nor reduce-scatter, each unit's fp32 parameter cast to bf16 and copied into the
unsharded parameter on the compute stream (10 B per parameter against 4 B for the copy-out of
an all-gather: :meth:`sim.memory.fsdp_units.FsdpPlan.copy_out_bytes`), each unit's fp32
gradients all-reduced over the replicas after its backward; option ``data_parallel`` ``ddp``:
DDP in 100 MiB buckets, as torchtitan before e1847f439 ran it (``apply_ddp``:
``replicate(model, bucket_cap_mb=100)``). torch's pipeline schedules; the
embedding and the output layer counted as one layer each by the even split; the global gradient
norm all-reduced over the pipeline before the update. The step: ``clip_grad_norm_`` (a foreach
norm and an always-applied foreach multiply of the fp32 gradients) and fused AdamW, 40 B per
parameter it updates (:attr:`Torchtitan.step_extra_bytes`; with FSDP per shard parameter,
:mod:`sim.memory.fsdp_step`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

from sim.framework.base import Framework, Setting
from sim.framework.options import Option
from sim.framework.pytorch_ddp import TORCH_SCHEDULES
from sim.framework.step_work import StepWork
from sim.framework.torch_adamw import ADAMW_BYTES, adamw_extra_bytes
from sim.memory.fsdp import FsdpSpec
from sim.memory.fsdp_step import FsdpStepWork
from sim.parallel.layout import ParallelLayout
from sim.parallel.tp_overlap import ASYNC_TP, Implementation

_PP = "torchtitan/distributed/pipeline_parallel.py"
_COMPILE = "torchtitan/config/configs.py::CompileConfig; torchtitan/distributed/compile.py"
_FSDP = "torchtitan/distributed/fsdp.py"
_ALWAYS_FSDP = (
    "torchtitan@b5bcd76 torchtitan/models/llama3/parallelize.py 57-78 (apply_fsdp_to_decoder "
    "always: 'with shard_degree=1 it is a no-op for the all-gather'), distributed/fsdp.py "
    "32-62 (resolve_fsdp_mesh: DataParallelMeshDims(shard='dp_shard', replicate='dp_replicate'), "
    "spmd_backend 'spmd_types' by default: config/configs.py 172); since e1847f439 "
    "(2026-03-09, apply_replicate) and 00b7f5693 (2026-04-09, 'replace amp and replicate with "
    "fully_shard'); torch 2.13 fsdp/_fully_shard/_fsdp_init.py 139-146 (HSDPMeshInfo), "
    "_fsdp_param_group.py 388-403, 433-460 (a shard world of 1: no all-gather, the fp32 shard "
    "cast to bf16 and copied on the current stream), _fsdp_collectives.py 618-672 (no "
    "reduce-scatter: a copy; dist.all_reduce of the reduce_dtype output over the replicate "
    "group on the all-reduce stream)"
)

_SHARD_CP = (
    "torchtitan@b5bcd76 torchtitan/distributed/fsdp.py 32-62 (resolve_fsdp_mesh: "
    "DataParallelMeshDims(shard=('dp_shard', 'cp'), replicate='dp_replicate') when "
    "parallel_dims.cp_enabled, lines 54-62); distributed/parallel_dims.py 225-228 ('fsdp: "
    "This includes dp_shard and cp ... FSDP is also applied ... even if there may be no data "
    "parallelism'), 281, 319-323 (partial_dtensor: the 'fsdp' mesh of dp_shard x cp); also "
    "@238fa9953e parallel_dims.py 334-335 (fsdp_enabled = dp_shard_enabled or cp_enabled)"
)

#: The step beyond the fused update per fp32 shard parameter (:mod:`sim.memory.fsdp_step`):
#: ``clip_grad_norm_``'s foreach norm (read 4) and always-applied ``_foreach_mul_`` (read and
#: write 4), fused AdamW's read of the fp32 weight (4): 16 B.
TORCHTITAN_FSDP_STEP = FsdpStepWork(norm_reads=1, master_reads=1, clip_passes=1)


class Torchtitan(Framework):
    """torchtitan's training loop (module doc)."""

    name: ClassVar[str] = "torchtitan"
    description: ClassVar[str] = (
        "torchtitan: FSDP2 per block (sharded state, reduce-scatter overlapped), torch pipelining"
    )
    schedules = Setting(TORCH_SCHEDULES, f"{_PP}::build_pipeline_schedule (get_schedule_class)")
    dp_bucket_bytes = Setting(
        100 * 2**20,
        "torchtitan@238fa9953e torchtitan/models/llama3/infra/parallelize.py 148-156, 363-372 "
        "(apply_ddp: replicate(model, bucket_cap_mb=100), dp_shard 1: option data_parallel "
        "ddp); FSDP's per-unit reductions otherwise (sim.memory.fsdp)",
    )
    tied_embedding = Setting(
        False, "torchtitan/models/llama3/model/model.py: tok_embeddings and output are separate"
    )
    placement = Setting(
        "layers",
        f"{_PP}::generate_llm_fqn_per_model_part (input_weight = output_weight = 1: embedding "
        "and output count as one layer each)",
    )
    fewer_microbatches = Setting(
        False, "torch/distributed/pipelining/schedules.py::Schedule1F1B (m < p raises)"
    )
    blocking_p2p = Setting(False, "torch/distributed/pipelining/schedules.py (isend/irecv)")
    step_barrier = Setting(
        "before_update",
        "torchtitan/distributed/utils.py::clip_grad_norm_ (total norm all-reduced over the "
        "pipeline mesh before optimizer.step)",
    )
    low_precision_library = Setting(
        "torchao",
        "torchtitan/components/quantization/float8.py::Float8LinearConverter (torchao.float8, "
        "recipes rowwise and rowwise_with_gw_hp) and mx.py (torchao MXFP8)",
    )
    distributed_optimizer = Setting(
        False,
        "torchtitan shards states only by FSDP (dp_shard; data_parallel_shard_degree, "
        "torchtitan/config/configs.py), replicates them otherwise (fully_shard over one rank, "
        "or DDP before e1847f439)",
    )
    step_extra_bytes = Setting(
        12.0,
        "torchtitan/trainer.py 916-956: clip_grad_norm_(foreach=True) (torchtitan/distributed/"
        "utils.py 594-673; torch nn/utils/clip_grad.py 92-95 _foreach_norm: read 4, 164-173 "
        "_foreach_mul_ always: read 4, write 4) over fp32 gradients (training.dtype float32, "
        "bf16 by autocast or fully_shard's MixedPrecisionPolicy) without FSDP sharding; the "
        "update is fused AdamW (components/optimizer/optimizer.py 109-111: 'fused'; 4 x 4 read, "
        "3 x 4 written = 28 B, the fused formula's 2 + 2 x 12 + 2 for pipesim's bf16 layout, same "
        "16 B per parameter). With FSDP: the fsdp setting's step (sim.memory.fsdp_step)",
    )
    fsdp = Setting(
        FsdpSpec(
            param_bytes=2,
            reduce_bytes=4,
            fp32_shards=True,
            reshard_after_forward=True,
            reshard_with_pp=False,
            head_reshard=False,
            accumulate_with_pp=True,
            compute_copies=True,
            step=TORCHTITAN_FSDP_STEP,
        ),
        f"{_SHARD_CP}; {_FSDP}::apply_fsdp_to_decoder (MixedPrecisionPolicy(param_dtype=bf16, "
        "reduce_dtype=fp32), training.dtype float32: torchtitan/config/configs.py; "
        "fsdp_reshard_after_forward 'default': True per block, False with PP, [norm, output] "
        "False); torch/distributed/pipelining/stage.py (no gradient sync nor resharding per "
        "micro-batch, reduce-scatter at REDUCE_GRAD); all-gather copy-out and reduce-scatter "
        "copy-in on the compute stream (torch 2.13 torch/distributed/fsdp/_fully_shard/"
        "_fsdp_collectives.py 431-489, 592-607; at a shard world of 1 the cast and copy of "
        "_fsdp_param_group.py 437-460: sim.memory.fsdp_units.FsdpPlan.copy_out_bytes); "
        "the step: torchtitan/trainer.py 916-956 (clip_grad_norm_ foreach, fused AdamW: "
        "torchtitan/components/optimizer/optimizer.py 109-111; sim.memory.fsdp_step)",
    )

    OPTIONS = (
        Option(
            "compile",
            False,
            (False, True),
            f"{_COMPILE} (enable=False; each TransformerBlock compiled, fullgraph)",
            "torch.compile of each block: what async TP needs; its kernel fusion and host "
            "work are not modelled (the block's kernels and ops as eager)",
        ),
        Option(
            "optimizer_implementation",
            "fused",
            tuple(ADAMW_BYTES),
            "torchtitan/components/optimizer/optimizer.py 109-111, 153-166 (implementation "
            "'fused': torch.optim.AdamW(fused=True); 'foreach', 'for-loop')",
            "torch AdamW's kernels: fused one pass (28 B per fp32 parameter), foreach or "
            "for-loop eight passes (80 B): sim.framework.torch_adamw",
        ),
        Option(
            "data_parallel",
            "fully_shard",
            ("fully_shard", "ddp"),
            f"{_ALWAYS_FSDP}; ddp: torchtitan@238fa9953e (before e1847f439) "
            "models/llama3/infra/parallelize.py 125-156 (apply_ddp with dp_replicate alone)",
            "dp_shard 1 with replicas: fully_shard per block over a shard group of one, each "
            "unit's fp32 gradients all-reduced after its backward (torchtitan since 2026-03), "
            "or DDP's 100 MiB buckets (earlier torchtitan)",
        ),
        Option(
            "enable_async_tensor_parallel",
            False,
            (False, True),
            f"{_COMPILE} (needs compile; symmetric memory and _micro_pipeline_tp); torch "
            "_inductor/fx_passes/micro_pipeline_tp.py",
            "tensor-parallel all-gathers and reduce-scatters fused with their matmuls in t "
            "chunks, copies on the copy engines",
        ),
    )

    def check_options(self) -> None:
        """torchtitan refuses async TP without compile (``compile.py``).

        Raises:
            ValueError: ``enable_async_tensor_parallel`` without ``compile``."""
        if self.values["enable_async_tensor_parallel"] and not self.values["compile"]:
            raise ValueError(
                "option enable_async_tensor_parallel needs compile (torchtitan "
                "distributed/compile.py: async TP is an Inductor pass)"
            )

    def runs_fsdp(self, lay: ParallelLayout) -> bool:
        """FSDP where it shards: over ``dp_shard x cp`` > 1 ranks (:data:`_SHARD_CP`: with
        context parallelism torchtitan shards over ``cp`` even at ``dp_shard = 1``, whatever
        option ``data_parallel``) and, with option ``data_parallel`` ``fully_shard`` (the
        default, torchtitan@b5bcd76), for replicas alone too (``dp_shard x cp = 1``,
        ``dp_replicate > 1``): ``fully_shard`` over a shard group of one inside HSDP
        (:data:`_ALWAYS_FSDP`; :mod:`sim.memory.fsdp` with a shard of 1). Not on one replica
        without context parallelism (no collective; its per-unit casts and copies are not
        modelled)."""
        if lay.shard_size > 1:
            return True
        return self.values["data_parallel"] == "fully_shard" and lay.dp_replicate > 1

    def _update_extra_bytes(self) -> float:
        return adamw_extra_bytes(self.values.get("optimizer_implementation", "fused"))

    def step_work(self) -> StepWork:
        """Its unsharded step's passes (:attr:`step_extra_bytes`) and, with
        ``optimizer_implementation`` foreach or for-loop, AdamW's passes beyond the fused
        kernel's (:func:`~sim.framework.torch_adamw.adamw_extra_bytes`)."""
        work = super().step_work()
        return replace(work, extra_bytes=work.extra_bytes + self._update_extra_bytes())

    def fsdp_spec(self, dtype: str) -> FsdpSpec | None:
        """:attr:`fsdp` with AdamW's passes beyond the fused kernel's in its step (as
        :meth:`step_work`); its shards are fp32 whatever ``dtype``."""
        spec = super().fsdp_spec(dtype)
        if spec is None:
            return None
        return replace(spec, step=replace(spec.step, update_bytes=self._update_extra_bytes()))

    def tp_overlap(self, tensor_parallel: int, sequence_parallel: bool) -> Implementation | None:
        """torch's AsyncTP with ``enable_async_tensor_parallel`` (and ``t > 1`` with sequence
        parallelism: torchtitan's tensor-parallel plan always shards the norms' sequence)."""
        if (
            self.values["enable_async_tensor_parallel"]
            and tensor_parallel > 1
            and sequence_parallel
        ):
            return ASYNC_TP
        return None
