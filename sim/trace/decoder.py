"""Analytic traces of decoder LMs (Llama-like, Qwen3, mixture-of-experts: Mixtral, Qwen-MoE,
DeepSeek-V3, GPT-OSS; MLA; hybrid Mamba-2: Nemotron-H), one GPU, no parallelism.

Nothing here is measured: every layer's times are the kernel model's
(:mod:`sim.compute.decoder`) on a :class:`~sim.hardware.gpu_compute.ComputeSpec`, its bytes counted
from tensor sizes. On one GPU every expert is local and the router is assumed balanced and
dropless (each of the ``E`` experts computes ``T*k/E`` rows, or its capacity with padding);
the per-rank view under expert, tensor and context parallelism is
:mod:`sim.parallel.decoder_shard`'s. The shape is recorded in ``provenance.inputs`` and
``provenance.model_shape`` (``kind: decoder``), so a trace is regenerated at any micro-batch
size and on any GPU, and split over ranks.

Layers (:func:`~sim.compute.decoder_shape.layer_names`): ``embedding`` (``V*h`` parameters; no
position table: rotary), ``block.i`` (dense MLP) or ``moe_block.i`` (``swa_`` prefixed where
windowed), or a hybrid's ``mamba.i``, ``attention.i``, ``mlp.i``, ``moe.i``; ``mtp.j``;
``head`` (final RMSNorm and the ``V*h`` output layer, fp32 cross-entropy). With
``mtp_shared`` (Megatron-Core's ``mtp_use_repeated_layer``) ``mtp.0`` holds the MTP layer's
parameters and the later depths none (:func:`holds_params`): each depth still runs its kernels. A model that ties
its embeddings (``tied_embeddings``) has a head of the norm only and the word embedding as a
shared group of the embedding and the head (:class:`~sim.trace.schema.SharedParams`: one
copy where both sit on one GPU, else a copy on each and an all-reduce, :mod:`sim.trace.shared`).
A model with MTP depths holds the word embedding in its first depth too: Megatron-Core builds a
``LanguageModelEmbedding`` on the MTP stage (NVIDIA/Megatron-LM@d98e8a64
``megatron/core/models/gpt/gpt_model.py`` l.173-174, ``if self.pre_process or
self.mtp_process``), a duplicate of the first stage's kept in sync by the word-embedding
all-reduce (``models/common/language_module/language_module.py`` l.253-257;
``distributed/finalize_model_grads.py`` l.146-147: ``share_embeddings_and_output_weights or
mtp_num_layers``), so the depth joins the group, tied or not.
With LoRA every layer's ``trainable_bytes`` is its adapters'. ``out_bytes`` is the hidden
state ``b*s*h*d`` (twice that after an MTP depth: the main and the MTP hidden states).
``flops`` is the sum of the forward kernels' FLOPs (attention core included, halved for the
causal mask, the band for windowed layers).

Presets (:data:`DECODER_PRESETS`) carry their Hugging Face ``config.json`` values; the files
are in ``examples/hf/`` and :mod:`sim.trace.hf_config` reads them.
"""

from __future__ import annotations

from typing import Any

from sim.compute.decoder import (
    ATTN,
    DecoderShape,
    layer_act_bytes,
    layer_kernels,
    layer_names,
    layer_params,
    trainable_params,
)
from sim.compute.decoder_shape import base_kind
from sim.compute.gptoss_host import attention_ops
from sim.compute.kernels import phase_time
from sim.compute.mcore_ops import moe_layer_ops
from sim.compute.megatron_ops import decoder_layer_ops
from sim.compute.precision_rules import LowPrecision
from sim.compute.quantize import layer_index, precision_kernels
from sim.compute.routing import expert_rows
from sim.hardware.gpu_compute import ComputeSpec
from sim.trace.schema import LayerProfile, SharedParams, Trace, dtype_bytes, recorded_shape

MOE_KINDS = ("moe_block", "moe", "mtp")
"""Layer kinds whose experts compute routed rows (an MTP depth's block is MoE in a MoE model)."""


def single_gpu_rows(m: DecoderShape, b: int) -> tuple[float, ...]:
    """Rows of every expert on one GPU: balanced, with the model's capacity settings."""
    if m.moe is None:
        return ()
    e = m.moe.experts
    return expert_rows(
        b * m.seq_len,
        1,
        e,
        m.moe.top_k,
        (1.0 / e,) * e,
        m.moe.capacity_factor,
        m.moe.pad_to_capacity,
    )


def layer_host_ops(kind: str, m: DecoderShape) -> tuple[float, float, float, float]:
    """``(forward ops, backward ops, module calls, Function applies)`` the host issues for one
    layer of kind ``kind`` of the unsharded model: a MoE layer as Megatron-Core's was counted
    (:func:`sim.compute.mcore_ops.moe_layer_ops`), with all ``E`` experts local when they run
    one by one (``sequential_experts``; expert parallelism takes the others off,
    :mod:`sim.parallel.decoder_shard`), else one grouped MLP issuing one expert's ops; any other
    as :func:`sim.compute.megatron_ops.decoder_layer_ops` (a head's loss: the shape's
    ``cross_entropy_fusion``, :func:`sim.compute.loss_fusion.loss_ops`); a layer with attention plus the ops
    GPT-OSS's eager attention pieces add (:func:`sim.compute.gptoss_host.attention_ops`)."""
    base = base_kind(kind)
    if base in ("moe_block", "moe") and m.moe is not None:
        ops = moe_layer_ops(base, m.moe.experts if m.moe.sequential_experts else 1)
    else:
        ops = decoder_layer_ops(base, m.cross_entropy_fusion)
    if base not in ATTN:
        return ops
    fwd, bwd = attention_ops(m)
    return ops[0] + fwd, ops[1] + bwd, ops[2], ops[3]


def decoder_layer(
    name: str,
    kind: str,
    m: DecoderShape,
    b: int,
    gpu: ComputeSpec,
    dtype: str,
    low: LowPrecision | None = None,
) -> LayerProfile:
    """One layer of the unsharded model on ``gpu`` at micro-batch ``b`` (module doc), its
    linear layers under ``low`` where its rules say (:mod:`sim.compute.quantize`)."""
    d = dtype_bytes(dtype)
    rows = single_gpu_rows(m, b) if base_kind(kind) in MOE_KINDS else ()
    kernels = layer_kernels(kind, m, b, d, rows=rows)
    fwd, bwd_in, bwd_w = precision_kernels(kernels, kind, layer_index(name), m.layers, low, gpu)
    f, i, w = (phase_time(k, gpu, dtype).total_s if k else 0.0 for k in (fwd, bwd_in, bwd_w))
    dense, expert = layer_params(kind, m) if holds_params(name, m) else (0, 0)
    if kind == "head" and m.tied_embeddings:
        dense = m.hidden  # the output weight is the embedding's (shared group)
    hidden = float(b * m.seq_len * m.hidden * d)
    out = {"head": 0.0, "mtp": 2 * hidden}.get(base_kind(kind), hidden)
    fwd_ops, bwd_ops, modules, functions = layer_host_ops(kind, m)
    return LayerProfile(
        name=name,
        fwd_s=f,
        bwd_s=i + w,
        param_bytes=float((dense + expert) * d),
        act_bytes=layer_act_bytes(kind, m, b, d, rows=rows),
        out_bytes=out,
        bwd_input_s=i,
        bwd_weight_s=w,
        flops=float(sum(k.flops for k in fwd)),
        trainable_bytes=float(trainable_params(kind, m) * d * holds_params(name, m))
        if m.lora
        else None,
        fwd_ops=fwd_ops,
        bwd_ops=bwd_ops,
        fwd_modules=modules,
        fwd_functions=functions,
    )


def holds_params(name: str, m: DecoderShape) -> bool:
    """Whether layer ``name`` holds its parameters: all but the MTP depths after the first
    where one MTP layer serves every depth (``m.mtp_shared``; their weights, gradients and
    optimizer state are ``mtp.0``'s, their compute their own).

    >>> from sim.compute.decoder_shape import DecoderShape
    >>> m = DecoderShape(1, 8, 1, 4, 16, 8, mtp_layers=2, mtp_shared=True)
    >>> holds_params("mtp.0", m), holds_params("mtp.1", m), holds_params("block.0", m)
    (True, False, True)
    """
    return not (m.mtp_shared and name.startswith("mtp.") and name != "mtp.0")


def tied_groups(m: DecoderShape, n_layers: int, d: int) -> tuple[SharedParams, ...]:
    """The word embedding as a group of the embedding (layer 0), the first MTP depth (layer
    ``n_layers - 1 - mtp_layers``) when ``m`` has any and the head (the last layer) when ``m``
    ties them (module doc); none when only the embedding holds it.

    Example (V = 32, h = 8, bf16; one MTP depth, untied: embedding, block, mtp.0, head):
        >>> m = DecoderShape(1, 8, 2, 4, vocab=32, ffn_hidden=16, mtp_layers=1)
        >>> [(g.layers, g.param_bytes) for g in tied_groups(m, 4, 2)]
        [((0, 2), 512.0)]
    """
    holders = (0,) + ((n_layers - 1 - m.mtp_layers,) if m.mtp_layers else ())
    holders += (n_layers - 1,) if m.tied_embeddings else ()
    if len(holders) < 2:
        return ()
    return (SharedParams(holders, float(m.vocab * m.hidden * d), ("embedding.weight",)),)


def decoder_trace(
    shape: DecoderShape | dict[str, Any],
    *,
    name: str,
    microbatch_size: int,
    gpu: ComputeSpec,
    dtype: str = "bf16",
    precision: LowPrecision | None = None,
) -> Trace:
    """An analytic trace of a decoder LM (module doc).

    Args:
        shape: the model, or its :meth:`DecoderShape.to_dict` form.
        name: trace name.
        microbatch_size: ``b``.
        gpu: the GPU whose kernel model times the layers.
        dtype: ``bf16``, ``fp16`` or ``fp32``: parameters and activations.
        precision: the low-precision recipe of its linear layers (None: every GEMM in
            ``dtype``); recorded in ``provenance.inputs.precision``.

    Raises:
        ValueError: an invalid shape, ``microbatch_size < 1``, or a recipe whose format
            ``gpu`` does not run.
    """
    m = shape if isinstance(shape, DecoderShape) else DecoderShape.from_dict(dict(shape))
    if microbatch_size < 1:
        raise ValueError(f"micro-batch size must be >= 1, got {microbatch_size}")
    low = precision
    layers = tuple(
        decoder_layer(n, k, m, microbatch_size, gpu, dtype, low) for n, k in layer_names(m)
    )
    held = [k for n, k in layer_names(m) if holds_params(n, m)]
    dense = sum(layer_params(k, m)[0] for k in held)
    if m.tied_embeddings:
        dense -= m.vocab * m.hidden
    expert = sum(layer_params(k, m)[1] for k in held)
    shape_dict = m.to_dict()
    gpu_dict = (gpu if low is not None else gpu.without_low_precision()).to_dict()
    inputs = {**m.to_dict(), "microbatch_size": microbatch_size, "dtype": dtype, "gpu": gpu_dict}
    if low is not None:
        inputs["precision"] = low.to_dict()
    moe = m.moe
    routed = (
        f"{moe.experts} experts top-{moe.top_k}, balanced, "
        + ("dropless" if moe.capacity_factor is None else f"capacity {moe.capacity_factor:g}")
        if moe
        else "dense"
    )
    prov = {
        "source": "analytic: sim.trace.decoder.decoder_trace",
        "inputs": inputs,
        "model_shape": shape_dict,
        "parameters": {"dense": dense, "expert": expert, "total": dense + expert},
        "notes": (
            f"Generated, not measured: kernel model (sim.compute) on {gpu.model}, {m.attention} "
            f"attention, {routed}; one GPU, every expert local."
            + (f" Low precision: {low.describe()}." if low is not None else "")
            + " Host ops per layer: Megatron-DeepSpeed's block counts standing in for "
            "Megatron-Core's dense layers (an assumption, within 15 % of Megatron-Core's "
            "counted block), MoE layers as Megatron-Core's were counted (sim.compute.mcore_ops)."
        ),
    }
    shared = tied_groups(m, len(layers), dtype_bytes(dtype))
    return Trace(name, layers, microbatch_size, dtype, gpu.model, provenance=prov, shared=shared)


def is_decoder(trace: Trace) -> bool:
    """Whether ``trace`` records a decoder shape (``model_shape.kind == "decoder"``)."""
    return recorded_shape(trace, "decoder") is not None


def trace_precision(trace: Trace) -> LowPrecision | None:
    """The low-precision recipe a generated trace was timed with
    (``provenance.inputs.precision``), or None."""
    data = (trace.provenance.get("inputs") or {}).get("precision")
    return LowPrecision.from_dict(data) if data else None


def decoder_shape(trace: Trace) -> DecoderShape:
    """The :class:`DecoderShape` a decoder trace records.

    Raises:
        ValueError: the trace records no decoder shape.
    """
    shape = recorded_shape(trace, "decoder")
    if shape is None:
        raise ValueError(f"trace {trace.name} records no decoder model shape")
    return DecoderShape.from_dict(shape)
