"""A small BERT-style masked-token encoder whose LM head is tied to its token embedding, for
``sim profile --model``.

What a user writes for an encoder with weight tying (Press & Wolf, *Using the Output Embedding
to Improve Language Models*, EACL 2017; BERT's MLM head, Devlin et al. 2019):

* ``embed`` turns token ids ``[b, seq]`` into ``[b, seq, dim]`` (token plus learned position
  embedding);
* ``layers`` is an ``nn.ModuleList`` of six ``nn.TransformerEncoderLayer`` (pre-norm, GELU,
  no dropout: a replay's numerics are checked against one process, which cannot draw the
  same dropout masks);
* ``head`` normalises and projects back to the vocabulary with **the embedding's weight**
  (``head.proj.weight is embed.tokens.weight``).

Input token ids ``[b, 32]`` over a vocabulary of 256 in which a quarter of the positions hold
the mask token (id 0); output logits ``[b, 32, 256]``; loss the cross entropy of the masked
positions against the ids they hid (BERT's masked-LM objective; :func:`loss`)::

    sim profile --model examples/encoder_tied.py:build --loss examples/encoder_tied.py:loss \
        --layers 'embed,layers.*,head' --out traces/cpu/encoder-tied-cpu -b 2 -b 4
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

VOCAB = 256
"""Vocabulary size (token ids ``0 .. VOCAB - 1``)."""
MASK = 0
"""The mask token's id."""
IGNORE = -100
"""Target of an unmasked position (``F.cross_entropy``'s default ``ignore_index``)."""
SEQ = 32
"""Tokens per sample."""


class Embed(nn.Module):
    """Token ids ``[b, seq]`` -> ``[b, seq, dim]``: token embedding plus position embedding."""

    def __init__(self, vocab: int, dim: int, seq: int):
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(1, seq, dim) * 0.02)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.tokens(ids) + self.pos


class TiedHead(nn.Module):
    """``LayerNorm`` then ``Linear(dim, vocab)`` whose weight is the token embedding's."""

    def __init__(self, embed: Embed, dim: int, vocab: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.proj = nn.Linear(dim, vocab, bias=False)
        self.proj.weight = embed.tokens.weight  # the same Parameter: tied

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.norm(x))


class TiedEncoder(nn.Module):
    """``[b, seq] ids -> [b, seq, vocab] logits``; see the module docstring."""

    def __init__(
        self, dim: int = 64, depth: int = 6, heads: int = 4, tied: bool = True, act: str = "gelu"
    ):
        super().__init__()
        self.embed = Embed(VOCAB, dim, SEQ)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(
                dim,
                heads,
                4 * dim,
                dropout=0.0,
                activation=act,
                batch_first=True,
                norm_first=True,
            )  # fmt: skip
            for _ in range(depth)
        )
        self.head = TiedHead(self.embed, dim, VOCAB)
        if not tied:  # the same model with its own head weight, for comparison
            self.head.proj.weight = nn.Parameter(self.embed.tokens.weight.detach().clone())

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def build(
    microbatch_size: int = 4, dim: int = 64, depth: int = 6, tied: bool = True, act: str = "gelu"
):
    """The model, one micro-batch of random token ids with a quarter of them masked, and the
    targets (the hidden ids at the masked positions, :data:`IGNORE` elsewhere)."""
    model = TiedEncoder(dim, depth, tied=tied, act=act)
    ids = torch.randint(1, VOCAB, (microbatch_size, SEQ))
    masked = torch.rand(microbatch_size, SEQ) < 0.25
    masked[:, 0] = True  # at least one masked position per sample
    return model, ids.masked_fill(masked, MASK), ids.masked_fill(~masked, IGNORE)


def build_untied(microbatch_size: int = 4):
    """The same encoder with an untied head (its own copy of the embedding's initial weight)."""
    return build(microbatch_size, tied=False)


def loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean cross entropy of the logits ``[b, seq, vocab]`` over the masked positions of
    ``target [b, seq]`` (fp32)."""
    return F.cross_entropy(output.float().flatten(0, 1), target.flatten(), ignore_index=IGNORE)
