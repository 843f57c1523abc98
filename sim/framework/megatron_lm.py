"""Megatron-LM (NVIDIA/Megatron-LM, ``megatron/core``) with its default arguments.

1F1B (``forward_backward_pipelining_without_interleaving``, warm-up ``min(p - rank - 1, m)``)
or interleaved 1F1B; every stage exchange is one ``batch_isend_irecv`` the rank waits on,
followed by ``torch.cuda.synchronize()`` (``batch_p2p_sync``); data-parallel gradients reduced
after the backward (``overlap_grad_reduce`` off), then the word-embedding gradient all-reduced
between the first and the last stage; the optimizer's found-inf and grad-norm all-reduces over
the model-parallel group before the update.
"""

from __future__ import annotations

from typing import ClassVar

from sim.framework.base import Framework, Setting

CORE = "megatron/core"
P2P = f"{CORE}/pipeline_parallel/p2p_communication.py::_communicate"


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
        (0.0, 4.0),
        f"{CORE}/distributed/param_and_grad_buffer.py::start_grad_sync: gradients already in "
        "one contiguous buffer (no flatten, no copy back); bucket.grad_data *= "
        "gradient_scaling_factor (1/w, 2+2 B) when w > 1",
    )
    step_transient = Setting(
        2.0,
        f"{CORE}/optimizer/optimizer.py::Float16OptimizerWithFloat16Params."
        "_copy_model_grads_to_main_grads (main_param.grad = main_grad.float(): 4 B per 2-byte "
        "gradient, freed by zero_grad(set_to_none) at the next train_step)",
    )
