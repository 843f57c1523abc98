"""Host time of a ``torch.compile``-d call on this CPU (``measurements/host/jit_fuser.md``).

Megatron-Core's bias-dropout-add (with autograd) and bias-GeLU (without) compiled, against one
eager op, an empty ``nn.Module`` call and a one-node backward; tiny tensors so that the wall time
is the host's. Prints the median and the fastest of 9 repeats of 1000 calls, in us."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch


def bda(x: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor, prob: float) -> torch.Tensor:
    """Megatron-Core's ``_bias_dropout_add_func`` in training (fused_bias_dropout.py)."""
    out = torch.nn.functional.dropout(x + bias, p=prob, training=True)
    return residual + out


def gelu(bias: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Megatron-Core's ``bias_gelu`` (fused_bias_gelu.py)."""
    x = bias + y
    return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))


def timed(f: Callable[[], object], n: int = 1000) -> tuple[float, float]:
    """``(median, fastest)`` us per call of ``f`` over 9 repeats of ``n`` calls."""
    for _ in range(300):
        f()
    out = []
    for _ in range(9):
        s = time.perf_counter()
        for _ in range(n):
            f()
        out.append((time.perf_counter() - s) / n * 1e6)
    return statistics.median(out), min(out)


def main() -> None:
    torch.set_num_threads(1)
    cbda, cgelu, m = torch.compile(bda), torch.compile(gelu), torch.nn.Identity()
    x = torch.randn(4, 8, requires_grad=True)
    b = torch.randn(8, requires_grad=True)
    r = torch.randn(4, 8, requires_grad=True)
    g = torch.ones(4, 8)
    res = {
        "module call": timed(lambda: m(x)),
        "one op grad": timed(lambda: x + 1),
        "compiled bda grad": timed(lambda: cbda(x, b, r, 0.1)),
        "add fwd+bwd": timed(lambda: (x + 1).backward(g)),
        "compiled bda fwd+bwd": timed(lambda: cbda(x, b, r, 0.1).backward(g)),
    }
    with torch.no_grad():
        res["one op nograd"] = timed(lambda: x + 1)
        res["compiled gelu nograd"] = timed(lambda: cgelu(b, x))
    for k, (med, low) in res.items():
        print(f"{k:24s} median {med:7.2f} us  min {low:7.2f} us")
    print(torch.__version__)


if __name__ == "__main__":
    main()
