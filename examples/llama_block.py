"""A tiny Llama-style decoder, as a user would write it, for ``sim profile --model``.

RMSNorm (Zhang & Sennrich 2019), SwiGLU feed-forward (Shazeer 2020), rotary position
embeddings (Su et al. 2021, RoFormer) on queries and keys, causal attention with
``F.scaled_dot_product_attention``, pre-norm residual blocks, untied LM head. Each block
computes its rotary tables from the sequence length of its input, so one tensor
(``[b, s, dim]``) flows between layers and the model cuts into pipeline stages anywhere.

The blocks live in an ``nn.ModuleList``, so the chain is named with ``--layers``
(``blocks.*`` expands to the list's children in order)::

    sim profile --model examples/llama_block.py:build --loss examples/llama_block.py:loss \
        --layers 'embed,blocks.*,norm,lm_head' --out traces/cpu/llama-cpu -b 4
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn


class RMSNorm(nn.Module):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last dimension."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class SwiGLU(nn.Module):
    """``w2(silu(w1 x) * w3 x)``, hidden width ``hidden``."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def rotate(x: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotary embedding of ``x [b, heads, s, head_dim]`` (pairs of halves, as in Llama)."""
    s, d = x.shape[-2], x.shape[-1]
    inv = 1.0 / base ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d)
    angles = torch.outer(torch.arange(s, device=x.device, dtype=torch.float32), inv)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class Attention(nn.Module):
    """Causal multi-head self-attention with rotary queries and keys."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, dim = x.shape

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, s, self.heads, dim // self.heads).transpose(1, 2)

        q, k, v = rotate(split(self.wq(x))), rotate(split(self.wk(x))), split(self.wv(x))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(b, s, dim))


class Block(nn.Module):
    """Pre-norm decoder block: ``x + attn(norm(x))``, then ``x + mlp(norm(x))``."""

    def __init__(self, dim: int, heads: int, hidden: int):
        super().__init__()
        self.attn_norm = RMSNorm(dim)
        self.attn = Attention(dim, heads)
        self.mlp_norm = RMSNorm(dim)
        self.mlp = SwiGLU(dim, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class TinyLlama(nn.Module):
    """Token ids ``[b, s]`` -> logits ``[b, s, vocab]``."""

    def __init__(self, vocab: int, dim: int, heads: int, hidden: int, n_blocks: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, hidden) for _ in range(n_blocks))
        self.norm = RMSNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.norm(x))


def build(
    microbatch_size: int = 4,
    seq_len: int = 64,
    vocab: int = 512,
    dim: int = 128,
    heads: int = 4,
    n_blocks: int = 4,
):
    """The model, one micro-batch of token ids and its next-token targets."""
    model = TinyLlama(vocab, dim, heads, hidden=int(8 * dim / 3), n_blocks=n_blocks)
    ids = torch.randint(0, vocab, (microbatch_size, seq_len + 1))
    return model, ids[:, :-1].contiguous(), ids[:, 1:].contiguous()


def loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean token cross-entropy of ``logits [b, s, V]`` against ``targets [b, s]``."""
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
