"""A small image classifier, as a user would write it, for ``sim profile --model``.

Layer chain: the model's top-level children in order (``stem, block1, block2, block3,
head``), each taking the previous one's output. Used by ``examples/cnn.yaml``::

    sim profile --model examples/cnn.py:build --loss examples/cnn.py:loss \
        --out traces/cpu/cnn-cpu -b 8
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn


def conv_block(cin: int, cout: int) -> nn.Sequential:
    """3x3 convolution, batch norm, ReLU, 2x2 max-pool: ``[b, cin, H, W] -> [b, cout, H/2, W/2]``."""
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(),
        nn.MaxPool2d(2),
    )


class SmallCNN(nn.Module):
    """``[b, 3, H, W]`` images -> ``[b, classes]`` logits, with ``channels`` in the stem."""

    def __init__(self, channels: int = 16, classes: int = 10):
        super().__init__()
        c = channels
        self.stem = nn.Sequential(
            nn.Conv2d(3, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU()
        )
        self.block1 = conv_block(c, 2 * c)
        self.block2 = conv_block(2 * c, 4 * c)
        self.block3 = conv_block(4 * c, 8 * c)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8 * c, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block3(self.block2(self.block1(self.stem(x)))))


def build(microbatch_size: int = 8, image_size: int = 32, channels: int = 16):
    """The model, one micro-batch of random images and their labels."""
    model = SmallCNN(channels)
    images = torch.randn(microbatch_size, 3, image_size, image_size)
    labels = torch.randint(0, 10, (microbatch_size,))
    return model, images, labels


def loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of ``logits [b, classes]`` against ``labels [b]``."""
    return F.cross_entropy(logits.float(), labels)
