"""A trace as one of ``t`` Megatron tensor-parallel ranks runs it, and its collectives.

:func:`shard_trace` turns every layer of a transformer trace into its per-rank version:

* **time**: each phase (forward, input gradient, weight gradient) is scaled by the compute
  model's ratio ``model(t) / model(1)`` on the target GPU (:mod:`sim.compute`: GEMMs by shape at
  the split sizes ``h x 3h/t``, ``h/t x h``, ``h x f/t``, ``f/t x h``; attention over ``a/t``
  heads; norms and dropouts whole, or over ``s/t`` tokens with sequence parallelism; the
  vocabulary-split embedding gradient and output layer over ``V/t`` rows). A generated trace's
  times are the model's, so they become ``model(t)`` exactly; a measured trace keeps its
  measured-to-modelled ratio. Communication is not in these times: it is the engine's
  (:mod:`sim.engine.collectives`);
* **memory**: the split parameters (hence gradients and optimizer states) ``/ t``, the rest
  whole on every rank (the position embedding, LayerNorms, row-parallel biases:
  :mod:`sim.parallel.replicated`); a block's stash per
  Korthikanti et al. (:func:`~sim.parallel.megatron.block_act_bytes_tp`); the embedding's and
  head's stash ``/ t`` (their large parts, the vocabulary-sized logits, are split);
  ``out_bytes / t``: each rank sends its ``1/t`` of the boundary activation to its peer in the
  next stage (Megatron's scatter/gather optimisation, Narayanan et al., arXiv:2104.04473, §4.1;
  with sequence parallelism the activation is already split); the all-gather that rebuilds it
  over NVLink is not modelled;
* **collectives**: :class:`~sim.parallel.megatron.LayerComm` per layer;
* **per-module overhead**: each tensor-parallel module of the layer
  (:func:`~sim.parallel.megatron.parallel_modules`) adds the GPU's measured forward overhead to
  the forward and its backward overhead to the input-gradient backward (torch DTensor's dispatch, which the unsplit trace never paid; 0 unless
  ``sim calibrate`` measured it: Megatron's tensor parallelism has none). A layer whose trace
  records its own measured overhead at this ``t``, sequence parallelism and micro-batch size
  (``provenance.tensor_parallel_overhead``, written by ``sim profile --tensor-parallel``:
  :func:`measured_overheads`) is charged that instead, per layer of each measured kind
  (embedding, block, head): the sharded layer's forward and backward on ``t`` ranks in the
  replay's layout minus the rank's share as plain tensors minus its collectives timed alone
  (:mod:`backends.torch.calibrate.tp_layers`), which holds what the tiny-linear calibration misses
  (the dispatch of every DTensor op of a real layer, the unfused bias adds and redistribution
  copies, collectives waiting for the peer).
* **host ops**: each collective is one more op the host issues (``fwd_ops``/``bwd_ops``, when
  the trace has them): the ``all_reduce`` (or all-gather, reduce-scatter) call of Megatron's
  ``mappings.py`` functions, which at ``t = 1`` return their input; not the loss's
  all-reduces, which the trace's head already counts (:func:`sim.parallel.megatron.
  with_comm_ops`).

The trace must carry its model shape (``provenance.inputs`` of a generated trace, or
``provenance.model_shape`` of a profiled one): :func:`model_shape`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from sim.compute.kernels import phase_time
from sim.compute.layers import embedding_kernels, head_kernels
from sim.compute.t5 import T5Shape, check_tp
from sim.compute.transformer import BlockShape, BlockTimes, block_bwd, block_fwd, block_times
from sim.hardware.gpu_compute import ComputeSpec
from sim.parallel.megatron import (
    LayerComm,
    block_act_bytes_tp,
    layer_comm,
    parallel_modules,
    with_comm_ops,
)
from sim.parallel.replicated import rank_param_bytes, split_params
from sim.parallel.tp_overlap import Partners, partners
from sim.trace.generator import megatron_block
from sim.trace.schema import LayerProfile, Trace, dtype_bytes, layer_kind

SHAPE_KEYS = ("kind", "hidden", "heads", "seq_len", "vocab")
"""Fields of a model shape tensor parallelism needs."""


@dataclass(frozen=True)
class ShardedTrace:
    """A trace on one tensor-parallel rank.

    Attributes:
        trace: the per-rank layers (times, bytes as the module doc says).
        comm: the collectives of each layer, aligned with ``trace.layers``.
        tensor_parallel: ``t``.
        sequence_parallel: whether sequence parallelism is on.
        partners: the GEMMs beside each layer's collectives (:func:`~sim.parallel.tp_overlap.
            partners`; sequence parallelism on a GPU model only, else empty), for a framework
            that overlaps them.
    """

    trace: Trace
    comm: tuple[LayerComm, ...]
    tensor_parallel: int
    sequence_parallel: bool
    partners: tuple[Partners, ...] = ()


def model_shape(trace: Trace) -> dict[str, Any] | None:
    """The model shape a trace records: ``provenance.model_shape`` (profiled traces) or
    ``provenance.inputs`` (generated ones), with ``kind, hidden, heads, seq_len, vocab`` and
    optionally ``ffn_mult, attention, dropout``; None when neither has the fields."""
    prov = trace.provenance or {}
    for key in ("model_shape", "inputs"):
        shape = prov.get(key)
        if isinstance(shape, dict) and all(k in shape for k in SHAPE_KEYS):
            return shape
    return None


def shape_problem(trace: Trace, t: int, sp: bool) -> str:
    """Why ``trace`` cannot run with tensor parallelism ``t`` (``sp``), or ``""``."""
    if t == 1:
        return ""
    shape = model_shape(trace)
    if shape is None:
        return (
            f"tensor_parallel {t} needs the model shape of trace {trace.name} "
            f"(provenance.model_shape: {', '.join(SHAPE_KEYS)}), which it does not record"
        )
    if shape["kind"] == "t5":  # sim.parallel.t5_shard splits it
        return check_tp(T5Shape.from_dict(dict(shape)), t, sp)
    if shape["kind"] not in ("gpt", "bert"):
        return f"tensor parallelism models GPT and BERT stacks, not {shape['kind']!r}"
    a, f = int(shape["heads"]), int(shape.get("ffn_mult", 4)) * int(shape["hidden"])
    if a % t or f % t:
        return f"tensor_parallel {t} does not divide {trace.name}'s {a} heads (and FFN {f})"
    if sp and int(shape["seq_len"]) % t:
        return f"sequence parallelism needs seq_len {shape['seq_len']} divisible by {t}"
    return ""


def measured_overheads(trace: Trace, t: int, sp: bool) -> dict[str, tuple[float, float]]:
    """``{kind: (forward_s, backward_s)}`` each tensor-parallel layer kind (``embedding``,
    ``block``, ``head``) adds beyond its share of the compute and its collectives, as measured
    for this trace at ``t``, ``sp`` and the trace's micro-batch size
    (``provenance.tensor_parallel_overhead`` entries with ``tensor_parallel``,
    ``sequence_parallel``, ``microbatch_size`` and ``<kind>_fwd_s``, ``<kind>_bwd_s``); kinds
    without a measurement are left out (module doc)."""
    entries = (trace.provenance or {}).get("tensor_parallel_overhead") or []
    for e in entries if isinstance(entries, list) else []:
        key = (e.get("tensor_parallel"), bool(e.get("sequence_parallel")), e.get("microbatch_size"))
        if key == (t, sp, trace.microbatch_size):
            return {
                kind: (float(e[f"{kind}_fwd_s"]), float(e[f"{kind}_bwd_s"]))
                for kind in ("embedding", "block", "head")
                if f"{kind}_fwd_s" in e and f"{kind}_bwd_s" in e
            }
    return {}


def _block_shape(shape: dict[str, Any]) -> BlockShape:
    """The block of a generated GPT or BERT trace, from its recorded inputs."""
    return megatron_block(
        str(shape["kind"]),
        int(shape["hidden"]),
        int(shape["heads"]),
        int(shape["seq_len"]),
        int(shape.get("ffn_mult", 4)),
        str(shape.get("attention", "math")),
        str(shape.get("dropout_add", "eager")),
        dropout=bool(shape.get("dropout", True)),
        linear_bias=str(shape.get("linear_bias", "fused")),
    )


def _phases(times: BlockTimes) -> tuple[float, float, float]:
    return times.fwd.total_s, times.bwd_input.total_s, times.bwd_weight.total_s


def _layer_times(
    kind: str, shape: dict[str, Any], b: int, t: int, sp: bool, spec: ComputeSpec, dtype: str
) -> tuple[float, float, float]:
    """Modelled ``(fwd, bwd_input, bwd_weight)`` seconds of a layer kind on one of ``t`` ranks."""
    s, h, v = int(shape["seq_len"]), int(shape["hidden"]), int(shape["vocab"])
    d, vt = dtype_bytes(dtype), math.ceil(v / t)

    def run(kernels: list) -> float:
        return phase_time(kernels, spec, dtype).total_s if kernels else 0.0

    if kind == "embedding":
        fwd, bwd = embedding_kernels(shape["kind"], b, s, h, vt, d)
        return run(fwd), 0.0, run(bwd)
    if kind == "head":
        loss = str(shape.get("cross_entropy_fusion", "unfused"))  # the head's loss
        fwd, bwd_in, bwd_w = head_kernels(shape["kind"], b, s, h, vt, d, loss)
        return run(fwd), run(bwd_in), run(bwd_w)
    return _phases(block_times(_block_shape(shape), b, spec, dtype, t, sp))


def _ratio(new: float, old: float) -> float:
    return new / old if old > 0 else 1.0


def _split_bytes(kind: str, shape: dict[str, Any], d: int) -> float:
    """Bytes of a ``kind`` layer's parameters that Megatron splits over the tensor ranks
    (:func:`~sim.parallel.replicated.split_params`), ``d`` bytes per element."""
    h, v, f = int(shape["hidden"]), int(shape["vocab"]), int(shape.get("ffn_mult", 4))
    return float(split_params(kind, str(shape["kind"]), h, v, f) * d)


def _shard_layer(
    layer: LayerProfile,
    kind: str,
    ratios: tuple[float, float, float, float],
    shape: dict[str, Any],
    b: int,
    d: int,
    t: int,
    sp: bool,
    module_overhead_s: tuple[float, float] = (0.0, 0.0),
    measured_s: tuple[float, float] | None = None,
) -> LayerProfile:
    kf, ki, kw, kb = ratios
    mods = parallel_modules(kind, sp)
    extra_f, extra_b = measured_s or (mods * module_overhead_s[0], mods * module_overhead_s[1])
    s, h = int(shape["seq_len"]), int(shape["hidden"])
    bi: float | None = None
    bw: float | None = None
    if layer.bwd_input_s is not None and layer.bwd_weight_s is not None:
        bi, bw = layer.bwd_input_s * ki + extra_b, layer.bwd_weight_s * kw
        bwd = bi + bw
    else:
        bi, bw, bwd = layer.bwd_input_s, layer.bwd_weight_s, layer.bwd_s * kb + extra_b
    if kind == "block":
        act = block_act_bytes_tp(layer.act_bytes, b, s, h, d, t, sp)
    else:
        act = layer.act_bytes / t

    def div(v: float | None) -> float | None:
        return None if v is None else v / t

    return replace(
        layer,
        fwd_s=layer.fwd_s * kf + extra_f,
        bwd_s=bwd,
        bwd_input_s=bi,
        bwd_weight_s=bw,
        param_bytes=rank_param_bytes(layer.param_bytes, _split_bytes(kind, shape, d), t),
        act_bytes=act,
        out_bytes=layer.out_bytes / t,
        flops=div(layer.flops),
        attn_core_act_bytes=div(layer.attn_core_act_bytes),
        attn_core_flops=div(layer.attn_core_flops),
    )


def shard_trace(
    trace: Trace,
    t: int,
    sp: bool,
    spec: ComputeSpec | None,
    module_overhead_s: tuple[float, float] = (0.0, 0.0),
    regather: bool = False,
) -> ShardedTrace:
    """``trace`` (at its micro-batch size, on the target GPU) as one of ``t`` ranks runs it.

    Args:
        trace: a GPT or BERT trace with a model shape (:func:`model_shape`).
        t: tensor-parallel size (1: the trace unchanged, no collectives).
        sp: sequence parallelism.
        spec: the GPU whose compute model gives the time ratios; None: every phase ``/ t``.
        module_overhead_s: ``(forward, backward)`` seconds per tensor-parallel module
            (:attr:`~sim.hardware.parts.GPU.tp_module_overhead_s`; module doc); a layer
            kind with a measured overhead (:func:`measured_overheads`) is charged that instead.
        regather: with ``sp`` the backward all-gathers the column-parallel layers' saved
            inputs again (:mod:`sim.parallel.megatron`).

    Raises:
        ValueError: :func:`shape_problem` says why the trace cannot be split ``t`` ways.
    """
    if t == 1:
        return ShardedTrace(trace, tuple(LayerComm() for _ in trace.layers), 1, sp)
    problem = shape_problem(trace, t, sp)
    if problem:
        raise ValueError(problem)
    shape = model_shape(trace)
    assert shape is not None
    b, d = trace.microbatch_size, dtype_bytes(trace.dtype)
    s, h = int(shape["seq_len"]), int(shape["hidden"])
    ratios: dict[str, tuple[float, float, float, float]] = {}
    for kind in ("embedding", "block", "head"):
        if spec is None:
            ratios[kind] = (1 / t,) * 4
            continue
        f1, i1, w1 = _layer_times(kind, shape, b, 1, False, spec, trace.dtype)
        ft, it, wt = _layer_times(kind, shape, b, t, sp, spec, trace.dtype)
        ratios[kind] = (_ratio(ft, f1), _ratio(it, i1), _ratio(wt, w1), _ratio(it + wt, i1 + w1))
    layers, comm, pairs = [], [], []
    measured = measured_overheads(trace, t, sp)
    block = _block_kernels(shape, b, d, t) if sp and spec is not None else None
    loss = str(shape.get("cross_entropy_fusion", "unfused"))  # the head's loss
    for layer in trace.layers:
        kind = layer_kind(layer.name)
        comm.append(layer_comm(kind, b, s, h, d, t, sp, regather, loss))
        if block is not None:
            pairs.append(partners(comm[-1], *block) if kind == "block" else Partners())
        sharded = _shard_layer(
            layer, kind, ratios[kind], shape, b, d, t, sp, module_overhead_s, measured.get(kind)
        )
        layers.append(with_comm_ops(sharded, comm[-1]))
    how = f"t={t}{' with sequence parallelism' if sp else ''}"
    if measured:
        how += (
            "; overhead measured per layer ("
            + ", ".join(f"{k} {fw * 1e3:.2f}/{bw * 1e3:.2f} ms" for k, (fw, bw) in measured.items())
            + ")"
        )
    prov = {**trace.provenance, "tensor_parallel": how}
    out = replace(trace, layers=tuple(layers), provenance=prov, profiles={})
    return ShardedTrace(out, tuple(comm), t, sp, tuple(pairs))


def _block_kernels(shape: dict[str, Any], b: int, d: int, t: int) -> tuple[list, list, list]:
    """A block's ``(forward, input-gradient, weight-gradient)`` kernels on one of ``t``
    sequence-parallel ranks."""
    blk = _block_shape(shape)
    dx, dw = block_bwd(blk, b, d, t, True)
    return block_fwd(blk, b, d, t, True), dx, dw
