"""Host time of one eager PyTorch op on a 1-element CPU tensor, as the published loops time it.

The loops of pytorch/pytorch#41383 (``y = 2*x``) and of pytorch/pytorch#122029
(``benchmarks/dynamo/microbenchmarks/overheads.py``: ``x + 1``, ``timeit.repeat(number=1000)``),
with and without ``requires_grad``, so that this CPU's figure sits beside the published ones
(measurements/host/x86_host.md). Prints, per loop, the fastest, the 10th percentile and the median
of ``--repeat`` batches of 1000 calls, in microseconds per call (on a shared VM the fast batches
are the uncontended ones). No GPU: the CUDA launch is not in these figures.

Run: ``python measurements/host/eager_cpu_loop.py [--repeat 300]``.
"""

from __future__ import annotations

import argparse
import timeit

import numpy as np
import torch


def add1(x: torch.Tensor) -> torch.Tensor:
    """pytorch#122029's op."""
    return x + 1


def mul2(x: torch.Tensor) -> torch.Tensor:
    """pytorch#41383's op."""
    return 2 * x


def main() -> None:
    """Time both loops, both autograd modes; print us per call."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=300, help="batches of 1000 calls")
    args = ap.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for requires_grad in (False, True):
        x = torch.randn(1, requires_grad=requires_grad)
        for name, fn in (("x + 1 (pytorch#122029)", add1), ("2 * x (pytorch#41383)", mul2)):
            for _ in range(1000):
                fn(x)
            us = (
                np.array(timeit.repeat(lambda fn=fn, x=x: fn(x), number=1000, repeat=args.repeat))
                * 1e3
            )
            print(
                f"requires_grad={requires_grad!s:5} {name:24} fastest {us.min():.2f} us, "
                f"p10 {np.percentile(us, 10):.2f}, median {np.median(us):.2f}"
            )


if __name__ == "__main__":
    main()
