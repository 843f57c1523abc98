"""Multi-head latent attention (MLA, DeepSeek-V2/V3) as kernels on one rank, and its memory.

DeepSeek-V2 (arXiv:2405.04434, §2.1.2-2.1.3) and DeepSeek-V3 (arXiv:2412.19437, §2.1.1)
compress keys and values, and queries, through low-rank latents. With ``T`` tokens, ``h``
hidden, ``a`` heads, per-head dims ``d_nope`` (non-rotary query/key), ``d_rope`` (rotary) and
``d_v`` (value), latent ranks ``q_lora`` and ``kv_lora`` (Hugging Face ``DeepseekV3Config``
names; Megatron-LM ``MLATransformerConfig``):

* query: ``[T, h] @ [h, q_lora]`` (down), RMSNorm over ``q_lora``, ``[T, q_lora] @
  [q_lora, a*(d_nope + d_rope)]`` (up); without ``q_lora`` one ``[h, a*(d_nope + d_rope)]``;
* key/value: ``[T, h] @ [h, kv_lora + d_rope]`` (down; the ``d_rope`` part is the rotary key
  shared by the heads), RMSNorm over ``kv_lora``, ``[T, kv_lora] @ [kv_lora, a*(d_nope +
  d_v)]`` (up);
* rotary embedding on the ``d_rope`` parts; the attention core over ``a`` heads with query/key
  dim ``d_qk = d_nope + d_rope`` and value dim ``d_v``: its FLOPs ``2*T*kv*a*(d_qk + d_v)``
  (halved causal) and the flash kernel's bytes (Q, K, V, O) are those of
  :func:`~sim.compute.attention.attention_fwd` with ``h_eff = a*(d_qk + d_v)/2``, which it is
  called with;
* output projection ``[T, a*d_v] @ [a*d_v, h]``.

Tensor parallelism (Megatron-LM ``multi_latent_attention.py``): the down projections and their
norms are replicated (every tensor rank runs them on all ``T`` tokens); the up projections are
column-parallel (``a/t`` heads), the output projection row-parallel.

**Activations** kept for backward (``d`` bytes per element, one rank): the norm input and the
down projections' input ``2*r*h*d`` (``r`` = sequence-parallel tokens) plus the gathered input
``T*h*d`` with sequence parallelism; the latents before and after their norms
``2*T*(q_lora + kv_lora + d_rope)*d``; Q, K, V (``T*a/t*(2 d_qk + d_v)*d``); the output
``T*a/t*d_v*d``; flash attention's fp32 log-sum-exp ``4*T*a/t``. These are the inputs of
every GEMM and norm of the list above, as autograd saves them.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.compute.attention import attention_bwd, attention_fwd
from sim.compute.kernels import Kernel, gemm, mem


@dataclass(frozen=True)
class MLAShape:
    """The latent dimensions of an MLA layer (module doc).

    Attributes:
        q_lora: query latent rank (0: no query compression, as DeepSeek-V2-Lite).
        kv_lora: key/value latent rank.
        d_nope: non-rotary query/key head dim.
        d_rope: rotary query/key head dim.
        d_v: value head dim.
    """

    q_lora: int
    kv_lora: int
    d_nope: int
    d_rope: int
    d_v: int

    def __post_init__(self) -> None:
        for name in ("kv_lora", "d_nope", "d_rope", "d_v"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"mla.{name} must be a positive integer, got {v!r}")
        if self.q_lora < 0:
            raise ValueError(f"mla.q_lora must be >= 0, got {self.q_lora}")

    @property
    def d_qk(self) -> int:
        """Query/key head dim ``d_nope + d_rope``."""
        return self.d_nope + self.d_rope

    def params(self, h: int, a: int) -> int:
        """Parameters of the attention half (two latent norms included, the block's input
        norm not)."""
        q = (
            h * self.q_lora + self.q_lora + self.q_lora * a * self.d_qk
            if self.q_lora
            else h * a * self.d_qk
        )
        kv = (
            h * (self.kv_lora + self.d_rope)
            + self.kv_lora
            + self.kv_lora * a * (self.d_nope + self.d_v)
        )
        return q + kv + a * self.d_v * h

    def linears(self, h: int, a: int, tp: int) -> list[tuple[str, int, int, bool]]:
        """``(name, in, out, replicated)`` of the GEMMs on one of ``tp`` ranks (module doc)."""
        at = a // tp
        q = (
            [("q_down", h, self.q_lora, True), ("q_up", self.q_lora, at * self.d_qk, False)]
            if self.q_lora
            else [("q", h, at * self.d_qk, False)]
        )
        kv = [
            ("kv_down", h, self.kv_lora + self.d_rope, True),
            ("kv_up", self.kv_lora, at * (self.d_nope + self.d_v), False),
        ]
        return q + kv + [("proj", at * self.d_v, h, False)]


def _latent_norm_bytes(m: MLAShape, t: int, d: int) -> int:
    return 2 * t * (m.q_lora + m.kv_lora) * d


def mla_half_fwd(
    m: MLAShape,
    h: int,
    a: int,
    s: int,
    b: int,
    d: int,
    tp: int = 1,
    sp: bool = False,
    cp: int = 1,
    *,
    attention: str = "flash",
) -> list[Kernel]:
    """Forward kernels of the MLA half of a block on one rank (module doc): norm, projections,
    rotary, attention core (``s/cp`` queries against ``s`` keys, causal), output projection,
    residual.

    Raises:
        ValueError: ``tp`` does not divide ``a``; ``cp`` does not divide ``s``.
    """
    t, r = _tokens(a, s, b, tp, sp, cp)
    at = a // tp
    out = [mem("norm1", 2 * r * h * d)]
    out += [gemm(n, t, o, i, d) for n, i, o, _ in m.linears(h, a, tp) if n != "proj"]
    out += [mem("latent_norms", _latent_norm_bytes(m, t, d))]
    out.append(mem("rotary", 2 * 2 * t * (at + 1) * m.d_rope * d))
    h_eff = at * (m.d_qk + m.d_v) // 2
    out += attention_fwd(attention, b, s // cp, h_eff, at, d, causal=True, dropout=False, kv=s)
    out.append(gemm("proj", t, h, at * m.d_v, d))
    return out + [mem("attn_residual", 3 * r * h * d)]


def mla_half_bwd(
    m: MLAShape,
    h: int,
    a: int,
    s: int,
    b: int,
    d: int,
    tp: int = 1,
    sp: bool = False,
    cp: int = 1,
    *,
    attention: str = "flash",
) -> tuple[list[Kernel], list[Kernel]]:
    """Backward kernels ``(input_gradient, weight_gradient)`` of :func:`mla_half_fwd`.

    Raises:
        ValueError: as :func:`mla_half_fwd`.
    """
    t, r = _tokens(a, s, b, tp, sp, cp)
    at = a // tp
    lin = m.linears(h, a, tp)
    dx = {n: gemm(f"d_{n}_in", t, i, o, d) for n, i, o, _ in lin}
    dw = [gemm(f"d_{n}_w", i, o, t, d) for n, i, o, _ in lin]
    h_eff = at * (m.d_qk + m.d_v) // 2
    out = [dx["proj"]]
    out += attention_bwd(attention, b, s // cp, h_eff, at, d, causal=True, dropout=False, kv=s)
    out.append(mem("rotary_bwd", 2 * 2 * t * (at + 1) * m.d_rope * d))
    out += [dx[n] for n in ("q_up", "q", "kv_up") if n in dx]
    out.append(mem("latent_norms_bwd", 1.5 * _latent_norm_bytes(m, t, d)))
    out += [dx[n] for n in ("q_down", "kv_down") if n in dx]
    out += [mem("norm1_bwd", 3 * r * h * d), mem("residual_grad_add", 3 * r * h * d)]
    return out, dw


def mla_act_bytes(
    m: MLAShape, h: int, a: int, s: int, b: int, d: int, tp: int = 1, sp: bool = False, cp: int = 1
) -> float:
    """Bytes the MLA half keeps for its backward on one rank, one micro-batch (module doc)."""
    t, r = _tokens(a, s, b, tp, sp, cp)
    at = a // tp
    gathered = t * h * d if sp and tp > 1 else 0
    latents = 2 * t * (m.q_lora + m.kv_lora + m.d_rope) * d
    qkvo = t * at * (2 * m.d_qk + m.d_v) * d + t * at * m.d_v * d
    return float(2 * r * h * d + gathered + latents + qkvo + 4 * t * at)


def _tokens(a: int, s: int, b: int, tp: int, sp: bool, cp: int) -> tuple[int, int]:
    if tp < 1 or a % tp:
        raise ValueError(f"tensor parallel size {tp} must divide heads {a}")
    if cp < 1 or s % cp or (sp and (s // cp) % tp):
        raise ValueError(f"context parallel size {cp} must divide seq_len {s}")
    t = b * s // cp
    return t, t // tp if sp else t
