"""The ops the host issues for the layers of a Megatron GPT (or BERT), counted from its code.

An op is one call into PyTorch's operator dispatcher as a ``TorchDispatchMode`` sees it (ATen
ops below autograd, views included), the unit ``fwd_ops``/``bwd_ops`` of a trace count
(:mod:`sim.trace.schema`) and that the host model charges per op (:mod:`sim.hardware.host_ops`).
Counted by reading Megatron-DeepSpeed (github.com/microsoft/Megatron-DeepSpeed, the ``mpu``
generation that vTrain's and many published runs used): ``megatron/model/transformer.py``
(``ParallelTransformerLayer``, ``ParallelAttention``, ``ParallelMLP``,
``bias_dropout_add_fused_train``), ``megatron/mpu/layers.py`` (``ColumnParallelLinear`` and
``RowParallelLinear`` call ``F.linear``), ``megatron/mpu/mappings.py`` (the
``copy_to``/``reduce_from_tensor_model_parallel_region`` autograd functions),
``megatron/mpu/random.py`` (the CUDA RNG tracker's ``fork``) and
``megatron/model/fused_layer_norm.py``/``fused_softmax.py`` (apex's fused layer norm, the
upper-triangular masked softmax kernel), with fused bias-GeLU and bias-dropout-add on.

Rules used (PyTorch 1.x-2.x ATen): ``F.linear`` on a 3-D input is ``t, view, addmm, view`` with
a bias and ``t, view, mm, _unsafe_view`` without; ``.contiguous()`` of a permuted tensor is a
``clone``; an autograd ``Function`` that returns its input yields one alias view; a fused CUDA
extension allocates its outputs with ``empty`` (one op each); a TorchScript function dispatches
each op it runs (the legacy fuser's fusion group counts as one). Backward: each differentiable
forward op becomes a node whose formula dispatches its ops (``addmm``: two ``mm``, a ``t``, a
``sum`` for the bias; a view: one ``view``/``reshape``), plus one accumulation (``add_``) per
parameter tensor. The counts are approximate to a few ops; they are what the code issues, not
fitted to any timing.
"""

from __future__ import annotations

from sim.compute.loss_fusion import loss_ops

BLOCK_FWD = (
    ("input_layernorm: fused_layer_norm_cuda.forward_affine (output, mean, invvar)", 3),
    ("query_key_value: copy_to_tensor_model_parallel_region + F.linear with bias", 5),
    ("view to [sq, b, np, 3hn], split_tensor_along_last_dim", 2),
    ("query/key views, torch.empty for the scores, three transposes", 6),
    ("baddbmm, view to [b, np, sq, sk]", 2),
    ("FusedScaleMaskSoftmax: view, the kernel's output, view back", 3),
    ("CUDA RNG tracker fork: get_rng_state twice", 2),
    ("attention dropout (native_dropout)", 1),
    ("value/probs views, transpose, bmm, view, permute, contiguous (clone), view", 8),
    ("dense: F.linear without bias + reduce_from_tensor_model_parallel_region", 5),
    ("bias_dropout_add_fused_train: expand_as, add, dropout, add", 4),
    ("post_attention_layernorm", 3),
    ("torch.tensor(0.0) for moe_loss and mlp_bias on the GPU (two ops each)", 4),
    ("dense_h_to_4h: copy_to + F.linear without bias", 5),
    ("bias_gelu_impl (scripted, one fusion group)", 1),
    ("dense_4h_to_h: F.linear without bias + reduce_from", 5),
    ("bias_dropout_add_fused_train", 4),
)
"""Forward ops of one ``ParallelTransformerLayer`` (GPT, training), by what issues them."""

BLOCK_BWD = (
    ("two fused layer-norm backwards (grad input, gamma, beta each)", 6),
    ("query_key_value: addmm (2 mm, t, sum), t, two views, copy_to", 8),
    ("view, split (cat), query/key views, three transposes", 7),
    ("baddbmm (bmm and scale for each input, two transposes), view", 7),
    ("fused softmax backward: view, kernel output, view", 3),
    ("dropout backward, value/probs views", 3),
    ("bmm (2 bmm, 2 transposes), transpose, view, permute, view", 8),
    ("dense: mm (2 mm, 2 t), t, two views, reduce_from", 8),
    ("two bias-dropout-adds (scripted backward, expand's sum)", 8),
    ("dense_h_to_4h and dense_4h_to_h: mm backward, views, mappings", 16),
    ("bias-GeLU backward (fusion group) and the bias gradient's sum", 2),
    ("gradient accumulation into 12 parameter tensors (add_)", 12),
)
"""Backward ops of one ``ParallelTransformerLayer``."""

BLOCK_CALLS = (
    (
        "ParallelTransformerLayerPipe (the layer), input_layernorm and post_attention_layernorm "
        "(MixedFusedLayerNorm), attention (ParallelAttention), its query_key_value "
        "(ColumnParallelLinear), scale_mask_softmax (FusedScaleMaskSoftmax), attention_dropout "
        "(torch.nn.Dropout) and dense (RowParallelLinear), mlp (ParallelMLP), its dense_h_to_4h "
        "(ColumnParallelLinear) and dense_4h_to_h (RowParallelLinear)",
        11,
        0,
    ),
    (
        "two FusedLayerNormAffineFunction.apply (megatron/model/fused_layer_norm.py)",
        0,
        2,
    ),
    (
        "two copy_to_tensor_model_parallel_region (_CopyToModelParallelRegion.apply) in the "
        "ColumnParallelLinears, two reduce_from_tensor_model_parallel_region "
        "(_ReduceFromModelParallelRegion.apply) in the RowParallelLinears "
        "(megatron/mpu/layers.py, megatron/mpu/mappings.py; applied at t = 1 too: the "
        "Function returns its input)",
        0,
        4,
    ),
    (
        "ScaledUpperTriangMaskedSoftmax.apply (megatron/model/fused_softmax.py, causal mask)",
        0,
        1,
    ),
    ("bias_gelu_impl = GeLUFunction.apply (megatron/model/fused_bias_gelu.py)", 0, 1),
)
"""``(what, module calls, autograd.Function applies)`` of one ``ParallelTransformerLayer``'s
forward (GPT, training, the fusions on), counted from Megatron-DeepSpeed's
``megatron/model/transformer.py`` (``ParallelTransformerLayer.forward``,
``ParallelAttention.forward``, ``ParallelMLP.forward``) and the files named; ``F.linear``, the
RNG tracker's ``fork`` (a context manager) and the scripted ``bias_dropout_add_fused_train``
are neither. Each Function applied with autograd recording leaves one Python backward node
that the engine calls in the backward. The checkpoint wrapper's own ``CheckpointFunction`` is
charged per region (``checkpoint_s``), not here. What the host pays for them:
:meth:`sim.hardware.host_ops.HostOverhead.calls_s`."""

EMBEDDING_OPS = {"gpt": (12, 8), "bert": (18, 12)}
"""``(forward, backward)`` ops of Megatron's ``Embedding``: the vocabulary-parallel lookup's
range mask (``<``, ``>=``, ``|``, clone, ``-=``, masked fill), ``F.embedding``, the position
lookup, the sum, the embedding dropout inside an RNG fork, the ``[b, s] -> [s, b]`` transpose and
``contiguous``; BERT adds the token-type lookup and a layer norm. Backward: two dense
embedding backwards, the sum's and dropout's backwards, the mask's ``masked_fill``, the
accumulations."""

HEAD_OPS = {"gpt": (34, 20), "bert": (52, 34)}
"""``(forward, backward)`` ops of the head with the unfused loss: GPT's final layer norm,
``parallel_lm_logits`` (``copy_to`` + ``F.linear``), the transposes back to ``[b, s]``, and
``vocab_parallel_cross_entropy`` (an autograd ``Function`` of about 25 ops: max, all-reduce of
the max, subtract, the target range mask, gather of the predicted logits, exp, sum, all-reduces,
log, the loss) and the loss mask's mean; BERT adds the LM-head transform (dense, GeLU, layer
norm), the pooler and the binary head. A fused loss replaces the unfused one's ops by its own
(:func:`head_ops`)."""


PARAM_TENSORS = {"block": (8, 4), "embedding": (0, 2), "head": (2, 0)}
"""``(vectors, matrices)``: parameter tensors per layer of Megatron's GPT, each a separate
``p.grad`` to an optimizer that walks them one by one. A ``ParallelTransformerLayer`` holds the
weight and bias of ``input_layernorm``, ``query_key_value``, ``dense``,
``post_attention_layernorm``, ``dense_h_to_4h`` and ``dense_4h_to_h``: four weight matrices and
eight vectors (megatron/model/transformer.py); the ``Embedding`` the word and position
embeddings (megatron/model/language_model.py); the head ``final_layernorm``'s weight and bias,
plus the word embedding's copy where a last stage holds one (:func:`param_tensors`). Other
models are counted as GPT (an assumption)."""


def param_tensors(kind: str, holds_output_weight: bool = False) -> tuple[int, int]:
    """``(vectors, matrices)`` of a ``block``, ``embedding`` or ``head`` layer
    (:data:`PARAM_TENSORS`); a head that ``holds_output_weight`` (the tied word embedding's
    copy on a last stage) has one more matrix.

    Example:
        >>> param_tensors("block"), param_tensors("head", holds_output_weight=True)
        ((8, 4), (2, 1))
    """
    vectors, matrices = PARAM_TENSORS.get(kind, PARAM_TENSORS["block"])
    return vectors, matrices + (1 if kind == "head" and holds_output_weight else 0)


def stage_tensors(layers: list[tuple[str, float]], norm_bytes: float) -> tuple[int, int]:
    """``(vectors, matrices)`` of a stage whose layers are ``(kind, param_bytes)``
    (:func:`param_tensors`); a head holds the output weight when its parameters exceed
    ``norm_bytes`` (the final norm's weight and bias, ``2 h`` elements).

    Example:
        >>> stage_tensors([("block", 1e6), ("block", 1e6), ("head", 4e6)], norm_bytes=8192)
        (18, 9)
    """
    out = [param_tensors(kind, kind == "head" and nbytes > norm_bytes) for kind, nbytes in layers]
    return sum(v for v, _ in out), sum(m for _, m in out)


def block_ops() -> tuple[int, int]:
    """``(forward, backward)`` ops of one transformer block on one tensor rank, before the
    tensor-parallel collectives (:func:`sim.parallel.shard.shard_trace` adds one op per
    collective)."""
    return sum(n for _, n in BLOCK_FWD), sum(n for _, n in BLOCK_BWD)


def block_calls() -> tuple[int, int]:
    """``(module calls, Function applies)`` of one transformer block's forward
    (:data:`BLOCK_CALLS`); its backward calls one Python node per Function.

    Example:
        >>> block_calls()
        (11, 8)
    """
    return sum(m for _, m, _ in BLOCK_CALLS), sum(f for _, _, f in BLOCK_CALLS)


def embedding_ops(kind: str) -> tuple[int, int]:
    """``(forward, backward)`` ops of the embedding layer of a ``gpt`` or ``bert`` stack."""
    return EMBEDDING_OPS[kind]


def head_ops(kind: str, fusion: str = "unfused") -> tuple[int, int]:
    """``(forward, backward)`` ops of the head layer of a ``gpt`` or ``bert`` stack whose loss
    is ``fusion`` (:data:`HEAD_OPS`, the unfused loss's ops taken out and ``fusion``'s put in:
    :func:`sim.compute.loss_fusion.loss_ops`).

    Raises:
        ValueError: a fusion not in :data:`~sim.compute.loss_fusion.CROSS_ENTROPY_FUSIONS`.

    Example:
        >>> head_ops("gpt"), head_ops("gpt", "te")
        ((34, 20), (17, 13))
    """
    (fwd, bwd), (uf, ub), (lf, lb) = HEAD_OPS[kind], loss_ops("unfused"), loss_ops(fusion)
    return fwd - uf + lf, bwd - ub + lb


WHOLE_BLOCK_KINDS = ("block", "moe_block", "mtp")
"""Decoder layer kinds that hold a mixer and an MLP (:mod:`sim.compute.decoder_shape`)."""
HALF_BLOCK_KINDS = ("attention", "mlp", "moe", "mamba")
"""Hybrid layer kinds that hold one of the two (Megatron-Core's ``*``, ``-``, ``E``, ``M``)."""


def decoder_layer_ops(kind: str, fusion: str = "unfused") -> tuple[float, float, float, float]:
    """``(forward ops, backward ops, module calls, Function applies)`` the host issues for one
    layer of a decoder trace (:mod:`sim.trace.decoder`), by its base kind; a head's loss is
    ``fusion`` (:func:`head_ops`).

    An assumption, marked as such in the trace's provenance: Megatron-Core's layers (with
    Transformer Engine) have not been counted op by op as :data:`BLOCK_FWD` counts
    Megatron-DeepSpeed's, so a decoder block issues what a Megatron-DeepSpeed block does
    (:func:`block_ops`, :func:`block_calls`), a hybrid model's attention-, MLP-, MoE- or
    Mamba-only layer half of it, the embedding and the output layer what the GPT's do
    (:data:`EMBEDDING_OPS`, :data:`HEAD_OPS`). Without it a decoder trace issued no host work at
    all: a 12-layer, hidden-512 GPT on the decoder route came out 0.05 s where the GPT route
    (counted ops) gives 0.31 s and Megatron's functional test measured 0.29 s.

    Example:
        >>> decoder_layer_ops("block") == (*map(float, block_ops()), *map(float, block_calls()))
        True
        >>> decoder_layer_ops("mamba")[0] == block_ops()[0] / 2
        True
    """
    if kind in ("embedding", "head"):
        fwd_ops, bwd_ops = embedding_ops("gpt") if kind == "embedding" else head_ops("gpt", fusion)
        return float(fwd_ops), float(bwd_ops), 0.0, 0.0
    share = 1.0 if kind in WHOLE_BLOCK_KINDS else 0.5 if kind in HALF_BLOCK_KINDS else 0.0
    (fwd, bwd), (modules, functions) = block_ops(), block_calls()
    return fwd * share, bwd * share, modules * share, functions * share
