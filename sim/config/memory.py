"""The ``memory:`` section: how the framework and PyTorch's allocator lay out memory (gradient
buffers, allocator settings, the precision-aware optimizer's dtypes)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from sim.config.fields import Strict


class MemoryConfig(Strict):
    """How the framework and PyTorch's allocator lay out memory (sim.memory.framework_memory);
    unset fields take the framework profile's defaults."""

    gradient_accumulation_fusion: bool | None = Field(
        None,
        description="Weight gradients accumulate straight into the fp32 main_grad "
        "(Megatron-LM's default with Transformer Engine; false: --no-gradient-accumulation-"
        "fusion, a transient weight gradient per GEMM). Default: the framework's.",
    )
    grad_reduce_in_bf16: bool = Field(
        False,
        description="Megatron's --grad-reduce-in-bf16: 16-bit gradient buffers instead of fp32 "
        "main_grad (and an fp32 copy of the gradient shard at the step).",
    )
    expandable_segments: bool = Field(
        False,
        description="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: the caching allocator "
        "maps pages into one growing segment per pool (less fragmentation).",
    )
    defer_embedding_wgrad: int | None = Field(
        None,
        ge=0,
        description="Megatron's --defer-embedding-wgrad-compute with --wgrad-deferral-limit N "
        "(0: every micro-batch): the output layer keeps the inputs and output gradients of up "
        "to N micro-batches to the pipeline flush (sim.memory.layer_work). Default: off.",
    )
    te_grouped_gemm: bool = Field(
        False,
        description="The MoE experts run Transformer Engine's grouped GEMM (Megatron's "
        "--moe-grouped-gemm): TE keeps one more cuBLAS workspace per compute stream, 4 "
        "(sim.memory.framework_memory.TE_GROUPED_GEMM_STREAMS).",
    )
    cublas_workspace_config: str | None = Field(
        None,
        pattern=r"^(:[0-9]+:[0-9]+)+$",
        description="CUBLAS_WORKSPACE_CONFIG of the run (':4096:8', which Megatron's "
        "--deterministic-mode sets): the size of each of PyTorch's cuBLAS workspaces, "
        "allocated through the caching allocator (sim.memory.cublas_workspace). Default: "
        "PyTorch's (8.125 MiB; 32 MiB on Hopper).",
    )
    precision_aware_optimizer: bool = Field(
        False,
        description="Megatron's --use-precision-aware-optimizer (Transformer Engine's FusedAdam "
        "with the dtypes below, the bf16 master stored as its 16-bit remainder, the gradient "
        "handed over without an fp32 copy: sim.memory.precision_aware).",
    )
    main_grads_dtype: Literal["fp32", "bf16"] = Field(
        "fp32", description="--main-grads-dtype: the gradient buffer's dtype (bf16 needs "
        "precision_aware_optimizer)."
    )  # fmt: skip
    main_params_dtype: Literal["fp32", "fp16"] = Field(
        "fp32", description="--main-params-dtype: the master weights' dtype (fp16 needs "
        "precision_aware_optimizer)."
    )  # fmt: skip
    exp_avg_dtype: Literal["fp32", "fp16", "bf16", "fp8"] = Field(
        "fp32", description="--exp-avg-dtype: Adam's first moment (other than fp32 needs "
        "precision_aware_optimizer)."
    )  # fmt: skip
    exp_avg_sq_dtype: Literal["fp32", "fp16", "bf16", "fp8"] = Field(
        "fp32", description="--exp-avg-sq-dtype: Adam's second moment (other than fp32 needs "
        "precision_aware_optimizer)."
    )  # fmt: skip

    @model_validator(mode="before")
    @classmethod
    def _loss_is_the_shape(cls, data: Any) -> Any:
        """``cross_entropy`` left this section: the loss is the model shape's
        ``cross_entropy_fusion`` (:mod:`sim.compute.loss_fusion`), which times the head and
        sizes its memory alike, so a YAML states it once."""
        if isinstance(data, dict) and "cross_entropy" in data:
            raise PydanticCustomError(
                "loss_in_shape",
                "memory.cross_entropy is the model shape's cross_entropy_fusion now (unfused, "
                "native or te; a decoder trace's DecoderShape, a GPT/BERT trace's "
                "transformer_trace input): it sets the loss's time and memory; give it there",
            )
        return data

    @field_validator("main_grads_dtype", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype")
    @classmethod
    def _needs_precision_aware(cls, v: str, info: Any) -> str:
        """Megatron asserts fp32 for all four without the precision-aware optimizer
        (megatron/core/optimizer/optimizer_config.py ``OptimizerConfig.__post_init__``)."""
        if v != "fp32" and not info.data.get("precision_aware_optimizer"):
            raise PydanticCustomError(
                "needs_precision_aware",
                "{field} {value} needs precision_aware_optimizer: true (Megatron-Core asserts "
                "fp32 without --use-precision-aware-optimizer)",
                {"field": info.field_name, "value": v},
            )
        return v
