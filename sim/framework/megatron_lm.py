"""Megatron-LM (NVIDIA/Megatron-LM, ``megatron/core``) with its default arguments, and the
options of its command line that overlap communication (:mod:`sim.framework.megatron_options`)
or add host work to each iteration (its logging: :mod:`sim.framework.megatron_host`), and the
per-token loss's gradient scaling (:mod:`sim.framework.per_token_loss`).

1F1B (``forward_backward_pipelining_without_interleaving``, warm-up ``min(p - rank - 1, m)``)
or interleaved 1F1B; every stage exchange is one ``batch_isend_irecv`` the rank waits on,
followed by ``torch.cuda.synchronize()`` (``batch_p2p_sync``); data-parallel gradients reduced
after the backward (``overlap_grad_reduce`` off), then the word-embedding gradient all-reduced
between the first and the last stage; the optimizer's found-inf and grad-norm all-reduces over
the model-parallel group before the update. Its host: the loss read back after each forward of
the last stage (the NaN check), and once per iteration the step's per-tensor loops, scalar
reductions and reads (:func:`~sim.framework.megatron_host.megatron_step_host`), with the device
idle, where the hardware models its host.
"""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

from sim.comm.nccl import P2P_FIFO_BYTES
from sim.engine.inputs import PipelineRuntime
from sim.engine.stage_cost import StageCost
from sim.framework.base import Framework, Setting
from sim.framework.cuda_graphs import captured
from sim.framework.ddp_hooks import with_grad_hooks
from sim.framework.deterministic import DETERMINISM_OPTIONS, with_deterministic_fills
from sim.framework.jit_fuser_host import with_jit_fuser
from sim.framework.mcore_python import with_mcore_python
from sim.framework.megatron_host import HOST_OPTIONS, LOSS_READS, megatron_step_host
from sim.framework.megatron_options import (
    DISPATCHER_SMS,
    MEGATRON_OPTIONS,
    bucket_params,
    check_megatron,
    fsdp_comm_bytes,
    fsdp_grad_bytes,
    scope_parts,
)
from sim.framework.per_token_loss import OPTION as PER_TOKEN_OPTION
from sim.framework.per_token_loss import per_token_work
from sim.framework.step_work import StepWork
from sim.framework.te_host import with_te_modules
from sim.hardware.topology import Topology
from sim.memory.framework_memory import FrameworkMemory
from sim.memory.fsdp import FsdpSpec
from sim.memory.fsdp_step import FsdpStepWork
from sim.parallel.tp_overlap import TE_USERBUFFERS, Implementation
from sim.trace.schema import Trace, dtype_bytes

CORE = "megatron/core"
P2P = f"{CORE}/pipeline_parallel/p2p_communication.py::_communicate"
MEGATRON_FSDP_STEP = FsdpStepWork(grad_cast=True, norm_reads=1, master_reads=1, zero_passes=2)
"""Megatron-FSDP's step beyond the fused update (:mod:`sim.memory.fsdp_step`'s module doc)."""


class MegatronLM(Framework):
    """Megatron-LM's training loop with its defaults (module doc)."""

    name: ClassVar[str] = "megatron-lm"
    description: ClassVar[str] = (
        "Megatron-LM: 1F1B any m, batched p2p with cuda.synchronize, DP all-reduce after the "
        "backward, tied embedding all-reduce, global norm before the update"
    )
    schedules = Setting(
        frozenset({"1f1b", "interleaved_1f1b"}),
        f"{CORE}/pipeline_parallel/schedules.py::get_forward_backward_func",
    )
    low_precision_library = Setting(
        "transformer_engine",
        f"{CORE}/fp8_utils.py::get_fp8_recipe (--fp8-recipe: Transformer Engine recipes, "
        "NVIDIA/Megatron-LM@d98e8a6 lines 752-810)",
    )
    dp_bucket_bytes = Setting(
        0.0,
        f"{CORE}/distributed/distributed_data_parallel_config.py (overlap_grad_reduce = False) "
        f"-> {CORE}/distributed/param_and_grad_buffer.py::finish_grad_sync (synchronous "
        "all-reduce after the backward, from finalize_model_grads)",
    )
    tied_embedding = Setting(
        True,
        f"{CORE}/distributed/finalize_model_grads.py::_allreduce_embedding_grads (embedding "
        "group: first and last pipeline stage; share_embeddings_and_output_weights by default)",
    )
    tied_after_dp = Setting(
        True,
        f"{CORE}/distributed/finalize_model_grads.py::finalize_model_grads (finish_grad_sync, "
        "then the embedding all-reduce)",
    )
    tp_grad_allreduce = Setting(
        True,
        f"NVIDIA/Megatron-LM@d98e8a64 {CORE}/distributed/finalize_model_grads.py:416-484 "
        "_allreduce_non_tensor_model_parallel_grads (l.661, after finish_grad_sync: the grads "
        "of sequence_parallel-marked and q/k_layernorm parameters flattened into one buffer "
        "and all-reduced over the tensor group when it has more than one rank)",
    )
    placement = Setting(
        "megatron",
        f"{CORE}/transformer/transformer_block.py::get_num_layers_to_build (num_layers // pp "
        "per stage; embedding with pre_process, output layer with post_process)",
    )
    fewer_microbatches = Setting(
        True,
        f"{CORE}/pipeline_parallel/schedules.py::forward_backward_pipelining_without_"
        "interleaving: num_warmup_microbatches = min(p - rank - 1, num_microbatches)",
    )
    blocking_p2p = Setting(
        True, f"{P2P} (batch_isend_irecv of the sends and the next receive, req.wait())"
    )
    sync_after_p2p = Setting(
        True,
        f"{P2P}: torch.cuda.synchronize() when batch_p2p_comm and batch_p2p_sync "
        f"({CORE}/model_parallel_config.py: both True by default)",
    )
    step_barrier = Setting(
        "before_update",
        f"{CORE}/optimizer/optimizer.py::MixedPrecisionOptimizer.step (found_inf all-reduce "
        "over the model-parallel group, .item()) and optimizer/clip_grads.py::get_grad_norm_fp32",
    )
    distributed_optimizer = Setting(
        False, "megatron/training/arguments.py: --use-distributed-optimizer is off by default"
    )
    step_extra_bytes = Setting(
        24.0,
        f"{CORE}/optimizer/optimizer.py::Float16OptimizerWithFloat16Params, per parameter: "
        "_copy_model_grads_to_main_grads (main_grad.float(): 2+4 B), "
        "_unscale_main_grads_and_check_for_nan (_amp_foreach_non_finite_check_and_unscale_: "
        "4+4 B), optimizer/clip_grads.py::get_grad_norm_fp32 (multi_tensor_l2norm: 4 B), "
        "FusedAdam reading 4-byte gradients (+2 B), _copy_main_params_to_model_params "
        "(4+2 B, 2 already in the fused step): 6 + 8 + 4 + 2 + 4 = 24 B",
    )
    reduce_extra_bytes = Setting(
        (0.0, 0.0),
        f"{CORE}/distributed/param_and_grad_buffer.py::start_grad_sync: gradients already in "
        "one contiguous buffer (no flatten, no copy back); its scaling by 1/w is a pass of "
        "that buffer (grad_buffer_passes)",
    )
    sp_input_regather = Setting(
        True,
        "NVIDIA/TransformerEngine v2.11 pytorch/module/layernorm_linear.py:416-418 "
        "(ctx.ln_out_needs_gather for column-parallel layers with sequence parallelism), "
        ":669-693 (gather_along_first_dim(ln_out, tp_group, async_op=True) for the wgrad GEMM); "
        f"NVIDIA/Megatron-LM@23e00ed {CORE}/tensor_parallel/layers.py:506-520 (the output "
        "layer's ColumnParallelLinear); with --tp-comm-overlap TE gathers it into userbuffers "
        "beside the dgrad GEMM (ub_bulk_dgrad, layernorm_linear.py:680-686; tp_comm_bulk_dgrad "
        "on by default): taken as hidden there (assumption)",
    )
    main_grad_step_bytes = Setting(
        8.0,
        f"NVIDIA/Megatron-LM@23e00ed {CORE}/optimizer, bf16 with fp32 main_grad buffers (no "
        "grad scaler for bf16: optimizer/__init__.py:405-425), per updated parameter (the "
        "distributed optimizer's shard): clip_grads.py::get_grad_norm_fp32 (multi_tensor_l2norm "
        "of the fp32 grads: 4 B) and _copy_main_params_to_model_params (reads the fp32 main "
        "weights: 4 B; its 2-byte write is the fused update's weight); "
        "_copy_model_grads_to_main_grads is .float() of fp32 grads (no copy); "
        "clip_grad_by_total_norm_fp32 scales only when the norm exceeds --clip-grad "
        "(clip_grads.py:172-176, data-dependent: not counted)",
    )
    grad_buffer_passes = Setting(
        (2.0, 2.0),
        f"NVIDIA/Megatron-LM@23e00ed, passes over the rank's whole gradient buffer: "
        "training.py:1201 train_step -> zero_grad_buffer -> "
        f"{CORE}/distributed/param_and_grad_buffer.py:857 grad_data.zero_() (write); "
        "start_grad_sync (param_and_grad_buffer.py:336-346) -> check_grads: grad_data.norm(p=2) "
        "per bucket (read; check_for_nan_in_grad = --check-for-nan-in-loss-and-grad, on by "
        "default: training.py:927, arguments.py:1790); with w > 1 grad_data *= "
        "gradient_scaling_factor = 1/(dp x cp) (read + write; distributed_data_parallel.py:262, "
        "unless --ddp-average-in-collective)",
    )
    step_transient = Setting(
        2.0,
        f"{CORE}/optimizer/optimizer.py::Float16OptimizerWithFloat16Params."
        "_copy_model_grads_to_main_grads (main_param.grad = main_grad.float(): 4 B per 2-byte "
        "gradient, freed by zero_grad(set_to_none) at the next train_step)",
    )
    main_grads_fp32 = Setting(
        True,
        "megatron/training/arguments.py::validate_args: --bf16 sets "
        "accumulate_allreduce_grads_in_fp32 (main_grads_dtype fp32 default) unless "
        f"--grad-reduce-in-bf16 -> {CORE}/distributed/param_and_grad_buffer.py: grad_dtype = "
        "torch.float if grad_reduce_in_fp32 (4 B per parameter)",
    )
    bucket_copy = Setting(
        False,
        f"{CORE}/distributed/param_and_grad_buffer.py::_ParamAndGradBuffer: param.main_grad is "
        "a view into the contiguous grad_data, which the buckets reduce in place (no copy)",
    )
    deallocate_outputs = Setting(
        True,
        "megatron/training/argument_utils.py: deallocate_pipeline_outputs = True -> "
        f"{CORE}/pipeline_parallel/schedules.py::deallocate_output_tensor after each send",
    )
    wgrad_fusion = Setting(
        True,
        "megatron/training/arguments.py: gradient_accumulation_fusion on unless "
        "--no-gradient-accumulation-fusion; transformer_engine/pytorch/module/base.py::"
        f"get_dummy_wgrad (one cached buffer per weight shape), {CORE}/tensor_parallel/"
        "layers.py (the output layer's too, with TE installed)",
    )
    mcore_layer_python = Setting(
        True,
        "megatron/core/transformer/transformer_layer.py and its spec'd submodules: Python around "
        "each layer's ops, measured with megatron-core 0.15.0 by scripts/time_mcore_layer.py "
        "(sim.framework.mcore_python)",
    )
    python_grad_hooks = Setting(
        True,
        f"{CORE}/distributed/distributed_data_parallel.py: grad_acc.register_hook("
        "self._make_backward_post_hook(param)) on every parameter (sim.framework.ddp_hooks)",
    )
    te_workspace = Setting(
        True,
        "--transformer-impl transformer_engine (default) -> transformer_engine/pytorch/"
        "cpp_extensions/gemm.py::get_cublas_workspace (torch.empty, 32 MiB + 1 KiB on sm90+)",
    )

    fsdp = Setting(
        FsdpSpec(step=MEGATRON_FSDP_STEP),
        f"{CORE}/distributed/fsdp/ (--use-megatron-fsdp, data_parallel_sharding_strategy "
        "optim_grads_params: parameters gathered per TransformerLayer unit in their 16-bit "
        "dtype and released after use, gradients reduce-scattered per unit in the gradient "
        "dtype (grad_reduce_in_fp32 off by default), the distributed optimizer's fp32 state "
        "on the shard); no accumulation across pipeline micro-batches (an assumption); the "
        "step per shard parameter (sim.memory.fsdp_step, NVIDIA/Megatron-LM@d98e8a64): "
        "update_main_grads' fp32 copy of the 16-bit gradient shard (param_and_grad_buffer.py"
        ":3381), its norm (optimizer.py:386), the main weight read by "
        "copy_main_weights_to_model_weights (:3569), the shard zeroed twice (training.py:"
        "3040-3044, distrib_optimizer.py:2581)",
    )

    OPTIONS = MEGATRON_OPTIONS + HOST_OPTIONS + DETERMINISM_OPTIONS + (PER_TOKEN_OPTION,)

    def _fsdp_grad_bytes(self, dtype: str) -> float:
        """Bytes per element of its Megatron-FSDP gradient shard for ``dtype`` parameters
        (:func:`~sim.framework.megatron_options.fsdp_grad_bytes` of its option)."""
        return fsdp_grad_bytes(dtype, self.values.get("megatron_fsdp_main_grads_dtype", "auto"))

    def fsdp_main_grads_fp32(self, dtype: str, ddp: bool) -> bool:
        """Megatron-FSDP keeps fp32 gradients only with ``megatron_fsdp_main_grads_dtype fp32``
        (:meth:`_fsdp_grad_bytes`), not ``ddp``'s ``grad_reduce_in_fp32``."""
        return self._fsdp_grad_bytes(dtype) > dtype_bytes(dtype)

    def fsdp_spec(self, dtype: str) -> FsdpSpec | None:
        """Its Megatron-FSDP for ``dtype`` training with the reduce-scatter in
        ``megatron_fsdp_grad_comm_dtype``, by default the gradient shard's dtype
        (:func:`~sim.framework.megatron_options.fsdp_comm_bytes`)."""
        spec, v = super().fsdp_spec(dtype), self.values
        if spec is None:
            return None
        comm = fsdp_comm_bytes(v.get("megatron_fsdp_grad_comm_dtype", "auto"))
        return replace(spec, reduce_bytes=comm or self._fsdp_grad_bytes(dtype))

    def step_work(self) -> StepWork:
        """Its step's memory passes (:mod:`sim.framework.step_work`), with ``per_token_loss``
        the gradients scaled once at the end instead of before their reduction
        (:func:`~sim.framework.per_token_loss.per_token_work`)."""
        work = super().step_work()
        return per_token_work(work) if self.values.get("per_token_loss") else work

    def check_options(self) -> None:
        """Megatron's own refusals of option combinations (:func:`check_megatron`)."""
        check_megatron(self.values)

    def bucket_bytes(self, trace: Trace, replicas: int = 1) -> float:
        """0 (all gradients reduced after the backward) unless ``overlap_grad_reduce``; then
        Megatron-Core's bucket of :func:`~sim.framework.megatron_options.bucket_params`
        parameters in the gradients' dtype (pipesim's gradients are in the trace's dtype)."""
        if not self.values.get("overlap_grad_reduce"):
            return super().bucket_bytes(trace, replicas)
        size = bucket_params(replicas, self.values.get("ddp_bucket_size", 0))
        return float(size * dtype_bytes(trace.dtype))

    def runtime(
        self,
        topo: Topology,
        trace: Trace,
        tensor_parallel: int = 1,
        virtual_stages: int = 1,
        memory: FrameworkMemory | None = None,
    ) -> PipelineRuntime:
        """Megatron's pipeline engine, with the overlap options: buckets on stage 0 only
        (``distributed_data_parallel.py``: ``bucket_size = None`` when ``pp_rank > 0`` or for
        model chunks after the first), the parameter all-gather under the next forward
        (``overlap_param_gather``; aligned across chunks with ``align_param_gather`` under the
        interleaved schedule, ``megatron/training/arguments.py`` forces it off otherwise), the
        weight gradients delayed into the all-to-alls (``delay_wgrad_compute``), the expert
        dispatcher and its SMs (:meth:`dispatcher`), the blocking exchanges batched on the
        pipeline group's communicator (``batch_p2p_comm``, True by default,
        ``model_parallel_config.py``; ``p2p_communication.py::_batched_p2p_ops``). Under Megatron
        FSDP the word embedding's all-reduce between the first and the last (or MTP) stage
        moves each rank's shard of the gradient (``tied_fsdp_shard``):
        ``_allreduce_embedding_grad`` takes ``orig_grad._local_tensor`` when
        ``ddp_config.use_megatron_fsdp`` and all-reduces it (NVIDIA/Megatron-LM@d98e8a64
        ``megatron/core/distributed/finalize_model_grads.py`` l.251-253, l.258)."""
        rt = super().runtime(topo, trace, tensor_parallel, virtual_stages, memory)
        v = self.values
        gather, buckets = "step", "first" if v.get("overlap_grad_reduce") else rt.bucket_stages
        if v.get("overlap_param_gather"):
            aligned = v.get("align_param_gather") and virtual_stages > 1
            gather = "aligned" if aligned else "forward"
        if v.get("overlap_param_gather_with_optimizer_step"):
            gather, buckets = "optimizer", "none"
        backend, sms = self.dispatcher()
        return replace(
            rt,
            step_host=megatron_step_host(v, trace.dtype == "fp16", virtual_stages),
            loss_reads=LOSS_READS if v.get("check_for_nan_in_loss") else 0,
            bucket_stages=buckets,
            param_gather=gather,
            delay_wgrad=bool(v.get("delay_wgrad_compute")),
            tied_fsdp_shard=True,
            dispatcher=backend,
            comm_sms=sms or None,
            **({"batched_p2p": rt.blocking_p2p} | self._p2p_overlap(rt, virtual_stages)),
        )

    def _p2p_overlap(self, rt: PipelineRuntime, virtual_stages: int) -> dict:
        """``overlap_p2p_comm`` under the interleaved schedule (its option's source): sends
        waited by direction (:attr:`PipelineRuntime.overlap_p2p`), sends that fit NCCL's FIFO
        complete without their receive (:attr:`PipelineRuntime.eager_send_bytes`: the
        schedule's separate ``isend``/``irecv`` rely on it, :mod:`sim.engine.exchanges`) and,
        ``batch_p2p_comm`` off, no ``batch_p2p_sync`` synchronize after the exchanges and lone
        sends on two-rank communicators (:attr:`PipelineRuntime.batched_p2p`); the
        non-interleaved schedule refuses it (schedules.py raises), so there nothing changes."""
        if not (self.values.get("overlap_p2p_comm") and virtual_stages > 1):
            return {}
        return {
            "overlap_p2p": rt.blocking_p2p,
            "eager_send_bytes": P2P_FIFO_BYTES,
            "sync_after_p2p": False,
            "batched_p2p": False,
        }

    def regathers_sp_input(self) -> bool:
        """The saved inputs gathered again in the backward, unless ``tp_comm_overlap`` hides
        the gather beside the dgrad GEMM (``sp_input_regather``)."""
        return super().regathers_sp_input() and not self.values.get("tp_comm_overlap")

    def tp_overlap(self, tensor_parallel: int, sequence_parallel: bool) -> Implementation | None:
        """Transformer Engine's userbuffers with ``tp_comm_overlap`` (and ``t > 1``).

        Raises:
            ValueError: ``tp_comm_overlap`` without sequence parallelism at ``t > 1``
                (``megatron/training/arguments.py``: "Tensor parallel communication/GEMM
                overlap can happen only when sequence parallelism is enabled")."""
        if not self.values.get("tp_comm_overlap") or tensor_parallel < 2:
            return None
        if not sequence_parallel:
            raise ValueError(
                "option tp_comm_overlap needs sequence_parallel (Megatron-LM arguments.py: "
                "overlap can happen only when sequence parallelism is enabled)"
            )
        return TE_USERBUFFERS

    def host_captured(self, cost: StageCost, kinds: list[str]) -> StageCost:
        """Megatron-Core's Python around each layer's forward (``mcore_layer_python``;
        :func:`sim.framework.mcore_python.with_mcore_python`) and its ``torch.compile``-d
        ``jit_fuser`` calls (:func:`sim.framework.jit_fuser_host.with_jit_fuser`), the layers' Transformer Engine
        modules with ``transformer_impl`` (default ``transformer_engine``;
        :func:`sim.framework.te_host.with_te_modules`), the DDP's
        Python gradient hooks (:func:`sim.framework.ddp_hooks.with_grad_hooks`), the fills of
        ``deterministic_mode`` in TE layers (:mod:`sim.framework.deterministic`), then the layers
        ``cuda_graph_impl`` / ``cuda_graph_scope`` capture run without host work
        (:mod:`sim.framework.cuda_graphs`)."""
        if self.mcore_layer_python.value:
            cost = with_jit_fuser(with_mcore_python(cost, kinds), kinds)
        v = self.values
        te = v.get("transformer_impl", "local") == "transformer_engine"
        if te:
            cost = with_te_modules(cost, kinds)
        if self.python_grad_hooks.value:
            cost = with_grad_hooks(cost, kinds)
        if te and v.get("deterministic_mode"):
            fusion = v.get("gradient_accumulation_fusion", True)
            cost = with_deterministic_fills(cost, kinds, v.get("attention_backend", "auto"), fusion)
        impl = self.values.get("cuda_graph_impl", "none")
        return captured(cost, kinds, impl, scope_parts(self.values.get("cuda_graph_scope", "")))

    def combines_pairs(self) -> bool:
        """``overlap_moe_expert_parallel_comm``: Megatron's combined 1F1B."""
        return bool(self.values.get("overlap_moe_expert_parallel_comm"))

    def dispatcher(self) -> tuple[str, int]:
        """``(backend, SMs)`` of its expert dispatcher: ``alltoall`` (NCCL), or the flex
        dispatcher's ``deepep`` / ``hybridep`` with ``moe_dispatcher_sms`` or Megatron's
        default SMs (:data:`~sim.framework.megatron_options.DISPATCHER_SMS`)."""
        backend = self.values.get("moe_token_dispatcher", "alltoall")
        sms = self.values.get("moe_dispatcher_sms", 0) or DISPATCHER_SMS.get(backend, 0)
        return backend, sms
