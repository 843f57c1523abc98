"""Analytic traces of Megatron-Core's T5 (encoder-decoder), one GPU or one tensor rank.

Nothing here is measured: every layer's times are the kernel model's (:mod:`sim.compute.t5`,
on a :class:`~sim.hardware.gpu_compute.ComputeSpec`), its bytes counted from tensor sizes. The
chain (:func:`sim.compute.t5.layer_names`): ``embedding`` (the word and position tables,
called on the encoder and the decoder tokens), ``enc_block.0`` ... ``enc_block.{L_e-1}`` (the
last with the encoder's final LayerNorm), ``dec_block.0`` ... ``dec_block.{L_d-1}`` (self-
attention, cross-attention over the encoder output, MLP), ``head`` (the decoder's final norm,
the output layer, the loss). The shape is recorded in ``provenance.inputs`` and
``provenance.model_shape`` (``kind: t5``), so a trace is regenerated at any micro-batch size,
on any GPU and on one of ``t`` tensor ranks (:mod:`sim.parallel.t5_shard`).

``out_bytes``: the encoder's hidden state ``b s_e h d`` after the embedding and each encoder
layer, the decoder's hidden state and the encoder output ``b (s_d + s_e) h d`` after each
decoder layer (what Megatron's T5 pipeline sent between stages: ``examples/t5/
pretrain_t5.py``'s docstring), ``/ t`` on a tensor rank. Megatron-Core at the commit the
functional tests ran (NVIDIA/Megatron-LM@d98e8a64dd ``examples/t5/pretrain_t5.py:97-98``)
refuses pipeline parallelism for T5 (``"Pipeline parallelism is not supported for T5."``):
these traces are for one pipeline stage; the readers refuse T5 runs with ``pp > 1``.

``param_bytes`` of the head include a copy of the word table, as the GPT generator counts it
(:mod:`sim.trace.generator`): the framework drops it where embedding and head share a stage,
which for T5 is always. Host ops per layer: an assumption (:mod:`sim.compute.t5_ops`).
"""

from __future__ import annotations

from typing import Any

from sim.compute.kernels import phase_time
from sim.compute.t5 import (
    T5Shape,
    layer_act_bytes,
    layer_kernels,
    layer_names,
    layer_params,
    unique_params,
)
from sim.compute.t5_ops import t5_layer_ops, t5_tensors
from sim.hardware.gpu_compute import ComputeSpec
from sim.trace.schema import LayerProfile, Trace, dtype_bytes, recorded_shape

SOURCES = {
    "model": "NVIDIA/Megatron-LM@d98e8a64dd megatron/core/models/T5/t5_model.py, t5_spec.py, "
    "examples/t5/pretrain_t5.py",
    "kernels": "sim.compute.t5 (GEMMs 2mnk, attention core sim.compute.attention)",
    "activations": "Korthikanti et al. arXiv:2205.05198 §4.1, Table 2, per tensor; "
    "cross-attention counted the same way (sim.compute.t5)",
    "tensor_parallel": "Shoeybi et al. arXiv:1909.08053 §3; linear_q, linear_kv column-"
    "parallel, linear_proj row-parallel (t5_spec.py)",
    "ops": "assumption: Megatron-DeepSpeed's GPT block counts (sim.compute.t5_ops)",
    "pipeline": "Megatron-LM@d98e8a64dd examples/t5/pretrain_t5.py:97-98 refuses pp > 1 for T5",
}


def _core(kind: str, m: T5Shape, b: int, d: int, t: int) -> tuple[float, float]:
    """``(attn_core_act_bytes, attn_core_flops)`` of a layer on one of ``t`` ranks: the
    ``math`` core's score stash and FLOPs (selective recompute's share; 0 with ``flash``)."""
    if m.attention != "math" or kind in ("embedding", "head"):
        return 0.0, 0.0
    a, q = m.heads, m.q
    se, sd = m.encoder_seq, m.decoder_seq
    if kind in ("enc_block", "enc_last"):
        pairs = se * se
    else:
        pairs = sd * sd + sd * se
    return (2 * d + 1) * a * pairs * b / t, 4.0 * b * pairs * q / t


def _out_bytes(kind: str, m: T5Shape, b: int, d: int, t: int) -> float:
    h = m.hidden
    if kind == "head":
        return 0.0
    tokens = m.encoder_seq + (m.decoder_seq if kind == "dec_block" else 0)
    return float(b * tokens * h * d) / t


def t5_layer(
    name: str, kind: str, m: T5Shape, b: int, gpu: ComputeSpec, dtype: str, t: int = 1,
    sp: bool = False,
) -> LayerProfile:  # fmt: skip
    """One layer on ``gpu`` at micro-batch ``b`` on one of ``t`` tensor ranks (module doc).

    Raises:
        ValueError: as :func:`sim.compute.t5.layer_kernels`.
    """
    d = dtype_bytes(dtype)
    fwd, bwd_in, bwd_w = layer_kernels(kind, m, b, d, t, sp)
    f, i, w = (phase_time(k, gpu, dtype).total_s if k else 0.0 for k in (fwd, bwd_in, bwd_w))
    core_act, core_flops = _core(kind, m, b, d, t)
    fwd_ops, bwd_ops, mods, funcs = t5_layer_ops(kind)
    return LayerProfile(
        name=name,
        fwd_s=f,
        bwd_s=i + w,
        param_bytes=float(layer_params(kind, m, t) * d),
        act_bytes=layer_act_bytes(kind, m, b, d, t, sp),
        out_bytes=_out_bytes(kind, m, b, d, t),
        bwd_input_s=i,
        bwd_weight_s=w,
        flops=float(sum(k.flops for k in fwd)),
        attn_core_act_bytes=core_act or None,
        attn_core_flops=core_flops or None,
        fwd_ops=fwd_ops,
        bwd_ops=bwd_ops,
        fwd_modules=mods,
        fwd_functions=funcs,
        param_tensors=float(sum(t5_tensors(kind))),
    )


def t5_layers(
    m: T5Shape, b: int, gpu: ComputeSpec, dtype: str, t: int = 1, sp: bool = False
) -> tuple[LayerProfile, ...]:
    """Every layer of ``m`` (:func:`sim.compute.t5.layer_names`) on one of ``t`` ranks."""
    kinds = {k: t5_layer("", k, m, b, gpu, dtype, t, sp) for k in dict.fromkeys(
        k for _, k in layer_names(m))}  # fmt: skip
    return tuple(LayerProfile(**{**kinds[k].__dict__, "name": n}) for n, k in layer_names(m))


def t5_trace(
    shape: T5Shape | dict[str, Any],
    *,
    name: str,
    microbatch_size: int,
    gpu: ComputeSpec,
    dtype: str = "bf16",
) -> Trace:
    """An analytic trace of a T5 on one GPU (module doc).

    Args:
        shape: the model, or its :meth:`T5Shape.to_dict` form.
        name: trace name.
        microbatch_size: ``b``.
        gpu: the GPU whose kernel model times the layers.
        dtype: ``bf16``, ``fp16`` or ``fp32``.

    Raises:
        ValueError: an invalid shape or ``microbatch_size < 1``.
    """
    m = shape if isinstance(shape, T5Shape) else T5Shape.from_dict(dict(shape))
    if microbatch_size < 1:
        raise ValueError(f"micro-batch size must be >= 1, got {microbatch_size}")
    layers = t5_layers(m, microbatch_size, gpu, dtype)
    shape_dict = m.to_dict() | {"seq_len": m.encoder_seq}
    inputs = {
        **shape_dict,
        "microbatch_size": microbatch_size,
        "dtype": dtype,
        "gpu": gpu.without_low_precision().to_dict(),
    }
    prov = {
        "source": "analytic: sim.trace.t5.t5_trace",
        "inputs": inputs,
        "model_shape": shape_dict,
        "formulas": dict(SOURCES),
        "unique_parameters": unique_params(m),
        "notes": (
            f"Generated, not measured: kernel model (sim.compute) on {gpu.model}, "
            f"{m.attention} attention. One pipeline stage (Megatron refuses pp > 1 for T5). "
            "param_bytes include the head's copy of the word embedding "
            f"({m.vocab}x{m.hidden}). Host ops per layer: an assumption, Megatron-DeepSpeed's "
            "GPT block counts standing in for Megatron-Core's T5 layers (sim.compute.t5_ops)."
        ),
    }
    return Trace(name, layers, microbatch_size, dtype, gpu.model, provenance=prov)


def stage_tensors_t5(trace: Trace, lo: int, hi: int) -> tuple[int, int]:
    """``(vectors, matrices)`` of the T5 layers ``lo:hi`` of ``trace``
    (:data:`sim.compute.t5_ops.T5_PARAM_TENSORS`).

    Raises:
        ValueError: the trace records no T5 shape.
    """
    out = [t5_tensors(k) for _, k in layer_names(t5_shape(trace))[lo:hi]]
    return sum(v for v, _ in out), sum(m for _, m in out)


def is_t5(trace: Trace) -> bool:
    """Whether ``trace`` records a T5 shape (``model_shape.kind == "t5"``)."""
    return recorded_shape(trace, "t5") is not None


def t5_shape(trace: Trace) -> T5Shape:
    """The :class:`T5Shape` a T5 trace records.

    Raises:
        ValueError: the trace records no T5 shape.
    """
    shape = recorded_shape(trace, "t5")
    if shape is None:
        raise ValueError(f"trace {trace.name} records no T5 model shape")
    return T5Shape.from_dict(shape)
