"""What a layer holds besides its stash while it runs, and the weights its GEMMs update.

A rank's peak falls while a layer runs: the stashes of the micro-batches in flight are live,
and so are the tensors the running layer allocates and frees again. :class:`LayerWork` gives,
per layer of a rank, those transients in bytes, the stash when the framework keeps a different
one from the trace's (the loss), and the shapes of its GEMM weights (Transformer Engine keeps
one gradient buffer per distinct shape, :func:`sim.memory.framework_memory.dummy_wgrad_bytes`),
a MoE layer's once per local expert: Megatron-Core's ``TEGroupedMLP`` runs its experts' GEMMs
through TE's ``GroupedLinear``, which registers one parameter per GEMM (``weight0`` ...
``weight{n-1}``: NVIDIA/TransformerEngine@d0067d0d ``pytorch/module/grouped_linear.py``
lines 1738-1753, unless ``single_grouped_weight``), so an
optimizer keeps one state tensor per expert weight (:mod:`sim.memory.tensor_program`).
Counted from the model shape on the rank (``t = b*s/cp`` tokens, ``r = t/tp`` with sequence
parallelism, ``d`` bytes per 16-bit element, ``h`` hidden, ``kv`` key/value width, ``f`` FFN
width, ``up = 2f`` for a gated MLP, ``V_t = V/tp`` vocabulary rows), as Megatron-Core with
Transformer Engine runs the layers (NVIDIA/Megatron-LM@d98e8a6, NVIDIA/TransformerEngine@d0067d0):

* **block backward** (the MLP, which the attention does not exceed unless its scores are
  materialised): the gradient entering the block ``r*h*d`` (kept by the residual branch), the
  MLP's second linear layer's input gradient ``t*f/tp*d`` and the activation function's input
  gradient ``t*up/tp*d``, live together while the SwiGLU/GeLU backward runs
  (``megatron/core/fusions/fused_bias_swiglu.py`` ``SwiGLUFunction.backward``), once autograd
  has freed the second linear layer's saved input (``t*f/tp*d``, part of the stash): beyond
  the stash ``r*h*d + t*up/tp*d``; attention:
  ``r*h*d`` plus dQ, dK, dV and dO ``t*(2h + 2kv)/tp*d``, and with unfused attention the
  gradients of the probabilities and the scores ``2*a/tp*s/cp*s*b*d``
  (``megatron/core/transformer/dot_product_attention.py``);
* **block forward**: with unfused attention the raw scores ``a/tp*s/cp*s*b*d`` live while the
  softmax writes the probabilities it keeps (``baddbmm`` output, ``FusedScaleMaskSoftmax``);
* **weight gradients** without gradient-accumulation fusion (``--no-gradient-accumulation-fusion``):
  each GEMM's weight gradient is a new tensor until DDP's hook adds it to ``main_grad`` and
  drops it (``distributed_data_parallel.py`` ``_make_backward_post_hook``): the largest weight
  of the layer, ``d`` bytes per element; with the fusion the GEMM accumulates into
  ``main_grad`` and returns TE's cached dummy (``get_dummy_wgrad``), counted once per shape;
* **embedding backward**: ``F.embedding``'s dense weight gradient ``V_t*h*d`` (no fusion:
  ``VocabParallelEmbedding``) and the incoming ``r*h*d``;
* **loss** (``LanguageModule.compute_language_model_loss``; which one: the model shape's
  ``cross_entropy_fusion``, which also times it, :mod:`sim.compute.loss_fusion`): unfused
  (``tensor_parallel/cross_entropy.py``) and Megatron's fused (``fusions/fused_cross_entropy.py``)
  keep the fp32 softmax ``4*t*V_t`` and, while the forward casts it, the 16-bit logits
  ``d*t*V_t``; their backward writes the gradient into the softmax and casts it to 16 bit
  (``d*t*V_t`` more); TE's (``--cross-entropy-fusion-impl te``, ``transformer_engine/pytorch/
  cross_entropy.py``) writes the gradient into the 16-bit logits in the forward and keeps only
  them, ``d*t*V_t``; the output layer's backward adds its input gradient ``t*h*d``; each MTP
  depth computes its loss through the same ``compute_language_model_loss``
  (``megatron/core/transformer/multi_token_prediction.py`` lines 1012-1027), so under TE's its
  stash keeps ``d*t*V_t`` of logits instead of the fp32 softmax (:func:`mtp_work`);
  Megatron's fused one runs its helpers through ``jit_fuser`` = ``torch.compile``
  (``megatron/core/jit.py``), and the compiled ``calculate_gradients``, which updates the
  saved softmax in place (``index_put``, ``mul_``) before its cast to 16 bit, works on a
  functional fp32 copy: ``4*t*V_t`` more in its backward (one copy; the functional tests
  generated with older images in 2025 show two or three, which is not modelled);
* **deferred embedding weight gradient** (``--defer-embedding-wgrad-compute``): the output
  layer appends its input ``r*h*d`` to ``embedding_activation_buffer`` in the forward and its
  output gradient ``d*t*V_t`` to ``grad_output_buffer`` in the backward, each while the buffer
  holds fewer than ``--wgrad-deferral-limit`` (0: no limit), and computes the weight gradient
  from them at the pipeline flush (``megatron/core/tensor_parallel/layers.py`` 660-664,
  1227-1232; ``pipeline_parallel/schedules.py`` 894-925):
  :func:`sim.memory.rank_memory.deferred_wgrad_bytes`;
* **MoE block backward**: ``r*h*d`` plus, per routed row ``n`` on the rank, the permuted
  gradient ``h*d`` and the experts' ``up_e/tp*d`` (as the dense MLP), and the shared
  experts' ``t*up_s/tp*d``; its forward: the ``r*k`` permuted token copies sent and the ``n``
  received (``megatron/core/transformer/moe/token_dispatcher.py``
  ``MoEAlltoAllTokenDispatcher``: ``permute`` then ``all_to_all``), ``(r*k + n)*h*d``;
* **ring context parallelism** (``cp_comm="p2p"``): the attention holds the key/value block it
  computes with and the one arriving from its neighbour, ``2*t*2kv/tp*d``, and in the
  backward those and their gradients (``AttnFuncWithCPAndKVP2P``'s ``p2p_comm_buffers``,
  ``transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py``).

A trace without a model shape (a profiled chain) gets the assumption pipesim made before: its
backward holds as much again as its stash (``bwd = act_bytes``), its forward nothing more.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.compute.decoder import tokens
from sim.compute.decoder_shape import DecoderShape, base_kind, kind_of
from sim.compute.loss_fusion import CROSS_ENTROPY_FUSIONS
from sim.compute.routing import Routing
from sim.parallel.expert import expert_plan
from sim.parallel.layout import ParallelLayout
from sim.parallel.shard import model_shape
from sim.trace.decoder import decoder_shape, is_decoder
from sim.trace.schema import LayerProfile, Trace, dtype_bytes, layer_kind

Shape = tuple[int, int]


@dataclass(frozen=True)
class WorkOptions:
    """How the framework runs the layers (module doc).

    The loss is not here: it is the model shape's ``cross_entropy_fusion``
    (:class:`~sim.compute.decoder_shape.DecoderShape`, a GPT/BERT trace's generator input),
    which times the head too (:mod:`sim.compute.loss_fusion`).

    Attributes:
        wgrad_fusion: gradient-accumulation fusion: weight gradients go straight into
            ``main_grad`` (no per-layer transient; TE's dummy per shape instead).
        wgrad_deferral: Megatron's ``--defer-embedding-wgrad-compute`` with
            ``--wgrad-deferral-limit`` (0: every micro-batch); None: off (module doc).
    """

    wgrad_fusion: bool = False
    wgrad_deferral: int | None = None


@dataclass(frozen=True)
class LayerWork:
    """One layer's transients and weights on one rank (module doc), bytes.

    Attributes:
        fwd_bytes: live besides the stash while its forward runs.
        bwd_bytes: live besides the stash while its backward runs.
        stash_bytes: the stash as the framework keeps it, when not the trace's (None).
        weights: ``(rows, cols)`` of its GEMM weights on the rank.
        tensors: the stash's tensors in the order the forward allocates them (relative
            sizes; :func:`stash_tensors` scales them to the stash), for the allocator model.
        deferred: ``(input, output gradient)`` bytes of one micro-batch the output layer
            keeps to the pipeline flush when its weight gradient is deferred (module doc).
    """

    fwd_bytes: float = 0.0
    bwd_bytes: float = 0.0
    stash_bytes: float | None = None
    weights: tuple[Shape, ...] = ()
    tensors: tuple[float, ...] = ()
    deferred: tuple[float, float] = (0.0, 0.0)


def stash_tensors(work: LayerWork, stash_bytes: float) -> tuple[float, ...]:
    """The stash of ``stash_bytes`` split as ``work.tensors`` (one tensor without them).

    Example:
        >>> stash_tensors(LayerWork(tensors=(1.0, 3.0)), 8.0)
        (2.0, 6.0)
    """
    total = sum(work.tensors)
    if stash_bytes <= 0:
        return ()
    if total <= 0:
        return (stash_bytes,)
    return tuple(stash_bytes * x / total for x in work.tensors if x > 0)


def generic_work(layer: LayerProfile) -> LayerWork:
    """A layer without a model shape: its backward holds its stash again (module doc)."""
    return LayerWork(bwd_bytes=layer.act_bytes, tensors=(layer.act_bytes,))


def _wgrad(weights: tuple[Shape, ...], d: int, opts: WorkOptions) -> float:
    if opts.wgrad_fusion or not weights:
        return 0.0
    return float(max(rows * cols for rows, cols in weights) * d)


def loss_work(
    t: int,
    r: int,
    h: int,
    vocab_rows: int,
    d: int,
    opts: WorkOptions,
    stash: float,
    loss: str = "unfused",
) -> LayerWork:
    """The output layer and the loss (module doc): ``stash`` is the trace's (unfused loss);
    ``loss``: the shape's ``cross_entropy_fusion``.

    Raises:
        ValueError: a loss not in :data:`~sim.compute.loss_fusion.CROSS_ENTROPY_FUSIONS`.
    """
    _check_loss(loss)
    weights = ((vocab_rows, h),)
    wg = _wgrad(weights, d, opts)
    logits = float(d * t * vocab_rows)
    norm = float(2 * r * h * d)
    deferred = (float(r * h * d), logits) if opts.wgrad_deferral is not None else (0.0, 0.0)
    if loss == "te":
        kept = stash - 4.0 * t * vocab_rows + logits
        return LayerWork(0.0, t * h * d + wg, kept, weights, (norm, logits), deferred)
    bwd = max(logits, logits - 4.0 * t * vocab_rows + t * h * d + wg)
    if loss == "native":  # the compiled gradient's functional fp32 copy
        bwd += 4.0 * t * vocab_rows
    return LayerWork(logits, bwd, None, weights, (norm, 4.0 * t * vocab_rows), deferred)


def _check_loss(loss: str) -> None:
    if loss not in CROSS_ENTROPY_FUSIONS:
        raise ValueError(
            f"cross_entropy_fusion must be one of {', '.join(CROSS_ENTROPY_FUSIONS)}, got {loss!r}"
        )


def mtp_work(layer: LayerProfile, t: int, vocab_rows: int, d: int, loss: str) -> LayerWork:
    """An MTP depth (not itemized: :func:`generic_work`), its loss as the framework keeps it: the
    trace's stash holds the fp32 softmax ``4*t*V_t``, TE's cross entropy (``loss``: the shape's
    ``cross_entropy_fusion``) the 16-bit logits ``d*t*V_t`` (module doc)."""
    if loss != "te":
        return generic_work(layer)
    kept = max(0.0, layer.act_bytes - (4.0 - d) * t * vocab_rows)
    return LayerWork(bwd_bytes=kept, stash_bytes=kept, tensors=(kept,))


def embedding_work(r: int, h: int, vocab_rows: int, d: int) -> LayerWork:
    """The word embedding's backward: its dense weight gradient and the incoming gradient."""
    return LayerWork(0.0, float((vocab_rows * h + r * h) * d), tensors=(float(r * h * d),))


def scores_bytes(heads: int, s_local: int, s: int, b: int, d: int) -> float:
    """One rank's attention scores (``heads`` on the rank, ``s_local`` queries over ``s``
    keys, ``b`` sequences): ``heads*s_local*s*b*d``."""
    return float(heads * s_local * s * b * d)


def decoder_block_work(
    kind: str, m: DecoderShape, b: int, d: int, lay: ParallelLayout, rows: tuple[float, ...]
) -> LayerWork:
    """A decoder block's transients, weights and stash tensors, without its weight
    gradients (:func:`decoder_work` adds them)."""
    tp = lay.tp
    t, r = tokens(m, b, tp, lay.sp, lay.cp)
    h, a = m.hidden, m.heads
    kv = h // a * (m.kv_heads or a)
    if m.mla is not None:
        weights = tuple((o, i) for _, i, o, _ in m.mla.linears(h, a, tp))
        qkv = t * a // tp * (2 * m.mla.d_qk + m.mla.d_v)
        out = t * a // tp * m.mla.d_v
    else:
        weights = (((h + 2 * kv) // tp, h), (h, h // tp))
        qkv, out = t * (h + 2 * kv) // tp, t * h // tp
    attn = float(r * h * d + (qkv + out) * d)
    tensors: list[float] = [r * h * d, r * h * d, qkv * d, out * d, 4.0 * t * a // tp]
    fwd = 0.0
    if m.attention == "math":
        sc = scores_bytes(a // tp, m.seq_len // lay.cp, m.seq_len, b, d)
        attn += 2 * sc
        fwd = sc
        tensors.append(sc)
    if lay.cp > 1 and lay.cp_comm == "p2p":
        q = t * a // tp * m.mla.d_qk if m.mla is not None else t * h // tp
        kv_chunk = (qkv - q) * d  # this rank's keys and values
        fwd += 2 * kv_chunk  # the KV block in hand and the one arriving
        attn += 4 * kv_chunk  # the same for K, V and their gradients
    tensors += [r * h * d, r * h * d]
    if kind == "moe_block" and m.moe is not None:
        moe_fwd, mlp, moe_weights, moe_tensors = _moe_part(m, d, lay, rows, t, r)
        weights += moe_weights
        tensors += moe_tensors
        fwd = max(fwd, moe_fwd)
        return LayerWork(fwd, max(attn, mlp), None, weights, tuple(float(x) for x in tensors))
    f = m.ffn_hidden // tp
    up = (2 if m.gated_mlp else 1) * f
    weights += ((up, h), (h, f))
    tensors += [t * up * d, t * f * d]
    bwd = max(attn, r * h * d + t * up * d)
    return LayerWork(fwd, bwd, None, weights, tuple(float(x) for x in tensors))


def _moe_part(
    m: DecoderShape, d: int, lay: ParallelLayout, rows: tuple[float, ...], t: int, r: int
) -> tuple[float, float, tuple[Shape, ...], list[float]]:
    """A MoE MLP's (forward transient, backward transient, weights, stash tensors) beyond
    its pre-MLP norm (``decoder_block_work``'s MoE half; ``h`` the routed row width ``w`` for
    the experts of a latent MoE)."""
    assert m.moe is not None
    moe, etp, h = m.moe, lay.expert_tp, m.hidden
    n = float(sum(rows))
    w = moe.row_width  # the latent width of a latent MoE (sim.compute.moe)
    fwd = (r * moe.top_k + n) * w * d  # permuted tokens and those received
    mlp = r * h * d + n * d * (w + moe.up_width / etp)
    local = max(1, moe.experts // lay.ep)  # one parameter per expert and GEMM (module doc)
    weights: tuple[Shape, ...] = ((moe.up_width // etp, w), (w, moe.expert_ffn // etp)) * local
    tensors = [n * w * d, n * moe.up_width / etp * d, n * moe.expert_ffn / etp * d]
    if moe.latent:
        weights += ((moe.latent, h), (h, moe.latent))
    if moe.shared_ffn:
        fs = moe.shared_ffn // lay.tp
        up_s = fs * (2 if moe.gated else 1)
        mlp += t * up_s * d
        weights += ((up_s, h), (h, fs))
        tensors += [t * up_s * d, t * fs * d]
    return fwd, mlp, weights, tensors


def hybrid_moe_work(
    m: DecoderShape, b: int, d: int, lay: ParallelLayout, rows: tuple[float, ...]
) -> LayerWork:
    """A hybrid model's MoE layer (Nemotron-H's ``E``: pre-norm, router and experts, no
    attention): its transients, weights and stash tensors as a decoder block's MoE half."""
    t, r = tokens(m, b, lay.tp, lay.sp, lay.cp)
    fwd, mlp, weights, tensors = _moe_part(m, d, lay, rows, t, r)
    return LayerWork(fwd, mlp, None, weights, tuple(float(x) for x in [r * m.hidden * d, *tensors]))


def decoder_work(
    trace: Trace, lay: ParallelLayout, routing: Routing, opts: WorkOptions
) -> tuple[LayerWork, ...]:
    """Per layer of a decoder rank trace (``trace``: as one rank of ``lay`` runs it)."""
    m = decoder_shape(trace)
    b, d = trace.microbatch_size, dtype_bytes(trace.dtype)
    t, r = tokens(m, b, lay.tp, lay.sp, lay.cp)
    rows: tuple[float, ...] = ()
    if m.moe is not None:
        plan = expert_plan(m.moe, routing, r, lay.ep, lay.expert_tp, d)
        rows = plan.rows[plan.busiest]
    vt = -(-m.vocab // lay.tp)
    kinds = trace.provenance.get("layer_kinds") or [kind_of(x.name) for x in trace.layers]
    cache: dict[str, LayerWork] = {}
    out = []
    for layer, kind in zip(trace.layers, kinds, strict=True):
        base = base_kind(kind)
        if base == "embedding":
            out.append(embedding_work(r, m.hidden, vt, d))
        elif base == "head":
            loss = m.cross_entropy_fusion
            out.append(loss_work(t, r, m.hidden, vt, d, opts, layer.act_bytes, loss))
        elif base in ("block", "moe_block"):
            if base not in cache:
                w = decoder_block_work(base, m, b, d, lay, rows)
                cache[base] = replace(w, bwd_bytes=w.bwd_bytes + _wgrad(w.weights, d, opts))
            out.append(cache[base])
        elif base == "moe" and m.moe is not None:  # a hybrid model's MoE layer
            if base not in cache:
                w = hybrid_moe_work(m, b, d, lay, rows)
                cache[base] = replace(w, bwd_bytes=w.bwd_bytes + _wgrad(w.weights, d, opts))
            out.append(cache[base])
        elif base == "mtp":
            out.append(mtp_work(layer, t, vt, d, m.cross_entropy_fusion))
        else:  # a hybrid model's mamba, attention or mlp layer: not itemized
            out.append(generic_work(layer))
    return tuple(out)


def gpt_work(trace: Trace, lay: ParallelLayout, opts: WorkOptions) -> tuple[LayerWork, ...]:
    """Per layer of a GPT/BERT rank trace (:mod:`sim.trace.generator`'s shape: ``f =
    ffn_mult*h``, non-gated, multi-head attention; ``math`` attention unless it says flash;
    the stash split in Korthikanti et al.'s terms, ``sbh`` units, as the tensors; the loss:
    its ``cross_entropy_fusion``, unfused when unrecorded)."""
    shape = model_shape(trace)
    assert shape is not None
    b, d, tp = trace.microbatch_size, dtype_bytes(trace.dtype), lay.tp
    h, a, s, v = (int(shape[k]) for k in ("hidden", "heads", "seq_len", "vocab"))
    f = int(shape.get("ffn_mult", 4)) * h // tp
    t = s * b
    r = t // tp if lay.sp else t
    vt = -(-v // tp)
    loss = str(shape.get("cross_entropy_fusion", "unfused"))
    weights = ((3 * h // tp, h), (h, h // tp), (f, h), (h, f))
    attn = float(r * h * d + t * 4 * h // tp * d)
    fwd = 0.0
    tensors: list[float] = [r * h * d, t * h * d, t * 3 * h // tp * d, t * h // tp * d]
    if str(shape.get("attention", "math")) == "math":
        sc = scores_bytes(a // tp, s, s, b, d)
        attn, fwd = attn + 2 * sc, sc
        tensors.append(2.5 * sc)
    tensors += [r * h * d, t * h * d, t * f * d, t * f * d]
    bwd = max(attn, r * h * d + t * f * d) + _wgrad(weights, d, opts)
    block = LayerWork(fwd, bwd, None, weights, tuple(float(x) for x in tensors))
    out = []
    for layer in trace.layers:
        kind = layer_kind(layer.name)
        if kind == "embedding":
            out.append(embedding_work(r, h, vt, d))
        elif kind == "head":
            out.append(loss_work(t, r, h, vt, d, opts, layer.act_bytes, loss))
        else:
            out.append(block)
    return tuple(out)


def trace_work(
    trace: Trace, lay: ParallelLayout, routing: Routing, opts: WorkOptions
) -> tuple[LayerWork, ...]:
    """Per layer of ``trace`` (one rank of ``lay``): from its model shape where it records one
    (decoder, GPT, BERT), else :func:`generic_work`."""
    if is_decoder(trace):
        return decoder_work(trace, lay, routing, opts)
    shape = model_shape(trace)
    if shape is not None and shape.get("kind") in ("gpt", "bert"):
        return gpt_work(trace, lay, opts)
    return tuple(generic_work(x) for x in trace.layers)


def with_framework_stash(trace: Trace, works: tuple[LayerWork, ...]) -> Trace:
    """``trace`` with each layer's stash as the framework keeps it (``LayerWork.stash_bytes``,
    e.g. TE's loss keeps the 16-bit logits instead of the fp32 softmax)."""
    if not any(w.stash_bytes is not None for w in works):
        return trace
    layers = tuple(
        layer if w.stash_bytes is None else replace(layer, act_bytes=w.stash_bytes)
        for layer, w in zip(trace.layers, works, strict=True)
    )
    return replace(trace, layers=layers)
