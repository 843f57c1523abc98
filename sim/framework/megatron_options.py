"""Megatron-LM's communication-overlap options, as its command line names them.

Sources are NVIDIA/Megatron-LM at d98e8a64 (``MLM:``) and NVIDIA/TransformerEngine at d0067d0d
(``TE:``); each option's ``source`` names the file. What each does in the simulation:

* ``overlap_grad_reduce``: data-parallel gradients reduced in buckets of :func:`bucket_params`
  parameters while the last micro-batch's backward runs, on pipeline stage 0 (model chunk 0)
  only; every other chunk reduces in one bucket launched as its last backward ends
  (:mod:`sim.engine.buckets`);
* ``overlap_param_gather``: the distributed optimizer's parameter all-gather moved from after the
  update to the next forward, bucket by bucket (:mod:`sim.engine.param_gather`); with
  ``align_param_gather`` (default) under the interleaved schedule, launched ahead by chunk;
* ``tp_comm_overlap``: Transformer Engine's userbuffers overlap each sequence-parallel
  all-gather and reduce-scatter with the GEMM beside it (:mod:`sim.parallel.tp_overlap`);
* ``overlap_moe_expert_parallel_comm``, ``delay_wgrad_compute``: the combined 1F1B schedule,
  a backward and the next forward run as a pair whose all-to-alls hide under each other's
  compute (:mod:`sim.schedules.combined`, :mod:`sim.engine.overlap`);
* ``moe_token_dispatcher``: the expert dispatcher (``alltoall``, or the ``flex`` dispatcher's
  DeepEP or HybridEP backend, :mod:`sim.comm.ep_dispatch`), with ``moe_dispatcher_sms``;
* ``cuda_graph_impl`` / ``cuda_graph_scope``: CUDA graphs replay the captured layers without
  host work (:mod:`sim.framework.cuda_graphs`);
* ``megatron_fsdp_main_grads_dtype`` / ``megatron_fsdp_grad_comm_dtype`` (Megatron-FSDP only,
  ``dp_shard > 1``): the gradient shard's dtype, hence its bytes, the optimizer step's fp32
  copy of a 16-bit shard and the step work (:mod:`sim.memory.fsdp_step`), and the
  reduce-scatter's dtype (:func:`fsdp_grad_bytes`, :func:`fsdp_comm_bytes`). Megatron-FSDP
  does not read ``grad_reduce_in_fp32`` (``--bf16``'s fp32 gradient buffer of Megatron-Core's
  own DDP).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sim.framework.options import Option
from sim.trace.schema import dtype_bytes

_ARGS = "MLM:megatron/training/arguments.py"
_DDP = "MLM:megatron/core/distributed"
_TC = "MLM:megatron/core/transformer/transformer_config.py"
_FSDP = "MLM:megatron/core/distributed/fsdp/src/megatron_fsdp/param_and_grad_buffer.py"
_ON = (False, True)

BUCKET_FLOOR_PARAMS = 40_000_000
BUCKET_PER_RANK_PARAMS = 1_000_000
"""Megatron-Core's default bucket: ``max(40000000, 1000000 * dp_cp)`` parameters
(MLM:megatron/training/training.py::get_model, ``ddp_config.bucket_size``; MLM:megatron/core/
distributed/distributed_data_parallel.py, the same rule over the data-parallel group)."""

SCOPES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba")
"""Megatron's ``cuda_graph_modules`` (``cuda_graph_scope``) values (``{_TC}``)."""

MEGATRON_OPTIONS: tuple[Option, ...] = (
    Option(
        "overlap_grad_reduce",
        False,
        _ON,
        f"{_ARGS} --overlap-grad-reduce; {_DDP}/param_and_grad_buffer.py::"
        "register_grad_ready / start_grad_sync; distributed_data_parallel.py (bucket_size None "
        "when pp_rank > 0 or for chunks after the first)",
        "gradients reduced in buckets during the last backward (stage 0), at the end of it "
        "elsewhere",
    ),
    Option(
        "ddp_bucket_size",
        0,
        (),
        f"{_ARGS} --ddp-bucket-size; MLM:megatron/training/training.py::get_model",
        "parameters per gradient bucket; 0: max(40M, 1M x dp x cp)",
    ),
    Option(
        "overlap_param_gather",
        False,
        _ON,
        f"{_ARGS} --overlap-param-gather; {_DDP}/distributed_data_parallel.py (forward "
        "pre-hooks) -> param_and_grad_buffer.py::finish_param_sync",
        "the distributed optimizer's all-gather under the next forward, bucket by bucket",
    ),
    Option(
        "align_param_gather",
        True,
        _ON,
        f"{_ARGS} --no-align-param-gather; MLM:megatron/core/pipeline_parallel/schedules.py "
        "(start_param_sync of chunk k+1 when chunk k's first micro-batch starts; interleaved "
        "only)",
        "interleaved: all-gathers launched one chunk ahead",
    ),
    Option(
        "overlap_param_gather_with_optimizer_step",
        False,
        _ON,
        f"{_ARGS} --overlap-param-gather-with-optimizer-step (interleaved schedule and the "
        "distributed optimizer only); MLM:megatron/training/training.py (bucketing off)",
        "each chunk's all-gather launched as its update ends, one bucket per chunk",
    ),
    Option(
        "overlap_p2p_comm",
        True,
        _ON,
        f"{_ARGS} --no-overlap-p2p-communication (on by default; off for the non-interleaved "
        "schedule); NVIDIA/Megatron-LM@00611e6 megatron/core/pipeline_parallel/schedules.py::"
        "forward_backward_pipelining_with_interleaving (pp_post_backward waits the previous "
        "backward's send_prev; pp_post_forward its own send_next with "
        "deallocate_pipeline_outputs, set by megatron/training/arguments.py); "
        "NVIDIA-NeMo/Megatron-Bridge@0685ff5 src/megatron/bridge/training/comm_overlap.py::"
        "_get_model_comm_overlap_cfgs (overlap_p2p_comm=True, batch_p2p_comm=False when pp > 1 "
        "and vp > 1)",
        "interleaved: a backward's sends waited before the next backward, not before the "
        "next forward; no synchronize after the exchange",
    ),
    Option(
        "tp_comm_overlap",
        False,
        _ON,
        f"{_ARGS} --tp-comm-overlap (needs --sequence-parallel); MLM:megatron/core/"
        "model_parallel_config.py (tp_comm_bulk_wgrad/dgrad, tp_comm_overlap_ag/rs); "
        "TE:transformer_engine/pytorch/module/base.py::initialize_ub (per-GEMM defaults)",
        "sequence-parallel all-gathers and reduce-scatters overlapped with their GEMMs "
        "(Transformer Engine userbuffers)",
    ),
    Option(
        "overlap_moe_expert_parallel_comm",
        False,
        _ON,
        "MLM:megatron/core/model_parallel_config.py; MLM:megatron/core/pipeline_parallel/"
        "combined_1f1b.py (a backward and the next forward run as one combined step)",
        "expert all-to-alls of a backward and the next forward hidden under each other",
    ),
    Option(
        "delay_wgrad_compute",
        False,
        _ON,
        f"{_TC} (needs overlap_moe_expert_parallel_comm); MLM:megatron/core/models/common/"
        "model_chunk_schedule_plan.py (backward_dw while dispatch_bwd is in flight)",
        "weight gradients run while the backward's all-to-alls are in flight",
    ),
    Option(
        "moe_token_dispatcher",
        "alltoall",
        ("alltoall", "deepep", "hybridep"),
        f"{_TC} moe_token_dispatcher_type (alltoall, flex) and moe_flex_dispatcher_backend "
        "(deepep, hybridep)",
        "expert dispatcher: NCCL all-to-all, or DeepEP's or HybridEP's kernels",
    ),
    Option(
        "moe_dispatcher_sms",
        0,
        (),
        f"{_TC} moe_deepep_num_sms = 20, moe_hybridep_num_sms = 16",
        "SMs the flex dispatcher's kernels take; 0: Megatron's default for the backend",
    ),
    Option(
        "cuda_graph_impl",
        "none",
        ("none", "local", "transformer_engine", "full_iteration"),
        f"{_TC} cuda_graph_impl; MLM:docs/user-guide/features/cuda_graph.md",
        "CUDA graphs: per layer (local, transformer_engine) or the whole forward and backward",
    ),
    Option(
        "cuda_graph_scope",
        "",
        (),
        f"{_TC} cuda_graph_modules (formerly cuda_graph_scope): {', '.join(SCOPES)} joined "
        "by +; empty: the whole layer",
        "what a per-layer graph captures",
    ),
    Option(
        "megatron_fsdp_main_grads_dtype",
        "auto",
        ("auto", "fp32", "bf16", "fp16"),
        f"{_ARGS} --megatron-fsdp-main-grads-dtype (default auto: None, lines 3691-3694, "
        "1092) -> MLM:megatron/core/distributed/distributed_data_parallel_config.py:195-199 "
        "(None: 'main gradients will match the dtype of the model compute parameters') -> "
        f"{_FSDP}:2313-2322 _resolve_group_grad_dtype (bf16 for FP8 parameters); "
        "grad_reduce_in_fp32 is not read under megatron_fsdp/",
        "Megatron-FSDP's gradient shard dtype; auto: the parameters' (16-bit with --bf16: "
        "2 B shard, fp32 copy at the step)",
    ),
    Option(
        "megatron_fsdp_grad_comm_dtype",
        "auto",
        ("auto", "fp32", "bf16", "fp16"),
        f"{_ARGS} --megatron-fsdp-grad-comm-dtype (default auto: None, lines 3695-3699) -> "
        "MLM:megatron/core/distributed/distributed_data_parallel_config.py:201-212 (None: "
        f"the main gradients' dtype) -> {_FSDP}:4056-4104 (fetch_bucket(dtype=grad_comm_dtype) "
        "-> reduce_scatter_tensor; fetch_bucket's None is the buffer's dtype, :1325-1326)",
        "Megatron-FSDP's reduce-scatter dtype; auto: the gradient shard's",
    ),
)
"""Megatron-LM's overlap options (module doc)."""

FP8_GRAD_DTYPE = "bf16"
"""Megatron-FSDP's gradient dtype of FP8 parameters with ``megatron_fsdp_main_grads_dtype``
auto (``{_FSDP}:2320-2322``: "BF16 for FP8 parameters")."""


def fsdp_grad_bytes(dtype: str, main_grads_dtype: str = "auto") -> float:
    """Bytes per element of Megatron-FSDP's gradient shard for ``dtype`` parameters (the
    trace's dtype; ``fp8`` parameters keep bf16 gradients) under
    ``megatron_fsdp_main_grads_dtype`` (module doc; its option's source).

    Example: ``--bf16`` alone keeps 2-byte gradients, ``--megatron-fsdp-main-grads-dtype fp32``
    4:
        >>> fsdp_grad_bytes("bf16"), fsdp_grad_bytes("bf16", "fp32"), fsdp_grad_bytes("fp8")
        (2.0, 4.0, 2.0)
    """
    if main_grads_dtype != "auto":
        return float(dtype_bytes(main_grads_dtype))
    return float(dtype_bytes(FP8_GRAD_DTYPE if dtype == "fp8" else dtype))


def fsdp_comm_bytes(grad_comm_dtype: str = "auto") -> float | None:
    """Bytes per element of Megatron-FSDP's gradient reduce-scatter under
    ``megatron_fsdp_grad_comm_dtype``; None (``auto``): the gradient shard's dtype
    (:func:`fsdp_grad_bytes`).

    Example:
        >>> fsdp_comm_bytes(), fsdp_comm_bytes("fp32")
        (None, 4.0)
    """
    return None if grad_comm_dtype == "auto" else float(dtype_bytes(grad_comm_dtype))


DISPATCHER_SMS = {"deepep": 20, "hybridep": 16}
"""Megatron-Core's SMs per flex backend (``{_TC}``: ``moe_deepep_num_sms = 20``,
``moe_hybridep_num_sms = 16``)."""


def bucket_params(replicas: int, given: int = 0) -> int:
    """Parameters per gradient bucket: ``given`` (``--ddp-bucket-size``) or
    ``max(40M, 1M x replicas)`` over the ``dp x cp`` ranks (:data:`BUCKET_FLOOR_PARAMS`).

    Example:
        >>> bucket_params(8), bucket_params(64), bucket_params(64, 134217728)
        (40000000, 64000000, 134217728)
    """
    if given > 0:
        return given
    return max(BUCKET_FLOOR_PARAMS, BUCKET_PER_RANK_PARAMS * replicas)


def scope_parts(text: str) -> tuple[str, ...]:
    """The modules of a ``cuda_graph_scope`` (``attn+moe_router``); empty: the whole layer.

    Raises:
        ValueError: an unknown module.
    """
    parts = tuple(p for p in str(text).replace(",", "+").split("+") if p)
    bad = [p for p in parts if p not in SCOPES]
    if bad:
        raise ValueError(
            f"option cuda_graph_scope: {bad[0]!r} is not one of {', '.join(SCOPES)} "
            "(join several with +)"
        )
    return parts


def check_megatron(values: Mapping[str, Any]) -> None:
    """Megatron's refusals among these options.

    Raises:
        ValueError: ``delay_wgrad_compute`` without ``overlap_moe_expert_parallel_comm``
            (``{_TC}``), a negative bucket size or SM count, an unknown scope module.
    """
    if values.get("delay_wgrad_compute") and not values.get("overlap_moe_expert_parallel_comm"):
        raise ValueError(
            "option delay_wgrad_compute needs overlap_moe_expert_parallel_comm "
            "(Megatron-LM transformer_config.py)"
        )
    if values.get("overlap_param_gather_with_optimizer_step") and not values.get(
        "overlap_param_gather"
    ):
        raise ValueError(
            "option overlap_param_gather_with_optimizer_step needs overlap_param_gather "
            "(Megatron-LM arguments.py)"
        )
    for name in ("ddp_bucket_size", "moe_dispatcher_sms"):
        if values.get(name, 0) < 0:
            raise ValueError(f"option {name} must be >= 0")
    scope_parts(values.get("cuda_graph_scope", ""))
