"""Which gradients Megatron-Core's ``finalize_model_grads`` all-reduces over the tensor-parallel
group after the data-parallel reduction: the parameters every tensor rank keeps whole whose
gradients still differ between the ranks (each rank saw its own share of the tokens or heads).

NVIDIA/Megatron-LM@d98e8a64 ``megatron/core/distributed/finalize_model_grads.py``:
``finalize_model_grads`` (l.560-713) runs ``finish_grad_sync`` of every model chunk (the
data-parallel reduction, l.639-640), then ``_allreduce_non_tensor_model_parallel_grads``
(l.661; its alias ``_allreduce_layernorm_grads``, l.491), then the embedding all-reduces
(l.676-677). That function (l.416-484) returns at once when the tensor group has one rank
(l.427-428); else it collects, over every chunk of the rank, the ``main_grad`` of each
parameter with ``average_gradients_across_tp_domain`` (an average; set by none of the layers
pipesim models) or, for the sum, with ``config.sequence_parallel and param.sequence_parallel``
or ``config.qk_layernorm`` and a name containing ``q_layernorm`` / ``k_layernorm``
(l.452-453); the sum's gradients are flattened into one buffer (``_flatten_dense_tensors``,
l.473) and all-reduced once over the tensor group (l.474), then copied back. Under Megatron
FSDP it takes each gradient's local shard (``grad._local_tensor``, l.460-461); with the
distributed optimizer the whole ``main_grad`` view of the gradient buffer (l.462-464).

Which parameters carry ``sequence_parallel`` (with ``t > 1`` and ``--sequence-parallel``): the
norms, Transformer Engine's ``LayerNormLinear`` / ``LayerNormMLP`` norm weights and biases and
its row-parallel biases (NVIDIA/TransformerEngine@d0067d0d
``transformer_engine/pytorch/module/layernorm_linear.py`` l.1653-1670, ``linear.py``
l.1866-1868), ``TENorm``'s ``RMSNorm`` / ``LayerNorm`` weights (``module/rmsnorm.py``
l.141-142, ``module/layernorm.py`` l.138-139); Megatron's duplicated ``TELinear`` (MLA's down
projections, ``megatron/core/extensions/transformer_engine.py`` l.1313-1316), the router's weight and bias
(``megatron/core/transformer/moe/router.py`` l.85-88): exactly the whole parameters of
:mod:`sim.parallel.decoder_whole`. Without Transformer Engine (``--transformer-impl local``)
``FusedLayerNorm`` and ``RowParallelLinear``'s bias carry it too
(``megatron/core/fusions/fused_layer_norm.py`` l.119-120, ``tensor_parallel/layers.py``
l.1499). GPT and BERT traces (:mod:`sim.parallel.replicated`): a block's two LayerNorms and two
row-parallel biases (``6h``), the head's final LayerNorm (``2h``) and BERT's masked-LM head
transform, ``dense`` and its LayerNorm (``h^2 + 3h``, ``megatron/core/models/bert/
bert_lm_head.py`` l.31-40); not BERT's pooler, which gathers the sequence first
(``models/bert/pooler.py`` l.44-50), nor its binary head, nor the position embedding (a plain
``Embedding`` before the scatter to the sequence-parallel region). Without sequence
parallelism only the QK-norms of standard attention remain (``q_layernorm`` / ``k_layernorm``
over ``head_dim``, on each rank's own heads); MLA's latent norms are Transformer Engine's
``LayerNormLinear`` norm of ``linear_q_up_proj`` / ``linear_kv_up_proj``
(``megatron/core/models/gpt/gpt_layer_specs.py`` l.245-254), named neither, and their input
gradient is all-reduced before the norm's backward without sequence parallelism.

The collective: one all-reduce per rank and optimizer step of the sum of those parameters over
the rank's chunks, in the ``main_grad`` dtype (fp32 with ``grad_reduce_in_fp32``), over the
stage's tensor group (:meth:`sim.engine.step.RankStep.run`). The word-embedding all-reduce
between the first and the last (or the MTP) stage that follows (``_allreduce_embedding_grad``,
l.243-258) reduces the same ``main_grad`` (``_get_main_grad_attr``, l.34-37), so it is priced
in the same dtype (:func:`main_grad_bytes`). Not modelled: a shared expert's
``gate_weight`` (``moe/shared_experts.py`` l.143, ``h`` per layer with
``moe_shared_expert_gate``); QK-norms of GPT traces (their shape does not record them); T5.
"""

from __future__ import annotations

from sim.compute.decoder import ATTN, DecoderShape, mtp_inner
from sim.compute.decoder_shape import base_kind, kind_of
from sim.parallel.decoder_shard import DecoderShard
from sim.parallel.decoder_whole import whole_params
from sim.parallel.shard import ShardedTrace, model_shape
from sim.trace.decoder import decoder_shape
from sim.trace.schema import dtype_bytes, layer_kind


def main_grad_bytes(dtype: str, fp32_main_grads: bool) -> float:
    """Bytes per element of the gradients ``finalize_model_grads`` all-reduces (the tensor
    group's, module doc, and the word embedding's between pipeline stages): the ``main_grad``
    of the gradient buffer, fp32 when ``fp32_main_grads`` (``grad_reduce_in_fp32``; Megatron's
    ``validate_args`` sets it with ``--bf16``), else the parameters' ``dtype``
    (NVIDIA/Megatron-LM@d98e8a64 ``megatron/core/distributed/param_and_grad_buffer.py`` l.924:
    ``grad_dtype = torch.float if grad_reduce_in_fp32 else param.dtype``).

    Example:
        >>> main_grad_bytes("bf16", True), main_grad_bytes("bf16", False), main_grad_bytes("fp16", False)
        (4.0, 2.0, 2.0)
    """
    return 4.0 if fp32_main_grads else float(dtype_bytes(dtype))


def qk_norm_params(kind: str, m: DecoderShape) -> int:
    """QK-norm parameters (``q_layernorm`` and ``k_layernorm``, ``head_dim`` each) of a
    ``kind`` layer of ``m``: ``2 hd`` for a standard attention with ``qk_norm``, an MTP depth's
    inner block's; 0 for MLA (its latent norms are named otherwise: module doc) and others.

    Example (head_dim 4: a block's two QK-norms; no attention in an MLP layer):
        >>> m = DecoderShape(1, 8, 2, 4, vocab=32, ffn_hidden=16, head_dim=4, qk_norm=True)
        >>> qk_norm_params("block", m), qk_norm_params("mlp", m)
        (8, 0)
    """
    base = base_kind(kind)
    if base == "mtp":
        return qk_norm_params(mtp_inner(m), m)
    if base not in ATTN or m.mla is not None or not m.block.qk_norm:
        return 0
    return 2 * m.block.hd


def tp_summed_params(kind: str, m: DecoderShape, sequence_parallel: bool) -> int:
    """Parameters of a ``kind`` layer of ``m`` whose gradients ``finalize_model_grads`` sums
    over the tensor group (module doc): every whole parameter
    (:func:`~sim.parallel.decoder_whole.whole_params`) with sequence parallelism, else the
    QK-norms (:func:`qk_norm_params`). The caller applies the ``t > 1`` condition.

    Example (h = 8, head_dim 4, QK-norm: a block's two norms ``2h`` and QK-norms ``2 hd``
    with sequence parallelism, the QK-norms alone without):
        >>> m = DecoderShape(1, 8, 2, 4, vocab=32, ffn_hidden=16, head_dim=4, qk_norm=True)
        >>> tp_summed_params("block", m, True), tp_summed_params("block", m, False)
        (24, 8)
    """
    return whole_params(kind, m) if sequence_parallel else qk_norm_params(kind, m)


def gpt_tp_summed_params(kind: str, model: str, hidden: int, sequence_parallel: bool) -> int:
    """The same for a ``kind`` layer (``embedding``, ``block``, ``head``) of a GPT or BERT
    trace (``model``) of hidden size ``hidden`` (module doc); 0 without sequence parallelism.

    Example (h = 4: a block's ``6h``; a GPT head's final LayerNorm ``2h``; a BERT head's with
    its masked-LM transform, ``h^2 + 5h``):
        >>> [gpt_tp_summed_params(k, "gpt", 4, True) for k in ("embedding", "block", "head")]
        [0, 24, 8]
        >>> gpt_tp_summed_params("head", "bert", 4, True), gpt_tp_summed_params("block", "gpt", 4, False)
        (36, 0)
    """
    h = hidden
    if not sequence_parallel:
        return 0
    if kind == "block":
        return 6 * h
    if kind == "head":
        return 2 * h + (h * h + 3 * h if model == "bert" else 0)
    return 0


def layer_tp_summed_params(sharded: ShardedTrace | DecoderShard) -> tuple[float, ...]:
    """Per layer of ``sharded``'s trace (one tensor rank's), the parameters whose gradients
    the finalize sums over the tensor group: :func:`tp_summed_params` for a decoder,
    :func:`gpt_tp_summed_params` for a GPT or BERT trace, 0 for any other (T5, no shape) and
    for every layer with one tensor rank (``finalize_model_grads.py`` l.427-428)."""
    layers = sharded.trace.layers
    if sharded.tensor_parallel < 2:
        return (0.0,) * len(layers)
    if isinstance(sharded, DecoderShard):
        m, sp = decoder_shape(sharded.trace), sharded.layout.sp
        kinds = sharded.trace.provenance.get("layer_kinds") or [kind_of(x.name) for x in layers]
        return tuple(float(tp_summed_params(k, m, sp)) for k in kinds)
    shape = model_shape(sharded.trace)
    if shape is None or shape["kind"] not in ("gpt", "bert"):
        return (0.0,) * len(layers)
    h, sp = int(shape["hidden"]), sharded.sequence_parallel
    return tuple(
        float(gpt_tp_summed_params(layer_kind(x.name), shape["kind"], h, sp)) for x in layers
    )
