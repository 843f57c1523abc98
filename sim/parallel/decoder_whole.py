"""Which dense parameters of a decoder layer (:mod:`sim.trace.decoder`) every tensor rank keeps
whole: their weights, gradients and optimizer state are in each rank's memory and their
gradients in each rank's data-parallel reduction, as :mod:`sim.parallel.replicated` says for
Megatron's GPT and BERT layers.

Megatron-Core (NVIDIA/Megatron-LM@d98e8a64) with Transformer Engine:

* **norms**: ``input_layernorm`` and ``pre_mlp_layernorm`` (``h`` each) are TE's
  ``LayerNormLinear`` norm inside ``TELayerNormColumnParallelLinear`` or a ``TENorm``: TE
  allocates ``layer_norm_weight`` over the layer's ``in_features``, which a column-parallel
  layer does not divide (NVIDIA/TransformerEngine@d0067d0d
  ``transformer_engine/pytorch/module/layernorm_linear.py`` l.1375-1378, 1449-1450). So are
  Qwen3's QK-norms (``q_layernorm``/``k_layernorm`` over ``head_dim``, ``2 hd``), MLA's latent
  norms (``q_lora + kv_lora``), an MTP depth's ``enorm``, ``hnorm`` and its final norm
  (``3h``), a Mamba layer's pre-norm (``h``; the mixer's gated norm, conv, ``A_log``,
  ``dt_bias`` and ``D`` are per local head, split) and the final norm of the head (``h``).
* **router**: ``TopKRouter.weight`` is ``torch.empty((num_moe_experts, hidden_size))`` on every
  rank, its bias ``E`` too (``megatron/core/transformer/moe/router.py`` l.64-69).
* **MLA down projections**: with TE, ``linear_q_down_proj`` (``h x q_lora``) and
  ``linear_kv_down_proj`` (``h x (kv_lora + d_rope)``) are ``TELinear`` with
  ``parallel_mode='duplicated'`` (``megatron/core/transformer/multi_latent_attention.py``
  l.525-528, 574-576; ``backend.linear()`` in ``get_gpt_layer_with_transformer_engine_submodules``,
  ``megatron/core/models/gpt/gpt_layer_specs.py`` l.302-304).
* **row-parallel biases**: the attention output projection's bias (``h``, GPT-OSS
  ``attention_bias``) is whole, as :mod:`sim.parallel.replicated` cites for ``RowParallelLinear``.

torchtitan (pytorch/torchtitan@b5bcd76c ``torchtitan/models/common/decoder_sharding.py``
l.141-146, 159-174): every norm weight is ``Replicate`` (with sequence parallelism) or
unsharded on the TP mesh, so the same rule holds for its rows.

Everything else dense (QKV/O, MLP, shared experts, Nemotron's latent projections, the word
embedding and output layer) is split over ``t``. Assumption: LoRA adapters split as their
base linear layers (counted in the split part); a routed expert's row bias under expert tensor
parallelism is not counted here (experts are :func:`~sim.parallel.layout.ParallelLayout.shards`
``expert_params``).
"""

from __future__ import annotations

from sim.compute.decoder import ATTN, DecoderShape, mtp_inner
from sim.compute.decoder_shape import base_kind


def _attn_whole(m: DecoderShape) -> int:
    """Whole parameters of the attention half, its input norm included."""
    h = m.hidden
    if m.mla is not None:
        q = m.mla.q_lora * (h + 1) if m.mla.q_lora else 0
        return h + q + m.mla.kv_lora + h * (m.mla.kv_lora + m.mla.d_rope)
    blk = m.block
    return h + (2 * blk.hd if blk.qk_norm else 0) + (h if blk.bias else 0)


def whole_params(kind: str, m: DecoderShape) -> int:
    """Dense parameters of a ``kind`` layer of ``m`` that every tensor rank holds whole
    (module doc); the rest of :func:`~sim.compute.decoder.layer_params`'s dense count is split
    over ``t`` (a rank's share: :func:`~sim.parallel.replicated.rank_param_bytes` of the split
    part, ``dense - whole``). Kinds without any (``embedding``, an unknown kind): 0.

    Example (h = 8, head_dim 4 with QK-norm: a dense block keeps its two norms, ``2h``, and the
    QK-norms, ``2 hd``; the head its final norm):
        >>> m = DecoderShape(1, 8, 2, 4, vocab=32, ffn_hidden=16, head_dim=4, qk_norm=True)
        >>> whole_params("block", m), whole_params("head", m), whole_params("embedding", m)
        (24, 8, 0)
    """
    h, base = m.hidden, base_kind(kind)
    if base == "head":
        return h
    if base == "mamba":
        return h
    if base == "mtp":
        return 3 * h + whole_params(mtp_inner(m), m)
    out = _attn_whole(m) if base in ATTN else 0
    if base in ("block", "mlp", "moe_block", "moe"):
        out += h  # pre-MLP norm
    if base in ("moe_block", "moe") and m.moe is not None:
        out += m.moe.router_params()
    return out
