"""A small ViT-style masked-patch model with shared and tied weights, for ``sim profile --model``.

What a user writes when weights are reused (the case pipesim must keep tied across stages):

* ``blocks`` is an ``nn.ModuleList`` of pre-norm transformer blocks; blocks 1 and 3 **share
  one FFN module** (the same ``nn.Module`` object, so the same parameters, in two blocks);
* the reconstruction ``head`` is **tied to the patch embedding**: it projects back to pixels
  with the transpose of the embedding's weight (``head.weight is embed.proj.weight``);
* ``probe`` (a linear classifier) is registered but never called by ``forward``: the layer
  chain pipesim suggests comes from the forward's real call order, so it is left out.

Input ``[b, 3, 32, 32]`` images; output ``[b, 64, 48]`` reconstructed 4x4 patches; loss the
mean squared error against the image's own patches (:func:`loss`)::

    sim profile --model examples/vit_shared.py:build --loss examples/vit_shared.py:loss \
        --layers 'embed,blocks.*,head' --out traces/cpu/vit-shared-cpu -b 4 -b 8
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

PATCH = 4
"""Patch side in pixels: a 32x32 image is 64 patches of ``3 * 4 * 4 = 48`` values."""


def patches(images: torch.Tensor) -> torch.Tensor:
    """``[b, c, H, W] -> [b, (H/P)(W/P), c*P*P]`` non-overlapping patches."""
    return F.unfold(images, PATCH, stride=PATCH).transpose(1, 2)


class PatchEmbed(nn.Module):
    """Patches -> ``[b, n, dim]`` tokens plus a learned position embedding."""

    def __init__(self, dim: int, tokens: int, patch_dim: int):
        super().__init__()
        self.proj = nn.Linear(patch_dim, dim, bias=False)
        self.pos = nn.Parameter(torch.randn(1, tokens, dim) * 0.02)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.proj(patches(images)) + self.pos


class FFN(nn.Module):
    """``Linear(dim, 4 dim) -> GELU -> Linear(4 dim, dim)``."""

    def __init__(self, dim: int):
        super().__init__()
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    """Pre-norm block: ``x + attn(norm(x))``, then ``x + ffn(norm(x))``."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.ffn = FFN(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.ffn(self.norm2(x))


class TiedHead(nn.Module):
    """``norm(x) @ W`` with ``W`` the patch embedding's weight ``[dim, patch_dim]``: pixels."""

    def __init__(self, embed: PatchEmbed, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.weight = embed.proj.weight  # the same Parameter: tied

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x) @ self.weight


class SharedViT(nn.Module):
    """``[b, 3, 32, 32] -> [b, 64, 48]``; see the module docstring for what is shared."""

    def __init__(self, dim: int = 64, depth: int = 6, heads: int = 4, image: int = 32):
        super().__init__()
        tokens, patch_dim = (image // PATCH) ** 2, 3 * PATCH * PATCH
        self.embed = PatchEmbed(dim, tokens, patch_dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.blocks[3].ffn = self.blocks[1].ffn  # one FFN in two blocks: shared
        self.head = TiedHead(self.embed, dim)
        self.probe = nn.Linear(dim, 10)  # registered, never called by forward

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.embed(images)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def build(microbatch_size: int = 4, dim: int = 64, depth: int = 6):
    """The model, one micro-batch of random images, and the patches to reconstruct."""
    model = SharedViT(dim, depth)
    images = torch.randn(microbatch_size, 3, 32, 32)
    return model, images, patches(images)


def loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean squared error of the reconstructed patches (fp32)."""
    return F.mse_loss(output.float(), target.float())
