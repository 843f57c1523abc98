"""The shape of one transformer block (:class:`BlockShape`): widths, heads, attention options
and the parameters of its attention; the kernels it runs and their times are
:mod:`sim.compute.transformer`'s (its module doc). :data:`LLAMA2_7B` is a worked example."""

from __future__ import annotations

from dataclasses import dataclass

from sim.compute.attention import IMPLEMENTATIONS


@dataclass(frozen=True)
class BlockShape:
    """Shape and variant of a transformer block.

    Attributes:
        hidden: ``h``.
        heads: ``a`` (``h % a == 0``).
        seq_len: ``s``.
        ffn_hidden: FFN width ``f`` (``4h`` for GPT-2/BERT, 11008 for Llama-2-7B).
        gated: SwiGLU MLP (gate and up projections) instead of one up projection.
        fused_qkv: one QKV GEMM instead of three.
        rotary: rotary position embedding on Q and K.
        dropout: dropout after attention probabilities, projection and MLP.
        causal: causal mask (flash attention skips the masked half).
        attention: ``"flash"`` or ``"math"``.
        kv_heads: key/value heads (grouped-query attention, Ainslie et al. arXiv:2305.13245:
            the K and V projections are ``h x kv_heads*hd``); None: ``heads``.
        head_dim: per-head width ``hd`` of queries, keys and values (Qwen3, GPT-OSS: Hugging
            Face ``head_dim``, Megatron ``--kv-channels``; ``a*hd`` need not be ``h``); None:
            ``h / a``.
        qk_norm: an RMSNorm over each head of Q and K before the attention core (Qwen3's
            ``q_norm`` / ``k_norm``, Megatron ``--qk-layernorm``): reads and writes Q and K
            (``2*T*(a + kv)*hd*d``), backward 1.5x; ``2*hd`` parameters; its inputs are kept.
        window: sliding-window attention over the last ``window`` keys (GPT-OSS's
            ``sliding_window``; 0: full causal attention); the core's FLOPs are those of the
            band (:func:`~sim.compute.attention.score_fraction`).
        bias: biases on the Q, K, V and output projections (GPT-OSS ``attention_bias``):
            ``(a + 2 kv)*hd + h`` parameters; Q, K, V's added in the GEMM's epilogue (no
            kernel); the output projection's is returned apart (Megatron-Core's
            ``skip_bias_add``) and added by the unfused bias-dropout-add GPT-OSS runs
            (``bias_dropout_fusion = False``, :mod:`sim.compute.gptoss_host`): one kernel
            reading and writing ``r*h*d``, and in the backward its gradient's sum over the
            tokens (reads ``r*h*d``).
        sinks: a learned logit per head added to the softmax's denominator (GPT-OSS
            attention sinks): ``a`` parameters, computed inside the attention kernel.
        rope_unfused: the rotary embedding as Megatron-Core's unfused eager ops (YaRN with a
            concentration factor other than 1, GPT-OSS: :mod:`sim.compute.rope_unfused`).
        rope_complex: the rotary embedding as torchtitan's complex multiply in fp32 (three
            kernels per tensor each way; :mod:`sim.compute.torchtitan_ops`).
        norm_fp32: each RMSNorm as fp32 ATen ops (torchtitan's ``RMSNorm`` of ``norm_type =
            "rmsnorm"``, to 2025-04; :mod:`sim.compute.torchtitan_ops`) instead of one kernel.
        kv_repeat: grouped-query keys and values copied to ``heads`` before attention
            (torchtitan's ``repeat_kv``, to 2026-01; :mod:`sim.compute.torchtitan_ops`).
        fused_dropout_add: each hidden dropout and its residual add as one fused kernel
            (Megatron-DeepSpeed's TorchScript ``bias_dropout_add_fused_train``, compiled by
            nvFuser: :func:`_dropout_residual`); False: two eager kernels.
        unfused_qkv_bias: the fused QKV projection's bias added by its own kernel after the
            GEMM (Megatron-LM 2021 under PyTorch < 1.12: :mod:`sim.compute.linear_bias`);
            False: in the GEMM's epilogue or no bias (no kernel).
    """

    hidden: int
    heads: int
    seq_len: int
    ffn_hidden: int
    gated: bool = False
    fused_qkv: bool = True
    rotary: bool = False
    dropout: bool = True
    causal: bool = True
    attention: str = "math"
    kv_heads: int | None = None
    head_dim: int | None = None
    qk_norm: bool = False
    window: int = 0
    bias: bool = False
    sinks: bool = False
    rope_unfused: bool = False
    rope_complex: bool = False
    norm_fp32: bool = False
    kv_repeat: bool = False
    fused_dropout_add: bool = False
    unfused_qkv_bias: bool = False

    def __post_init__(self) -> None:
        for name in ("hidden", "heads", "seq_len", "ffn_hidden"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        hd = self.head_dim
        if hd is not None and (isinstance(hd, bool) or not isinstance(hd, int) or hd < 1):
            raise ValueError(f"head_dim must be a positive integer, got {hd!r}")
        if hd is None and self.hidden % self.heads:
            raise ValueError(f"hidden {self.hidden} is not divisible by heads {self.heads}")
        if isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < 0:
            raise ValueError(f"window must be an integer >= 0, got {self.window!r}")
        kv = self.kv_heads
        if kv is not None and (isinstance(kv, bool) or kv < 1 or self.heads % kv):
            raise ValueError(f"kv_heads {kv!r} must be a positive divisor of heads {self.heads}")
        if self.attention not in IMPLEMENTATIONS:
            raise ValueError(
                f"attention must be one of {', '.join(IMPLEMENTATIONS)}, got {self.attention!r}"
            )

    @property
    def hd(self) -> int:
        """Per-head width: ``head_dim``, else ``h / a``."""
        return self.head_dim if self.head_dim is not None else self.hidden // self.heads

    @property
    def kv(self) -> int:
        """Key/value heads: ``kv_heads``, else ``heads``."""
        return self.heads if self.kv_heads is None else self.kv_heads

    def attn_params(self) -> int:
        """Parameters of the attention projections (and QK-norms, biases, sinks), norm not
        included: ``h*(a + 2 kv)*hd + a*hd*h`` plus the options (class doc)."""
        h, a, hd, kv = self.hidden, self.heads, self.hd, self.kv
        out = h * (a + 2 * kv) * hd + a * hd * h
        out += 2 * hd if self.qk_norm else 0
        out += (a + 2 * kv) * hd + h if self.bias else 0
        return out + (a if self.sinks else 0)


LLAMA2_7B = BlockShape(
    hidden=4096,
    heads=32,
    seq_len=2048,
    ffn_hidden=11008,
    gated=True,
    fused_qkv=False,
    rotary=True,
    dropout=False,
    causal=True,
    attention="flash",
)
"""A Llama-2-7B decoder layer (Touvron et al. 2023, Table 1 / HF config: hidden 4096, 32 heads,
intermediate 11008, SwiGLU, RMSNorm, RoPE, no dropout) at sequence 2048, with torch SDPA."""
