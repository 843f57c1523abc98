"""A T5 trace (:mod:`sim.trace.t5`) as one of ``t`` Megatron tensor-parallel ranks runs it.

:func:`shard_t5` is :func:`sim.parallel.shard.shard_trace` for T5: a T5 trace is always
generated, so each layer is regenerated on the rank (:func:`sim.trace.t5.t5_layers` with
``t`` and ``sp``: GEMMs at their split sizes, the attention cores over ``a/t`` heads,
parameters and activations as :mod:`sim.compute.t5` splits them), and its collectives are
Megatron's (Shoeybi et al., arXiv:1909.08053, §3; Korthikanti et al., arXiv:2205.05198,
§4.2.2; :mod:`sim.parallel.megatron`), with ``x_e = b s_e h d`` and ``x_d = b s_d h d``:

* the embedding, called twice: its vocabulary-parallel output all-reduced (``sp``:
  reduce-scattered) for the encoder tokens (``x_e``) and for the decoder tokens (``x_d``);
* an encoder layer: a GPT block's (:func:`~sim.parallel.megatron.block_comm` at ``s_e``);
* a decoder layer: forward, an all-reduce of ``x_d`` after each row-parallel projection (self-
  attention, cross-attention, MLP: 3); backward, one after each column-parallel layer's input
  gradient: ``linear_qkv``, ``linear_q`` and ``linear_fc1`` (``x_d``) and ``linear_kv``, whose
  input is the encoder output (``x_e``): 4. With sequence parallelism each forward all-reduce
  is a reduce-scatter and each column-parallel layer all-gathers its input (``linear_kv`` the
  encoder output, ``x_e``), the backward the transposes; ``regather`` adds the backward's
  all-gathers of the four column-parallel inputs;
* the head: :func:`~sim.parallel.megatron.head_comm` at ``s_d``.

Each collective adds its host ops (:func:`~sim.parallel.megatron.with_comm_ops`; the loss's
all-reduces none: the head's own count holds them). The per-module DTensor overhead of the replay (``tp_module_overhead_s``) is not charged: Megatron's tensor
parallelism has none.
"""

from __future__ import annotations

from dataclasses import replace

from sim.compute.t5 import T5Shape, check_tp, layer_names
from sim.hardware.gpu_compute import ComputeSpec
from sim.parallel.megatron import (
    AG,
    AR,
    RS,
    CommOp,
    LayerComm,
    block_comm,
    head_comm,
    regathered,
    with_comm_ops,
)
from sim.parallel.shard import ShardedTrace
from sim.trace.schema import Trace, dtype_bytes
from sim.trace.t5 import t5_layers, t5_shape


def embedding_comm_t5(m: T5Shape, b: int, d: int, t: int, sp: bool) -> LayerComm:
    """The embedding's collectives: one per call (module doc)."""
    op = RS if sp else AR
    h = m.hidden
    return LayerComm(tuple(CommOp(op, float(b * s * h * d)) for s in (m.encoder_seq,
                                                                       m.decoder_seq)))  # fmt: skip


def decoder_comm(m: T5Shape, b: int, d: int, t: int, sp: bool, regather: bool) -> LayerComm:
    """A decoder layer's collectives (module doc)."""
    xd, xe = float(b * m.decoder_seq * m.hidden * d), float(b * m.encoder_seq * m.hidden * d)
    if not sp:
        return LayerComm((CommOp(AR, xd),) * 3, tuple(CommOp(AR, x) for x in (xd, xd, xe, xd)))
    fwd = (
        CommOp(AG, xd), CommOp(RS, xd),  # self-attention
        CommOp(AG, xd), CommOp(AG, xe), CommOp(RS, xd),  # cross-attention: q, kv inputs
        CommOp(AG, xd), CommOp(RS, xd),  # MLP
    )  # fmt: skip
    again = regathered(xd, 3, regather) + regathered(xe, 1, regather)
    return LayerComm(fwd, fwd + again)


def t5_comm(
    kind: str, m: T5Shape, b: int, d: int, t: int, sp: bool, regather: bool = False
) -> LayerComm:
    """The tensor-parallel collectives of a T5 layer of ``kind`` (module doc)."""
    if t == 1:
        return LayerComm()
    if kind == "embedding":
        return embedding_comm_t5(m, b, d, t, sp)
    if kind in ("enc_block", "enc_last"):
        return block_comm(b, m.encoder_seq, m.hidden, d, t, sp, regather)
    if kind == "dec_block":
        return decoder_comm(m, b, d, t, sp, regather)
    return head_comm(b, m.decoder_seq, m.hidden, d, t, sp, regather)


def shard_t5(
    trace: Trace, t: int, sp: bool, spec: ComputeSpec | None, regather: bool = False
) -> ShardedTrace:
    """``trace`` (a T5 trace at its micro-batch size, on the target GPU) as one of ``t``
    tensor-parallel ranks runs it (module doc).

    Args:
        spec: the GPU of the rank (None: the GPU the trace was generated on).
        regather: with ``sp`` the backward all-gathers the column-parallel inputs again.

    Raises:
        ValueError: ``t`` does not divide the heads and FFN width (or, with ``sp``, the
            sequence lengths), or the trace records no T5 shape.
    """
    m = t5_shape(trace)
    if t == 1:
        return ShardedTrace(trace, tuple(LayerComm() for _ in trace.layers), 1, sp)
    why = check_tp(m, t, sp)
    if why:
        raise ValueError(why)
    gpu = spec or ComputeSpec(**trace.provenance["inputs"]["gpu"])
    b, d = trace.microbatch_size, dtype_bytes(trace.dtype)
    layers = t5_layers(m, b, gpu, trace.dtype, t, sp)
    comm = tuple(t5_comm(k, m, b, d, t, sp, regather) for _, k in layer_names(m))
    how = f"t={t}{' with sequence parallelism' if sp else ''} (T5: layers regenerated per rank)"
    out = replace(
        trace,
        layers=tuple(with_comm_ops(x, c) for x, c in zip(layers, comm, strict=True)),
        provenance={**trace.provenance, "tensor_parallel": how},
        profiles={},
    )
    return ShardedTrace(out, comm, t, sp)
