"""The ``training:`` section: batch, dtype, precision recipe and its options, optimizer and
steps."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sim.config.fields import Strict
from sim.config.limits import MAX_ITERATIONS


class PrecisionOptions(Strict):
    """How a low-precision recipe is run (Megatron-LM's options; sim.compute.precision)."""

    first_last_layers_bf16: bool = Field(
        False,
        description="Megatron's --first-last-layers-bf16: keep the first and last transformer "
        "blocks in 16 bits (not with fp8-delayed).",
    )
    num_layers_at_start_in_bf16: int = Field(
        1, ge=0, description="Megatron's --num-layers-at-start-in-bf16 (with the option above)."
    )
    num_layers_at_end_in_bf16: int = Field(
        1, ge=0, description="Megatron's --num-layers-at-end-in-bf16 (with the option above)."
    )
    mtp_bf16: bool = Field(
        False,
        description="Megatron-Bridge's keep_mtp_spec_in_bf16: the MTP depths' linear layers in "
        "16 bits.",
    )
    bf16_linears: list[str] = Field(
        default_factory=list,
        description="Linear layers kept in 16 bits in every layer, by pipesim's GEMM names "
        "(qkv, proj, in_proj, out_proj, shared_up, latent_down, ...), as a Transformer Engine "
        "quantization-recipe config's matchers keep modules in bf16.",
    )
    mxfp8_linears: list[str] = Field(
        default_factory=list,
        description="Linear layers run in MXFP8 under another recipe (NVFP4), by pipesim's GEMM "
        "names, as a Transformer Engine quantization-recipe config's mxfp8 matchers run modules "
        "(Megatron-Bridge's Nemotron 3 te_quant.cfg: Mamba's out_proj).",
    )
    fp8_attention: bool = Field(
        False,
        description="Megatron's --fp8-dot-product-attention (Transformer Engine's fp8_dpa): the "
        "attention core in FP8 too (MXFP8 with the MXFP8 and NVFP4 recipes); its kernels run at "
        "their measured FP8 speed where pipesim has one (sim.compute.swa_speed), else as 16-bit.",
    )
    fp8_output_proj: bool = Field(
        False,
        description="Megatron-Core's fp8_output_proj (from megatron-core at NVIDIA/Megatron-LM"
        "@d0b3b775, Megatron-Bridge v0.5.0): the output layer's GEMMs in MXFP8 too (TE's "
        "TELMHeadColumnParallelLinear under the MXFP8 autocast); only with the mxfp8 recipe.",
    )
    param_gather: bool = Field(
        False,
        description="Megatron's --fp8-param-gather: parameters kept quantized and all-gathered "
        "by the distributed optimizer in their format (1 byte per FP8 parameter instead of 2); "
        "needs the distributed optimizer (memory_policy dist_opt or a framework that shards).",
    )
    te_version: str | None = Field(
        None,
        description="The Transformer Engine version the run's container ships ('2.14'; "
        "Megatron-Bridge rows: their release's, sim.runs.bridge_software): what a recipe's "
        "version-dependent kernels are (NVFP4's per-expert quantize of grouped experts before "
        "2.12, grouped from 2.12). Unset: 2.16 (assumption, sim.compute.precision_rules."
        "TE_VERSION).",
    )


class TrainingConfig(Strict):
    """Training settings shared by every grid point."""

    global_batch: int = Field(64, gt=0, description="Samples per optimizer step (all replicas).")
    dtype: Literal["fp16", "bf16", "fp32"] | None = Field(
        None,
        description="Training dtype of weights, gradients and activations; default: each "
        "trace's own dtype. A different dtype rescales the trace's bytes (not its times).",
    )
    precision: str | None = Field(
        None,
        description="Precision of the linear layers' GEMMs (sim.compute.precision): bf16, fp16 "
        "or fp32 (the training dtype: no low precision), or a recipe: fp8-delayed, "
        "fp8-tensorwise, fp8-blockwise, mxfp8, nvfp4 (Transformer Engine, as Megatron-LM runs "
        "them), fp8-rowwise, fp8-rowwise-gw-hp, mxfp8 (torchao, framework torchtitan). "
        "Parameters and activations stay in training.dtype. Default: the training dtype; "
        "sweep.precision sweeps it. Generated decoder traces only.",
    )
    precision_options: PrecisionOptions | None = Field(
        None,
        description="How the low-precision recipe runs (first/last blocks in 16 bits, FP8 "
        "parameter all-gather); default: Megatron-LM's defaults (none of them).",
    )
    optimizer: Literal["adam", "sgd", "sgd_momentum"] = Field(
        "adam",
        description="Optimizer; sets the bytes of optimizer state per parameter (memory.md §1: "
        "mixed-precision Adam 16 B/param in total).",
    )
    iterations: int = Field(
        0,
        ge=0,
        le=MAX_ITERATIONS,
        description="Optimizer steps to simulate; 0 chooses enough "
        "for steady state (at most 100: the steady state is reached within a few).",
    )
    optimizer_step: bool = Field(
        True, description="Simulate the optimizer step's time (memory-bound update on HBM)."
    )
