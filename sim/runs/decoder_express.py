"""The decoder generator's shape of a measured run: :func:`decoder_shape` (with its LoRA
adapters) and :func:`ep_domains`, the NVLink domains a HybridEP group spans; used by
:func:`sim.runs.express.express` for gated, MoE and hybrid decoders."""

from __future__ import annotations

from sim.compute.decoder import DecoderShape
from sim.compute.lora import DEFAULT_TARGETS, LoRAShape
from sim.compute.mla import MLAShape
from sim.compute.moe_shape import MoEShape
from sim.runs.approximations import hybrid_fields
from sim.runs.record import MeasuredRun, ModelShape, feature
from sim.runs.slurm_segments import RACK_GPUS, on_racks, rank_gpu

SERVER_GPUS = 8
"""GPUs of a server preset (DGX/HGX), one NVLink domain."""
_feature = feature


def decoder_shape(
    s: ModelShape, seq_len: int, attention: str, hybridep_domains: int = 1
) -> DecoderShape:
    """The :class:`DecoderShape` of a decoder (or MoE GPT) model: tied embeddings (Megatron
    ties them unless ``--untie-embeddings-and-output-weights``), the dense MLPs' gating
    (``--swiglu``), ``head_dim`` (``--kv-channels``), QK-norm (``--qk-layernorm``) and MTP depths
    (``--mtp-num-layers``; ``--mtp-use-repeated-layer``: one layer's weights) as the decoder
    generator's fields (:mod:`sim.compute.decoder_shape`);
    ``hybridep_domains``: the NVLink domains a HybridEP group spans (:func:`ep_domains`).
    A MoE GPT keeps the generator's rotary positions and RMSNorm (its learned position table,
    ``s*h`` parameters, and LayerNorm biases are left out)."""
    moe = None
    if s.moe_experts:
        moe = MoEShape(
            s.hidden or 0, s.moe_experts, s.moe_topk or 2, s.moe_ffn_hidden or s.ffn_hidden or 0,
            shared_ffn=s.moe_shared_ffn, gated=s.gated_mlp,
            capacity_factor=s.moe_capacity_factor, pad_to_capacity=s.moe_pad_to_capacity,
            latent=int(_feature(s, "moe_latent") or 0),
            sequential_experts=_feature(s, "moe_experts") == "sequential",
            fused_grouped_mlp=_feature(s, "moe_experts") == "fused",
            fused_weighting=_feature(s, "moe_weighting") != "unfused",
            sort_by_expert=_feature(s, "moe_dispatcher") == "alltoall",
            bias=bool(_feature(s, "moe_bias")),
            clamp=bool(_feature(s, "moe_clamp")),
            hybridep=_feature(s, "moe_dispatcher") == "hybridep",
            hybridep_domains=hybridep_domains if _feature(s, "moe_dispatcher") == "hybridep" else 1,
            router_fused=_feature(s, "moe_router") != "unfused",
            dglu_regressed=_feature(s, "moe_dglu") == "regressed",
            aux_loss=bool(_feature(s, "moe_aux_loss")),
            random_logits=bool(_feature(s, "moe_random_logits")),
            paged_stash=_feature(s, "moe_stash") == "paged",
            router_expert_bias=bool(_feature(s, "moe_expert_bias")),
            router_score=_feature(s, "moe_score") or "softmax",
            router_fp32=_feature(s, "moe_router_dtype") == "fp32",
            router_scaled=bool(_feature(s, "moe_topk_scaled")),
            router_groups=_feature(s, "moe_groups") or "",
            router_deterministic=bool(_feature(s, "moe_deterministic")),
        )  # fmt: skip
    mla = None
    if s.mla:
        m = dict(s.mla)
        mla = MLAShape(m["q_lora_rank"], m["kv_lora_rank"], m["qk_head_dim"],
                       m["qk_pos_emb_head_dim"], m["v_head_dim"])  # fmt: skip
    hybrid = hybrid_fields(s)
    return DecoderShape(
        **hybrid, layers=s.layers or 0, hidden=s.hidden or 0, heads=s.heads or 0, seq_len=seq_len,
        vocab=s.vocab or 0, ffn_hidden=s.ffn_hidden or 4 * (s.hidden or 0),
        kv_heads=s.kv_heads, attention=attention, mla=mla, moe=moe,
        dense_layers=s.moe_dense_layers, moe_every=s.moe_every, head_dim=s.head_dim,
        gated_mlp=s.gated_mlp, rotary=_feature(s, "position") in (None, "rope", "yarn"),
        rope_unfused=_feature(s, "rope") == "unfused",
        rope_complex=_feature(s, "rope") == "complex", norm_fp32=_feature(s, "norm_ops") == "fp32",
        kv_repeat=bool(_feature(s, "kv_repeat")),
        window=int(_feature(s, "window") or 0), window_pattern=_feature(s, "window_pattern") or "",
        sinks=bool(_feature(s, "sinks")), attn_bias=bool(_feature(s, "attn_bias")),
        qk_norm=bool(_feature(s, "qk_norm")), mtp_layers=int(_feature(s, "mtp") or 0),
        mtp_shared=bool(_feature(s, "mtp_shared")),
        tied_embeddings=bool(s.tied_embeddings), lora=_lora(s),
        dropout=bool(_feature(s, "dropout")),
        cross_entropy_fusion=_feature(s, "cross_entropy") or "unfused",
    )  # fmt: skip


def _lora(s: ModelShape) -> LoRAShape | None:
    """The ``lora=RANK:target+target`` feature (:mod:`sim.compute.lora`), or None."""
    text = _feature(s, "lora")
    if not text:
        return None
    rank, _, targets = text.partition(":")
    return LoRAShape(int(rank), tuple(targets.split("+")) if targets else DEFAULT_TARGETS)


def ep_domains(run: MeasuredRun, hardware: str) -> int:
    """NVLink domains (a server of 8, an NVL72 rack) the first flex dispatcher group's GPUs
    span: the group is the ``etp x ep`` one (``MoEFlexTokenDispatcher``'s ``tp_ep_group``,
    NVIDIA/Megatron-LM@d98e8a64 ``token_dispatcher.py`` lines 1838-1856), Megatron-Core's
    expert ranks run ``etp`` innermost, then ``ep`` (order ``tp-ep-dp-pp``), so it is the first
    ``ep * etp`` ranks (every ``etp``-th: the same GPUs' domains), on the racks' GPUs as
    :func:`~sim.runs.slurm_segments.rank_gpu` places them, in order on servers."""
    lay = run.layout
    etp = lay.expert_tp
    rack = on_racks(hardware)
    gpus = run.num_gpus or lay.gpus
    where = [rank_gpu(k, gpus) if rack else k for k in range(0, lay.ep * etp, etp)]
    return len({g // (RACK_GPUS if rack else SERVER_GPUS) for g in where})
