"""The shape of a decoder language model and the layers it is cut into: :class:`DecoderShape`.

One record describes the decoder models pipesim times analytically (:mod:`sim.compute.decoder`):
Llama-like blocks (RMSNorm, rotary embeddings, SwiGLU MLPs, grouped-query attention; Llama 3,
Qwen2/Qwen3 with an explicit ``head_dim`` and QK-norm), mixture-of-experts blocks (Mixtral,
Qwen-MoE, DeepSeek-V2/V3, GPT-OSS with biased experts), MLA (DeepSeek), sliding-window layers
(GPT-OSS: alternating windowed and full attention, attention sinks), DeepSeek-V3's
multi-token-prediction module, and hybrid Mamba-2 models whose layers follow a pattern
(Nemotron-H, Nemotron 3: Megatron-Core's ``hybrid_override_pattern``, one character per layer,
``M`` Mamba-2, ``*`` attention, ``-`` MLP, ``E`` MoE: ``megatron/core/ssm/
mamba_hybrid_layer_allocation.py`` ``Symbols``). Adapters (LoRA) on a frozen base are part of
the record too, since they change every layer's kernels.

Layer kinds (:func:`layer_names`): ``embedding``; ``block`` (attention + dense MLP) and
``moe_block`` (attention + MoE), prefixed ``swa_`` where the layer's attention is windowed;
the hybrid's ``mamba``, ``attention`` (or ``swa_attention``), ``mlp`` and ``moe`` (one mixer
each, with its own pre-norm and residual); ``mtp`` (one multi-token-prediction depth);
``head``. Layer ``i`` is named ``<kind>.<i>``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from sim.compute.lora import LoRAShape
from sim.compute.loss_fusion import CROSS_ENTROPY_FUSIONS
from sim.compute.mla import MLAShape
from sim.compute.moe_shape import MoEShape
from sim.compute.ssm import MambaShape
from sim.compute.transformer import BlockShape

PATTERN_KINDS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
"""Megatron-Core's hybrid layer symbols (module doc)."""
WINDOWED = ("block", "moe_block", "attention")
"""Layer kinds whose attention may be windowed (``swa_`` prefix)."""
OPTIONAL = {
    "head_dim": None,
    "qk_norm": False,
    "attn_bias": False,
    "sinks": False,
    "window": 0,
    "window_pattern": "",
    "rotary": True,
    "gated_mlp": True,
    "pattern": "",
    "mamba": None,
    "mtp_layers": 0,
    "tied_embeddings": False,
    "dropout": False,
    "lora": None,
    "rope_unfused": False,
    "cross_entropy_fusion": "unfused",
    "rope_complex": False,
    "norm_fp32": False,
    "kv_repeat": False,
    "mtp_shared": False,
}
"""Fields added after the first shipped traces, with their defaults: :meth:`DecoderShape.to_dict`
leaves them out at these values, so the shapes of older traces read and write unchanged."""


@dataclass(frozen=True)
class DecoderShape:
    """A decoder LM (module doc).

    Attributes:
        layers: transformer blocks (or hybrid layers: ``len(pattern)``).
        hidden, heads, seq_len, vocab: model shape.
        ffn_hidden: width of the dense MLPs.
        kv_heads: grouped-query attention's key/value heads (None: ``heads``).
        attention: ``flash`` or ``math``.
        mla: MLA latent dims (None: standard attention).
        moe: the MoE layer (None: a dense model).
        dense_layers: the first blocks keep a dense MLP (DeepSeek's ``first_k_dense_replace``).
        moe_every: every ``moe_every``-th block after them is MoE (Qwen2-MoE's
            ``decoder_sparse_step``); 1: all of them.
        head_dim: per-head width (None: ``hidden / heads``; :class:`BlockShape`).
        qk_norm: RMSNorm on each head of Q and K (Qwen3).
        attn_bias: biases on the attention projections (GPT-OSS).
        sinks: learned attention-sink logits per head (GPT-OSS).
        window: sliding-window size of the windowed layers (0: none).
        window_pattern: ``S`` (windowed) or ``F`` (full) per block, repeated when shorter than
            the model (GPT-OSS: ``SF``); empty with ``window > 0``: every block windowed.
        rotary: rotary position embeddings on Q and K (Nemotron-H has none).
        gated_mlp: SwiGLU dense MLPs (gate, up, down); False: up and down only (Nemotron-H's
            squared ReLU).
        pattern: hybrid layer pattern (:data:`PATTERN_KINDS`); empty: uniform blocks.
        mamba: the Mamba-2 mixer of the ``M`` layers.
        mtp_layers: DeepSeek-V3 multi-token-prediction depths (``num_nextn_predict_layers``).
        mtp_shared: one MTP layer's weights serve every depth (Megatron-Core's
            ``mtp_use_repeated_layer``: ``MultiTokenPredictionBlock._build_layers`` builds one
            layer and its forward applies ``self.layers[0]`` at each of the ``mtp_num_layers``
            depths, NVIDIA/Megatron-LM@d98e8a64 ``megatron/core/transformer/
            multi_token_prediction.py`` lines 1958-1993 and 2048-2049; the Nemotron 3 recipes
            set it): every depth computes, the parameters are held once (``mtp.0``).
        tied_embeddings: the output layer shares the word embedding's weight (Hugging Face
            ``tie_word_embeddings``; Llama, Mixtral, DeepSeek and Qwen3-MoE are untied).
        lora: adapters on a frozen base (None: full training).
        dropout: attention and hidden dropout with p > 0 (Megatron-LM's GPT defaults,
            ``--attention-dropout 0.1 --hidden-dropout 0.1``; Llama-like recipes train
            without): each block keeps a 1-byte mask after its attention projection and after
            its MLP (``bias_dropout_add`` saves the mask), the embedding one after the
            embedding, and unfused ("math") attention keeps the mask and the dropped-out
            probabilities beside the softmax output (:func:`sim.compute.decoder.
            scores_act_bytes`); flash attention regenerates its mask from the RNG state.
        rope_unfused: the rotary embedding as Megatron-Core's unfused eager ops (YaRN with a
            concentration factor other than 1: GPT-OSS; :mod:`sim.compute.rope_unfused`).
        rope_complex, norm_fp32, kv_repeat: torchtitan's eager kernels (complex fp32 RoPE,
            fp32 RMSNorm ops, also for the final norm, repeated keys and values;
            :mod:`sim.compute.torchtitan_ops`), dense attention blocks only.
        cross_entropy_fusion: the head's loss, one of :data:`sim.compute.loss_fusion.
            CROSS_ENTROPY_FUSIONS`: ``unfused`` (Megatron's fp32 chain), ``native`` or ``te``
            (``--cross-entropy-loss-fusion`` with ``--cross-entropy-fusion-impl``): the one
            field for the loss, read for its time here and for its memory by
            :mod:`sim.memory.layer_work` (the ``memory:`` section has none).
    """

    layers: int
    hidden: int
    heads: int
    seq_len: int
    vocab: int
    ffn_hidden: int
    kv_heads: int | None = None
    attention: str = "flash"
    mla: MLAShape | None = None
    moe: MoEShape | None = None
    dense_layers: int = 0
    moe_every: int = 1
    head_dim: int | None = None
    qk_norm: bool = False
    attn_bias: bool = False
    sinks: bool = False
    window: int = 0
    window_pattern: str = ""
    rotary: bool = True
    gated_mlp: bool = True
    pattern: str = ""
    mamba: MambaShape | None = None
    mtp_layers: int = 0
    tied_embeddings: bool = False
    lora: LoRAShape | None = None
    dropout: bool = False
    rope_unfused: bool = False
    cross_entropy_fusion: str = "unfused"
    rope_complex: bool = False
    norm_fp32: bool = False
    kv_repeat: bool = False
    mtp_shared: bool = False
    block: BlockShape = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        block = BlockShape(
            self.hidden,
            self.heads,
            self.seq_len,
            self.ffn_hidden,
            gated=self.gated_mlp,
            fused_qkv=True,
            rotary=self.rotary,
            dropout=self.dropout,
            causal=True,
            attention=self.attention,
            kv_heads=self.kv_heads,
            head_dim=self.head_dim,
            qk_norm=self.qk_norm,
            bias=self.attn_bias,
            sinks=self.sinks,
            rope_unfused=self.rope_unfused,
            rope_complex=self.rope_complex,
            norm_fp32=self.norm_fp32,
            kv_repeat=self.kv_repeat,
        )
        object.__setattr__(self, "block", block)
        if self.layers < 1 or self.vocab < 1:
            raise ValueError("layers and vocab must be >= 1")
        if self.moe is not None and self.moe.hidden != self.hidden:
            raise ValueError(f"moe.hidden {self.moe.hidden} != hidden {self.hidden}")
        if self.dense_layers < 0 or self.moe_every < 1:
            raise ValueError("dense_layers must be >= 0 and moe_every >= 1")
        if self.cross_entropy_fusion not in CROSS_ENTROPY_FUSIONS:
            raise ValueError(f"cross_entropy_fusion must be one of {CROSS_ENTROPY_FUSIONS}")
        if self.mtp_layers < 0:
            raise ValueError(f"mtp_layers must be >= 0, got {self.mtp_layers}")
        if self.window < 0 or set(self.window_pattern) - {"S", "F"}:
            raise ValueError("window must be >= 0 and window_pattern only S and F")
        self._check_pattern()

    def _check_pattern(self) -> None:
        p = self.pattern
        if not p:
            if self.mamba is not None:
                raise ValueError("a Mamba-2 model needs a hybrid pattern (pattern)")
            return
        bad = sorted(set(p) - set(PATTERN_KINDS))
        if bad:
            raise ValueError(f"pattern has unknown layer symbols {bad}; use M, *, - and E")
        if len(p) != self.layers:
            raise ValueError(f"pattern has {len(p)} layers, layers is {self.layers}")
        if "M" in p and self.mamba is None:
            raise ValueError("pattern has Mamba layers (M) but the model has no mamba shape")
        if "E" in p and self.moe is None:
            raise ValueError("pattern has MoE layers (E) but the model has no moe shape")

    def is_moe(self, i: int) -> bool:
        """Whether block ``i`` has a MoE MLP."""
        if self.pattern:
            return self.pattern[i] == "E"
        return self.moe is not None and i >= self.dense_layers and (i + 1) % self.moe_every == 0

    def windowed(self, i: int) -> bool:
        """Whether the attention of layer ``i`` is windowed."""
        if self.window <= 0:
            return False
        wp = self.window_pattern
        return not wp or wp[i % len(wp)] == "S"

    def block_for(self, kind: str) -> BlockShape:
        """The :class:`BlockShape` of a layer kind (windowed for ``swa_`` kinds)."""
        return replace(self.block, window=self.window) if kind.startswith("swa_") else self.block

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict that :meth:`from_dict` reads back (``kind: decoder``); the fields
        of :data:`OPTIONAL` only where they differ from their defaults."""
        out = {k: v for k, v in asdict(self).items() if k != "block"}
        out = {k: v for k, v in out.items() if k not in OPTIONAL or v != OPTIONAL[k]}
        if out.get("moe") is not None:  # fields added later, left out at their defaults
            out["moe"] = {k: v for k, v in out["moe"].items()
                          if not (k in ("bias", "latent", "sequential_experts", "fused_grouped_mlp",
                                            "sort_by_expert", "clamp", "hybridep",
                                            "dglu_regressed", "aux_loss", "random_logits",
                                            "paged_stash", "router_expert_bias", "router_fp32",
                                            "router_scaled", "router_groups",
                                            "router_deterministic")
                              and not v)
                          and not (k in ("fused_weighting", "router_fused") and v)
                          and not (k == "hybridep_domains" and v == 1)
                          and not (k == "router_score" and v == "softmax")}  # fmt: skip
        if out.get("lora") is not None:
            out["lora"] = {**out["lora"], "targets": list(out["lora"]["targets"])}
        return {"kind": "decoder", **out}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DecoderShape:
        """The shape :meth:`to_dict` wrote.

        Raises:
            ValueError: a missing or invalid field.
            TypeError: an unknown field.
        """
        d = {k: v for k, v in data.items() if k != "kind"}
        parts = {"mla": MLAShape, "moe": MoEShape, "mamba": MambaShape, "lora": LoRAShape}
        for name, kind in parts.items():
            v = d.pop(name, None)
            d[name] = kind(**v) if v else None
        return cls(**d)


def layer_names(m: DecoderShape) -> list[tuple[str, str]]:
    """``(name, kind)`` of every layer in order (module doc): ``embedding``, the blocks or
    hybrid layers, the MTP depths, ``head``."""
    if m.pattern:
        body = [_named(PATTERN_KINDS[c], i, m) for i, c in enumerate(m.pattern)]
    else:
        body = [_named("moe_block" if m.is_moe(i) else "block", i, m) for i in range(m.layers)]
    mtp = [(f"mtp.{j}", "mtp") for j in range(m.mtp_layers)]
    return [("embedding", "embedding"), *body, *mtp, ("head", "head")]


def _named(kind: str, i: int, m: DecoderShape) -> tuple[str, str]:
    if kind in WINDOWED and m.windowed(i):
        kind = f"swa_{kind}"
    return f"{kind}.{i}", kind


def base_kind(kind: str) -> str:
    """A layer kind without its ``swa_`` prefix."""
    return kind.removeprefix("swa_")


def kind_of(name: str) -> str:
    """A layer's kind from its name (``moe_block.3`` -> ``moe_block``); ``block`` for names
    that carry no kind."""
    head = name.split(".", 1)[0]
    known = {"embedding", "head", "mtp", *WINDOWED, "mamba", "mlp", "moe"}
    return head if base_kind(head) in known else "block"
