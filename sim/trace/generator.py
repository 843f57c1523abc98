"""Analytic traces of GPT and BERT stacks: embedding, ``L`` transformer blocks, head.

Nothing here is measured. Times come from the kernel model of :mod:`sim.compute` on a
:class:`~sim.hardware.gpu_compute.ComputeSpec` (GEMMs by shape at the GPU's achievable matmul FLOP/s,
memory-bound kernels at HBM bandwidth, an explicit attention implementation, a per-kernel
overhead), or, when a constant ``efficiency`` is given, FLOPs / (peak FLOP/s x efficiency) as
before; memory is counted from tensor sizes. Notation: ``b`` micro-batch, ``s`` sequence length, ``h`` hidden size, ``a``
heads, ``V`` vocabulary, ``f`` FFN multiplier (FFN width ``f*h``), ``d`` bytes per element.

Transformer block (no tensor/sequence parallelism):

* forward FLOPs ``(8 + 4f)*b*s*h^2 + 4*b*s^2*h``, i.e. ``24bsh^2 + 4bs^2h`` for ``f = 4``
  (QKV 6bsh^2, scores and attention-over-V 4bs^2h, projection 2bsh^2, MLP 4f*bsh^2;
  Narayanan et al., SC'21, arXiv:2104.04473, eq. 3; Korthikanti et al., arXiv:2205.05198).
  Backward = 2 x forward; the zero-bubble split gives the weight-gradient part ``W`` the GEMM
  FLOPs once and the input-gradient part ``I`` the rest (Qi et al., arXiv:2401.10241).
* parameters ``(4 + 2f)h^2 + (9 + f)h`` = ``12h^2 + 13h`` for ``f = 4`` (QKV 3h^2+3h, projection
  h^2+h, MLP 8h^2+5h, two LayerNorms 4h), times ``d`` bytes.
* activation bytes ``sbh*(34 + 5*a*s/h)`` for 16-bit activations and ``f = 4`` (Korthikanti et
  al. Table 2, no parallelism; pipesim reference memory.md §2). In general
  ``d*((8 + 2f)*sbh + 2*a*s^2*b) + 2*sbh + a*s^2*b`` (16-bit tensors scale with ``d``; the three
  dropout masks stay 1 byte per element).
* ``out_bytes`` ``s*b*h*d`` (the hidden state sent to the next stage).
* ``attn_core_act_bytes`` ``(2d + 1)*a*s^2*b`` (= ``5as^2b`` at 16 bit: softmax output, dropout
  mask, dropout output) and ``attn_core_flops`` ``4*b*s^2*h``: what selective recompute drops
  and repeats (Korthikanti et al., memory.md §2, §5.1).

Embedding layer: word + position embeddings (BERT also token-type embeddings and a LayerNorm).
It is memory-bound, so its time is bytes moved / HBM bandwidth: forward reads the looked-up rows
and writes the sum (``8bs + (2b + 1)*s*h*d`` bytes, plus ``2bsh*d`` for BERT's LayerNorm);
backward reads the output gradient and writes a dense gradient of both tables
(``b*s*h*d + (V + s)*h*d``; PyTorch's default dense embedding gradient), all weight-gradient.
Activation bytes ``8sb + sbh`` (token ids and the embedding-dropout mask, as in Megatron's
estimator ``theoretical_memory_usage.py``). ``flops`` is 0: the standard count excludes it.

Head layer: the final LayerNorm (GPT) or the MLM transform, pooler and NSP classifier (BERT),
then the output projection onto the vocabulary and the loss. Megatron keeps a separate copy of
the word embedding on the last pipeline stage for this projection, so its ``V*h`` parameters are
counted here too: :attr:`Trace.param_bytes` therefore exceeds the unique parameter count by
``V*h*d``. Forward FLOPs ``2bshV`` (+ ``2bsh^2 + 2bh^2 + 4bh`` for BERT's transform, pooler and
NSP). Activation bytes ``4sbh + 4sbV`` (Megatron's estimate for the output layer and fp32
cross-entropy, memory.md §2). ``out_bytes`` is 0: nothing leaves the last layer.

Ops the host issues per layer (``fwd_ops``, ``bwd_ops``): those of Megatron's layers, counted
from its code (:mod:`sim.compute.megatron_ops`; the head's loss as ``cross_entropy_fusion``
says, :func:`sim.compute.loss_fusion.loss_ops`); the same at every micro-batch size. A block
also records its ``nn.Module`` calls and ``autograd.Function`` applies (``fwd_modules``,
``fwd_functions``: :data:`sim.compute.megatron_ops.BLOCK_CALLS`); the embedding and the head do
not (a few calls each, left out).
"""

from __future__ import annotations

from typing import Any

from sim.compute.hf_bert import classifier_times, hf_block_times, hf_shape
from sim.compute.layers import embedding_times, head_times
from sim.compute.linear_bias import check_linear_bias
from sim.compute.loss_fusion import CROSS_ENTROPY_FUSIONS
from sim.compute.transformer import BlockShape, BlockTimes, block_times
from sim.errors import InputError
from sim.hardware.gpu_compute import ComputeSpec
from sim.hardware.loader import load_hardware
from sim.trace.analytic_layers import (
    attn_core_act_bytes,
    block_act_bytes,
    block_fwd_flops,
    block_layer,
    block_params,
    embedding_layer,
    head_layer,
)
from sim.trace.analytic_provenance import SOURCES, analytic_provenance, unique_parameters
from sim.trace.hf_layers import check_modeling, classifier_head, with_tensors
from sim.trace.model_presets import MODEL_PRESETS
from sim.trace.schema import Trace, dtype_bytes

V100_SXM2 = {"gpu_model": "V100-SXM2", "peak_flops": 125e12, "hbm_bandwidth_Bps": 900e9}
"""V100 SXM2 peaks: 125 TFLOPS dense fp16 tensor, 900 GB/s HBM2 (hardware.md §1)."""


def preset_gpu(preset: str = "dgx1-v100-16gb") -> ComputeSpec:
    """The :class:`ComputeSpec` of a hardware preset's GPU (default: DGX-1's V100-SXM2)."""
    spec = load_hardware(preset).gpus[0].compute
    assert spec is not None
    return spec


def _check(kind: str, dropout_add: str, cross_entropy_fusion: str, **ints: int) -> None:
    """Raises:
    ValueError: an unknown ``dropout_add``, ``cross_entropy_fusion`` or ``kind``, a size
        that is not a positive integer, ``hidden % heads != 0``.
    """
    if dropout_add not in ("eager", "fused"):
        raise ValueError(f"dropout_add must be 'eager' or 'fused', got {dropout_add!r}")
    if cross_entropy_fusion not in CROSS_ENTROPY_FUSIONS:
        raise ValueError(f"cross_entropy_fusion must be one of {CROSS_ENTROPY_FUSIONS}")
    if kind not in ("gpt", "bert"):
        raise ValueError(f"kind must be 'gpt' or 'bert', got {kind!r}")
    for key, v in ints.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{key} must be a positive integer, got {v!r}")
    if ints["hidden"] % ints["heads"]:
        raise ValueError(f"hidden {ints['hidden']} is not divisible by heads {ints['heads']}")


def transformer_trace(
    kind: str,
    *,
    name: str,
    layers: int,
    hidden: int,
    heads: int,
    seq_len: int,
    vocab: int,
    microbatch_size: int,
    dtype: str = "fp16",
    gpu_model: str | None = None,
    peak_flops: float | None = None,
    efficiency: float | None = None,
    ffn_mult: int = 4,
    hbm_bandwidth_Bps: float = 900e9,
    gpu: ComputeSpec | None = None,
    attention: str = "math",
    modeling: str = "megatron",
    dropout_add: str = "eager",
    cross_entropy_fusion: str = "unfused",
    linear_bias: str = "fused",
) -> Trace:
    """An analytic trace of a GPT or BERT stack (formulas and sources in the module doc).

    Args:
        kind: ``"gpt"`` (causal LM head) or ``"bert"`` (MLM + NSP heads).
        name: trace name.
        layers, hidden, heads, seq_len, vocab: model shape (``hidden % heads == 0``).
        microbatch_size: samples per micro-batch ``b``.
        dtype: parameter and activation dtype (``fp16``, ``bf16``, ``fp32``).
        gpu_model: device name recorded in the trace (default: ``gpu.model``).
        peak_flops: peak dense FLOP/s for ``dtype`` when ``gpu`` is not given.
        efficiency: a constant achieved fraction of ``peak_flops`` in (0, 1]: times are then
            FLOPs / (peak x efficiency) (the constant-efficiency model, linear in ``b``). It is
            the model whenever ``gpu`` is not given (default 0.5 then); with ``gpu`` and no
            ``efficiency``, the kernel model of :mod:`sim.compute` times the layers.
        ffn_mult: FFN width / hidden (4 for GPT-2 and BERT).
        hbm_bandwidth_Bps: HBM bandwidth when ``gpu`` is not given (default V100's 900 GB/s).
        gpu: the GPU for the kernel model (e.g. :func:`preset_gpu`).
        attention: ``"math"`` (Megatron-LM's unfused core; the Korthikanti activation formula)
            or ``"flash"`` (torch SDPA's fused kernel: no ``s^2`` stash, see
            :mod:`sim.compute.attention`).
        modeling: ``"megatron"`` (Megatron-LM's layers, fused QKV, the heads above) or, for
            ``kind="bert"`` with the kernel model, ``"hf"``: Hugging Face's
            ``BertForSequenceClassification`` as eager PyTorch runs it, PatrickStar's benchmark
            model (:mod:`sim.compute.hf_bert`: separate Q/K/V, unfused bias adds, scale and
            mask, layout copies; pooler and classifier head, no vocabulary projection).
        dropout_add: ``"eager"`` (a dropout kernel, then the residual add) or ``"fused"``
            (Megatron-DeepSpeed's fused bias-dropout-add: one kernel per hidden dropout,
            :func:`sim.compute.transformer._dropout_residual`).
        cross_entropy_fusion: the loss, one of :data:`sim.compute.loss_fusion.
            CROSS_ENTROPY_FUSIONS`, recorded in the model shape: the head's loss kernels
            (kernel model; :func:`sim.compute.layers.head_kernels`, as the decoder path's) and
            host ops (:func:`sim.compute.megatron_ops.head_ops`) are that loss's, and the memory
            model keeps its stash (:mod:`sim.memory.layer_work`).
        linear_bias: ``"fused"`` (the QKV bias added in its GEMM, PyTorch >= 1.12) or
            ``"unfused"`` (a separate add kernel after the QKV GEMM, as ``F.linear`` on a 3-D
            input runs it before PyTorch 1.12: :mod:`sim.compute.linear_bias`).

    Returns:
        ``layers + 2`` layers: ``embedding``, ``block.0`` ... ``block.{L-1}``, ``head``.

    Raises:
        ValueError: unknown kind, dtype, attention, dropout_add or cross_entropy_fusion,
            non-positive sizes,
            ``hidden % heads != 0``, efficiency outside (0, 1], no GPU or peak given,
            non-positive peak or bandwidth; ``modeling`` not ``megatron`` or ``hf``, or ``hf``
            with a GPT, without ``gpu`` or with a constant ``efficiency``.
    """
    # Long by its provenance inputs record; the rest is in functions.
    check_modeling(modeling, kind, efficiency, gpu)
    check_linear_bias(linear_bias)
    _check(
        kind,
        dropout_add,
        cross_entropy_fusion,
        layers=layers,
        hidden=hidden,
        heads=heads,
        seq_len=seq_len,
        vocab=vocab,
        microbatch_size=microbatch_size,
        ffn_mult=ffn_mult,
    )
    gpu, efficiency = _timing_gpu(gpu, gpu_model, peak_flops, efficiency, hbm_bandwidth_Bps)
    gpu_model = gpu_model or gpu.model
    hf = modeling == "hf"
    shape = _block_shape(
        kind, hidden, heads, seq_len, ffn_mult, attention, dropout_add, hf, linear_bias
    )
    d, b, s, h = dtype_bytes(dtype), microbatch_size, seq_len, hidden
    modelled = efficiency is None
    flops_per_s = gpu.peak_flops(dtype) * (efficiency or 1.0)
    hbm = gpu.hbm_bandwidth_Bps
    emb_t = embedding_times(kind, b, s, h, vocab, gpu, dtype) if modelled else None
    if hf:
        blk_t: BlockTimes | None = hf_block_times(shape, b, gpu, dtype)
        head_t: BlockTimes | None = classifier_times(b, h, gpu, dtype)
    else:
        blk_t = block_times(shape, b, gpu, dtype) if modelled else None
        head_t = (
            head_times(kind, b, s, h, vocab, gpu, dtype, cross_entropy_fusion) if modelled else None
        )
    flash = attention == "flash"
    chain = [embedding_layer(kind, b, s, h, vocab, d, hbm, emb_t)]
    chain += [
        block_layer(i, b, s, h, heads, ffn_mult, d, flops_per_s, blk_t, flash)
        for i in range(layers)
    ]
    chain.append(
        classifier_head(b, h, d, head_t)
        if hf and head_t
        else head_layer(kind, b, s, h, vocab, d, flops_per_s, head_t, cross_entropy_fusion)
    )
    if hf:
        chain = with_tensors(chain)
    inputs = {
        "kind": kind,
        "layers": layers,
        "hidden": hidden,
        "heads": heads,
        "seq_len": seq_len,
        "vocab": vocab,
        "microbatch_size": microbatch_size,
        "dtype": dtype,
        "gpu_model": gpu_model,
        "ffn_mult": ffn_mult,
        "attention": attention,
    }
    options = dict(
        modeling=modeling,
        dropout_add=dropout_add,
        cross_entropy_fusion=cross_entropy_fusion,
        linear_bias=linear_bias,
    )
    return Trace(
        name=name,
        layers=tuple(chain),
        microbatch_size=microbatch_size,
        dtype=dtype,
        device=gpu_model,
        provenance=analytic_provenance(inputs, options, gpu, efficiency),
    )


def _block_shape(
    kind: str,
    hidden: int,
    heads: int,
    seq_len: int,
    ffn_mult: int,
    attention: str,
    dropout_add: str,
    hf: bool,
    linear_bias: str = "fused",
) -> BlockShape:
    """The transformer block :func:`transformer_trace` times: Hugging Face's BERT layer
    (``hf``, :func:`sim.compute.hf_bert.hf_shape`) or Megatron's (causal for a GPT)."""
    if hf:
        return hf_shape(hidden, heads, seq_len, ffn_mult * hidden)
    return megatron_block(
        kind, hidden, heads, seq_len, ffn_mult, attention, dropout_add, linear_bias=linear_bias
    )


def megatron_block(
    kind: str,
    hidden: int,
    heads: int,
    seq_len: int,
    ffn_mult: int = 4,
    attention: str = "math",
    dropout_add: str = "eager",
    dropout: bool = True,
    linear_bias: str = "fused",
) -> BlockShape:
    """The Megatron-LM transformer block of an analytic ``kind`` (``gpt``: causal; ``bert``)
    stack: FFN width ``ffn_mult * hidden``, the ``attention`` core, the hidden dropouts
    fused with their residual adds when ``dropout_add`` is ``fused``, the QKV bias its own
    kernel when ``linear_bias`` is ``unfused`` (:mod:`sim.compute.linear_bias`). What
    :func:`transformer_trace` times and :mod:`sim.parallel.shard` splits from its recorded
    inputs."""
    return BlockShape(
        hidden,
        heads,
        seq_len,
        ffn_mult * hidden,
        dropout=dropout,
        causal=kind == "gpt",
        attention=attention,
        fused_dropout_add=dropout_add == "fused",
        unfused_qkv_bias=linear_bias == "unfused",
    )


def _timing_gpu(
    gpu: ComputeSpec | None,
    gpu_model: str | None,
    peak_flops: float | None,
    efficiency: float | None,
    hbm_bandwidth_Bps: float,
) -> tuple[ComputeSpec, float | None]:
    """The GPU that times :func:`transformer_trace`'s layers and the constant efficiency
    (None: the kernel model of ``gpu``): without ``gpu``, a spec of only ``peak_flops``
    (FLOP/s) and ``hbm_bandwidth_Bps`` (B/s) at ``efficiency`` (default 0.5).

    Raises:
        ValueError: efficiency outside (0, 1]; no ``gpu`` and no ``gpu_model`` and
            ``peak_flops``; a non-positive peak or bandwidth.
    """
    if efficiency is not None and not 0 < efficiency <= 1:
        raise ValueError(f"efficiency must be in (0, 1], got {efficiency}")
    if gpu is not None:
        return gpu, efficiency
    if peak_flops is None or gpu_model is None:
        raise ValueError("give gpu= (a ComputeSpec) or gpu_model= and peak_flops=")
    if not (peak_flops > 0 and hbm_bandwidth_Bps > 0):
        raise ValueError("peak_flops and hbm_bandwidth_Bps must be > 0")
    # only the peaks matter to the constant-efficiency model
    spec = ComputeSpec(gpu_model, peak_flops, peak_flops, hbm_bandwidth_Bps, 1, 1.0, 1.0)
    return spec, efficiency or 0.5


def preset_trace(
    name: str,
    microbatch_size: int = 1,
    gpu_model: str | None = None,
    peak_flops: float | None = None,
    *,
    dtype: str = "fp16",
    efficiency: float | None = None,
    hbm_bandwidth_Bps: float = 900e9,
    gpu: ComputeSpec | None = None,
    attention: str = "math",
) -> Trace:
    """:func:`transformer_trace` of a :data:`MODEL_PRESETS` entry.

    Default device: the ``dgx1-v100-16gb`` preset's V100-SXM2 (:func:`preset_gpu`), unless
    ``gpu`` or ``gpu_model`` + ``peak_flops`` are given.

    Raises:
        InputError: unknown preset name (the message lists the presets).
        ValueError: as :func:`transformer_trace`.
    """
    if name not in MODEL_PRESETS:
        raise InputError(
            f"unknown model preset {name!r}; available: {', '.join(MODEL_PRESETS)}", field="model"
        )
    if gpu is None and peak_flops is None:
        gpu = preset_gpu()
    shape: dict[str, Any] = dict(MODEL_PRESETS[name])
    kind = str(shape.pop("kind"))
    return transformer_trace(
        kind,
        name=name,
        microbatch_size=microbatch_size,
        dtype=dtype,
        gpu_model=gpu_model,
        peak_flops=peak_flops,
        efficiency=efficiency,
        hbm_bandwidth_Bps=hbm_bandwidth_Bps,
        gpu=gpu,
        attention=attention,
        **shape,
    )  # type: ignore[arg-type]


__all__ = [
    "MODEL_PRESETS",  # re-exported: sim.trace.model_presets
    "SOURCES",  # re-exported: sim.trace.analytic_provenance
    "V100_SXM2",
    "attn_core_act_bytes",  # re-exported: sim.trace.analytic_layers
    "block_act_bytes",
    "block_fwd_flops",
    "block_params",
    "preset_gpu",
    "megatron_block",
    "preset_trace",
    "transformer_trace",
    "unique_parameters",  # re-exported: sim.trace.analytic_provenance
]
