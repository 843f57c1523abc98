"""The model's shape from Megatron-LM's arguments, for :func:`sim.runs.megatron_args.read_megatron`:
layers, widths, heads, the padded vocabulary, MoE sizes, MLA ranks and the shape's features
(position embedding, norm, QK-norm, MTP, grouped or sequential experts, GPT-OSS's windows, sinks
and biases). Defaults and derived sizes follow ``megatron/training/arguments.py::validate_args``
and ``megatron/core/transformer/transformer_config.py`` at NVIDIA/Megatron-LM@d98e8a64dd (see
:mod:`sim.runs.megatron_args`' module doc for the rules).
"""

from __future__ import annotations

import math
import re

from sim.compute.precision_rules import te_version
from sim.compute.rope_unfused import yarn_concentration
from sim.compute.router_unfused import GROUPS
from sim.parallel.layout import ParallelLayout
from sim.runs.argv import switch_on
from sim.runs.bridge_software import TE_FLAG, dglu_feature
from sim.runs.megatron_model_flags import hybrid_features, hybrid_pattern
from sim.runs.megatron_reading import Reading
from sim.runs.record import ArgNote, ModelShape

VOCAB_DIVISIBLE_BY = 128
"""``--make-vocab-size-divisible-by`` default (megatron/training/arguments.py)."""
TOKENIZER_VOCAB = {
    "GPT2BPETokenizer": 50257,
    "BertWordPieceLowerCase": 30522,
    "BertWordPieceCase": 28996,
    "Llama2Tokenizer": 32000,
}
"""Vocabulary sizes of the tokenizers whose files are public and fixed: GPT-2's BPE (OpenAI
``encoder.json``: 50,257 tokens), BERT's WordPiece (``bert-large-uncased`` 30,522,
``bert-large-cased`` 28,996 tokens) and Llama 2's SentencePiece model (32,000)."""
DEFAULT_TOKENIZER = "GPT2BPETokenizer"
"""The tokenizer assumed for ``--vocab-file`` with ``--merge-file`` and no type (a BPE vocab
and merges: GPT-2's, as Megatron's GPT examples use)."""


def _ffn(r: Reading, h: int, gated: bool) -> int:
    ffn = r.int("ffn-hidden-size")
    if ffn:
        r.mapped("ffn-hidden-size", "model.ffn_hidden")
        return ffn
    return int(4 * h * 2 / 3 / 64) * 64 if gated else 4 * h


def _arch(r: Reading, arch: str | None) -> str:
    if (
        r.has("hybrid-layer-pattern")
        or r.switch("is-hybrid-model")
        or "hybrid" in str(r.text("spec", ""))
    ):
        return "hybrid"
    if arch in ("bert", "t5", "hybrid"):
        return arch
    if r.has("encoder-num-layers") and r.has("decoder-num-layers"):
        return "t5"
    return "decoder" if r.switch("swiglu") else "gpt"


def model_shape(
    r: Reading, lay: ParallelLayout, arch: str | None, grouped: bool = False
) -> tuple[ModelShape, int | None]:
    """The model shape a Megatron-LM command line ``r`` describes (GPT, decoder with its MoE,
    MLA or hybrid layers, or T5: ``arch``, else read from the flags; the vocabulary padded for
    ``lay``'s tensor parallelism) and its sequence length (``--seq-length`` or
    ``--encoder-seq-length``; None when neither is given); ``grouped``: its experts run as
    grouped GEMMs (a shape feature). Each flag read is noted on ``r``."""
    kind = _arch(r, arch)
    h = r.int("hidden-size") or 0
    heads = r.int("num-attention-heads") or 0
    layers = r.int("num-layers") or r.int("decoder-num-layers") or r.int("encoder-num-layers")
    pattern = hybrid_pattern(r)
    if pattern is not None:  # Megatron derives --num-layers from the pattern (module doc)
        layers = len(pattern.layers)
    seq = r.int("seq-length") or r.int("encoder-seq-length")
    r.int("decoder-seq-length")
    gated = r.switch("swiglu")
    kv = r.int("num-query-groups") if r.switch("group-query-attention") else None
    kv_ch = r.int("kv-channels")
    mla = r.switch("multi-latent-attention")
    head_dim = kv_ch if kv_ch and heads and kv_ch * heads != h and not mla else None
    features = shape_features(r, grouped) + hybrid_features(r, pattern, h)
    experts = r.int("num-experts")
    ffn = _ffn(r, h, gated) if h else None
    shape = ModelShape(
        arch=kind, layers=layers, hidden=h or None, heads=heads or None,
        kv_heads=kv if kv and kv != heads else None, ffn_hidden=ffn, vocab=_vocab(r, lay.tp),
        head_dim=head_dim, gated_mlp=gated,
        tied_embeddings=not r.switch("untie-embeddings-and-output-weights"),
        moe_experts=experts, moe_topk=r.int("moe-router-topk", 2) if experts else None,
        moe_ffn_hidden=(r.int("moe-ffn-hidden-size") or ffn) if experts else None,
        moe_shared_ffn=r.int("moe-shared-expert-intermediate-size", 0) or 0,
        moe_dense_layers=_dense_layers(r, layers), mla=_mla(r), features=features,
        moe_capacity_factor=_float(r, "moe-expert-capacity-factor") if experts else None,
        moe_pad_to_capacity=r.switch("moe-pad-expert-input-to-capacity"),
        source="Megatron-LM arguments",
    )  # fmt: skip
    _note_shape(r)
    return shape, seq


def _note_shape(r: Reading) -> None:
    for f in (
        "num-layers", "encoder-num-layers", "decoder-num-layers", "hidden-size",
        "num-attention-heads", "seq-length", "encoder-seq-length", "decoder-seq-length",
        "swiglu", "group-query-attention", "num-query-groups", "kv-channels", "num-experts",
        "moe-router-topk", "moe-ffn-hidden-size", "moe-shared-expert-intermediate-size",
        "moe-layer-freq", "first-k-dense-replace", "untie-embeddings-and-output-weights",
        "multi-latent-attention", "q-lora-rank", "kv-lora-rank", "qk-head-dim",
        "qk-pos-emb-head-dim", "v-head-dim", "vocab-size", "padded-vocab-size",
        "tokenizer-type", "make-vocab-size-divisible-by", "vocab-file", "merge-file",
        "tokenizer-model", "position-embedding-type", "use-rotary-position-embeddings",
        "normalization", "squared-relu", "spec", "is-hybrid-model", "hybrid-layer-pattern",
        "qk-layernorm", "mtp-num-layers", "mtp-use-repeated-layer", "moe-expert-capacity-factor",
        "moe-pad-expert-input-to-capacity", "window-size", "window-attn-skip-freq",
        "softmax-type", "add-qkv-bias", "activation-func-clamp-value",
        "yarn-rotary-scaling-factor", "yarn-mscale", "yarn-mscale-all-dim",
    ):  # fmt: skip
        if r.has(f) and not any(n.name == f for n in r.notes):
            r.mapped(f, "model shape")


def _float(r: Reading, flag: str) -> float | None:
    value = r.text(flag)
    try:
        return float(value) if value is not None else None
    except ValueError:
        r.unmapped(flag, f"{value!r} is not a number")
        return None


def shape_features(r: Reading, grouped: bool = False) -> tuple[str, ...]:
    """The shape's features; ``grouped``: the experts run as grouped GEMMs unless the flags say
    otherwise (Megatron-Bridge's MoE providers set ``moe_grouped_gemm: bool = True``, e.g.
    its Qwen3-MoE and GPT-OSS providers; Megatron-LM's ``--moe-grouped-gemm`` is off by
    default: ``SequentialMLP``).

    Raises:
        ValueError: the row's Transformer Engine version
            (:data:`~sim.runs.bridge_software.TE_FLAG`) is not ``major.minor[...]``, where the
            fused grouped MLP depends on it."""
    out = []
    pos = r.text("position-embedding-type", "learned_absolute")
    if r.switch("use-rotary-position-embeddings"):
        pos = "rope"
    out.append(f"position={pos}")
    if pos == "yarn" and _yarn_scaled(r):  # Megatron's RoPE unfused (sim.compute.rope_unfused)
        out.append("rope=unfused")
    out.append(f"norm={r.text('normalization', 'LayerNorm')}")
    if r.switch("squared-relu"):
        out.append("activation=squared_relu")
    if r.switch("qk-layernorm"):
        out.append("qk_norm=true")
    if r.int("mtp-num-layers"):
        out.append(f"mtp={r.int('mtp-num-layers')}")
    if r.switch("mtp-use-repeated-layer"):  # one MTP layer for every depth (DecoderShape)
        out.append("mtp_shared=true")
    if r.int("moe-latent-size"):  # latent MoE (sim.compute.moe, "Latent MoE")
        out.append(f"moe_latent={r.int('moe-latent-size')}")
    flag = r.flags.get("moe-grouped-gemm")
    grouped = grouped if flag is None else switch_on(flag)
    if r.flags.get("num-experts") and not grouped:  # SequentialMLP's loop (sim.compute.mcore_ops)
        out.append("moe_experts=sequential")
    elif r.flags.get("num-experts") and _fused_grouped_mlp(r):
        out.append("moe_experts=fused")
    if "moe_experts=fused" in out and r.switch("moe-paged-stash"):
        out.append("moe_stash=paged")  # its copies (sim.compute.paged_stash)
    if r.flags.get("num-experts") and r.switch("add-bias-linear"):  # biased experts (GPT-OSS)
        out.append("moe_bias=true")
    # the container's cuDNN frontend, read for every model (sim.runs.bridge_software)
    out += dglu_feature(r, "moe_experts=fused" in out, "moe_bias=true" in out)
    if r.flags.get("num-experts") and _float(r, "activation-func-clamp-value"):  # GPT-OSS
        out.append("moe_clamp=true")  # a clamped GLU (sim.compute.glu_clamp)
    out += _router_features(r)
    out += _attention_features(r)
    return tuple(out)


AUX_LOSSES = ("aux_loss", "seq_aux_loss")
"""Balancing losses whose kernels :mod:`sim.compute.router_fused` counts (Megatron-Core's
default ``--moe-router-load-balancing-type`` is ``aux_loss``; the loss runs when
``--moe-aux-loss-coeff`` is above 0, its default 0: NVIDIA/Megatron-LM@d98e8a64
``megatron/core/transformer/moe/router.py`` lines 388-408)."""


def _router_features(r: Reading) -> list[str]:
    """The router's balancing loss and forced random logits (:mod:`sim.compute.router_fused`),
    its score function and dtype (``--moe-router-score-function sigmoid``, ``--moe-router-dtype
    fp32``: :mod:`sim.compute.router_unfused`) and its expert bias, updated at the step
    (``--moe-router-enable-expert-bias``, :mod:`sim.parallel.router_bias`)."""
    if not r.flags.get("num-experts"):
        return []
    out = []
    kind = r.text("moe-router-load-balancing-type", "aux_loss")
    if kind in AUX_LOSSES and (_float(r, "moe-aux-loss-coeff") or 0.0) > 0:
        out.append("moe_aux_loss=true")
    if r.switch("moe-router-force-load-balancing"):
        out.append("moe_random_logits=true")
    for flag in ("moe-router-load-balancing-type", "moe-aux-loss-coeff",
                 "moe-router-force-load-balancing"):  # fmt: skip
        if r.has(flag):
            r.mapped(
                flag, "the router's balancing loss and random logits (sim.compute.router_fused)"
            )
    if r.text("moe-router-score-function", "softmax") == "sigmoid":
        out.append("moe_score=sigmoid")
    if r.text("moe-router-dtype", "") == "fp32":
        out.append("moe_router_dtype=fp32")
    out += _router_options(r)
    for flag in ("moe-router-score-function", "moe-router-dtype"):
        r.mapped(flag, "the unfused router's ops (sim.compute.router_unfused)")
    if r.switch("moe-router-enable-expert-bias"):  # aux-loss-free balancing
        out.append("moe_expert_bias=true")
        r.mapped("moe-router-enable-expert-bias", "the step's router expert-bias update "
                 "(sim.parallel.router_bias)")  # fmt: skip
    return out


def _router_options(r: Reading) -> list[str]:
    """The unfused router's counted options (:data:`sim.compute.router_unfused.FLAG_COUNTED`):
    a top-k scaling factor (its multiply runs when the factor is truthy: ``if scaling_factor``,
    NVIDIA/Megatron-LM@d98e8a64 ``moe_utils.py`` line 933), group-limited top-k (run when
    ``--moe-router-group-topk`` is set, line 868; a pair not counted keeps the plain top-k and
    says so) and ``--deterministic-mode`` (``torch.use_deterministic_algorithms``, read at line
    941; the flag's other effects are read elsewhere, :mod:`sim.runs.megatron_host_flags`)."""
    out = []
    if _float(r, "moe-router-topk-scaling-factor"):
        out.append("moe_topk_scaled=true")
    groups, top = r.text("moe-router-num-groups"), r.text("moe-router-group-topk")
    pair = f"{groups}/{top}" if groups and top else ""
    why = "the unfused router's ops (sim.compute.router_unfused)"
    if pair and pair not in GROUPS:
        why = f"group-limited top-k {pair} not counted (counted: {', '.join(GROUPS)}): plain top-k"
    elif pair:
        out.append(f"moe_groups={pair}")
    for flag in (
        "moe-router-topk-scaling-factor",
        "moe-router-num-groups",
        "moe-router-group-topk",
    ):
        r.mapped(flag, why if "group" in flag else "the unfused router's ops (router_unfused)")
    if switch_on(r.flags.get("deterministic-mode")):
        out.append("moe_deterministic=true")
    return out


def _yarn_scaled(r: Reading) -> bool:
    """YaRN whose concentration factor is not 1: a scaling factor above 1 without
    ``yarn_mscale`` and ``yarn_mscale_all_dim`` (:func:`sim.compute.rope_unfused.
    yarn_concentration`; Megatron-Bridge's GPT-OSS bridge, 32 and None)."""
    factor = _float(r, "yarn-rotary-scaling-factor") or 1.0
    overridden = r.has("yarn-mscale") and r.has("yarn-mscale-all-dim")
    return yarn_concentration(factor) != 1.0 and not overridden


NVFP4_FUSED_TE = (2, 17)
"""The first Transformer Engine release whose op fuser builds the fused grouped MLP under NVFP4:
up to v2.16 ``fuse_grouped_mlp_ops`` returns the ops unfused unless ``recipe.mxfp8()``
(NVIDIA/TransformerEngine v2.16 = 4220403e ``transformer_engine/pytorch/ops/_common.py``
244-245; v2.14 line 132); v2.17.1 = 4329ff84 ``ops/fused/grouped_mlp.py`` 707 takes
``recipe.mxfp8() or recipe.nvfp4()``."""


def _fused_grouped_mlp(r: Reading) -> bool:
    """The experts run as Transformer Engine's fused grouped MLP (:mod:`sim.compute.moe`,
    "Fused grouped MLP"): ``--use-transformer-engine-op-fuser`` with a block-scaled recipe
    the op fuser fuses, the formats its CuTe-DSL kernels take (``GroupedMLP_CuTeGEMM``): MXFP8,
    and NVFP4 from TE 2.17 (:data:`NVFP4_FUSED_TE`; where the row names no TE version, as a
    user's own run, the version every other TE-dependent rule takes,
    :data:`sim.compute.precision_rules.TE_VERSION`, an assumption).

    Raises:
        ValueError: a TE version that is not ``major.minor[...]``
            (:func:`~sim.compute.precision_rules.te_version`)."""
    if not r.switch("use-transformer-engine-op-fuser"):
        return False
    if r.text("fp8-recipe") == "mxfp8":
        return True
    nvfp4 = r.text("fp4-recipe") == "nvfp4"
    return nvfp4 and te_version(r.text(TE_FLAG)) >= NVFP4_FUSED_TE


def _attention_features(r: Reading) -> list[str]:
    """Sliding windows, sinks and attention biases (GPT-OSS; Megatron-Core's
    ``TransformerConfig``: ``window_size`` as ``(left, right)``, ``window_attn_skip_freq`` N:
    one full-attention layer after N - 1 windowed ones, ``softmax_type`` ``learnable``: a
    learned sink logit per head; ``--add-qkv-bias``)."""
    out = []
    window = (r.text("window-size") or "").replace(",", " ").strip("()[] ").split()
    if window and window[0].isdigit() and int(window[0]) > 0:
        out.append(f"window={int(window[0])}")
        skip = r.int("window-attn-skip-freq") or 0
        out.append("window_pattern=" + ("S" * (skip - 1) + "F" if skip > 1 else "S"))
    if r.text("softmax-type") == "learnable":
        out.append("sinks=true")
    if r.switch("add-qkv-bias"):
        out.append("attn_bias=true")
    return out


def _dense_layers(r: Reading, layers: int | None) -> int:
    """Leading dense layers: ``--moe-layer-freq`` as ``([0]*3+[1]*58)`` or an int."""
    k = r.int("first-k-dense-replace")
    if k is not None:
        return k
    freq = r.text("moe-layer-freq")
    if freq is None:
        return 0
    m = re.fullmatch(r"\(?\[0\]\s*\*\s*(\d+)\s*\+\s*\[1\]\s*\*\s*(\d+)\)?", freq.strip())
    if m:
        return int(m.group(1))
    if freq.strip() != "1":
        r.unmapped("moe-layer-freq", f"{freq!r}: only every layer or leading dense layers")
    return 0


def _mla(r: Reading) -> tuple[tuple[str, int], ...] | None:
    if not r.switch("multi-latent-attention"):
        return None
    keys = ("q-lora-rank", "kv-lora-rank", "qk-head-dim", "qk-pos-emb-head-dim", "v-head-dim")
    defaults = (None, 512, 128, 64, 128)  # MLATransformerConfig's defaults
    return tuple(
        (k.replace("-", "_"), r.int(k, d) or 0) for k, d in zip(keys, defaults, strict=True)
    )


def _vocab(r: Reading, tp: int) -> int | None:
    """The padded vocabulary (module doc), or None with an unmapped note."""
    padded = r.int("padded-vocab-size")
    if padded:
        return padded
    size = r.int("vocab-size")
    kind = r.text("tokenizer-type")
    if size is None and kind is None and r.has("vocab-file") and r.has("merge-file"):
        kind = DEFAULT_TOKENIZER
        r.assumptions.append(f"vocabulary: {DEFAULT_TOKENIZER}'s 50,257 tokens (vocab and merge "
                             "files given, no --tokenizer-type)")  # fmt: skip
    if size is None and kind in TOKENIZER_VOCAB:
        size = TOKENIZER_VOCAB[kind]
    if size is None:
        why = f"tokenizer {kind!r}: its file decides the vocabulary" if kind else "no vocabulary"
        r.notes.append(ArgNote("vocab-size", "", "unmapped", f"{why}; give --vocab-size"))
        return None
    multiple = (r.int("make-vocab-size-divisible-by", VOCAB_DIVISIBLE_BY) or 1) * tp
    return math.ceil(size / multiple) * multiple
