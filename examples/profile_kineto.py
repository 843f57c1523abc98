"""Record a torch.profiler trace of examples/cnn.py with one ``record_function`` per layer.

    python examples/profile_kineto.py prof.json
    sim profile --model examples/cnn.py:build -b 8 --for-gpu H100 --out traces/cnn-bytes
    sim trace import-kineto prof.json -b 8 --out traces/cnn-kineto --bytes-from traces/cnn-bytes

Annotate your own model the same way: wrap each layer's forward in
``torch.profiler.record_function(name)`` and run forward and backward for a few steps (the
importer takes the median per layer; the backward is matched to the layers by autograd
sequence numbers). On a GPU add ``ProfilerActivity.CUDA`` to get kernel times.
"""

from __future__ import annotations

import sys

import torch
from cnn import build, loss  # examples/ is this script's folder
from torch.profiler import ProfilerActivity, profile, record_function


def main(path: str, steps: int = 3, microbatch_size: int = 8) -> None:
    """Profile ``steps`` training steps of the CNN and write the Chrome trace to ``path``."""
    model, images, labels = build(microbatch_size)
    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
        model, images, labels = model.cuda(), images.cuda(), labels.cuda()
    with profile(activities=activities) as prof:
        for _ in range(steps):
            x = images
            for name, layer in model.named_children():
                with record_function(name):
                    x = layer(x)
            loss(x, labels).backward()
    prof.export_chrome_trace(path)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "prof.json")
