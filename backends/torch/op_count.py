"""Count the ops the host issues for a layer: the ``fwd_ops``/``bwd_ops`` of a trace.

An op is one operator call that reaches PyTorch's dispatcher below autograd, as a
``TorchDispatchMode`` sees it (``torch.utils._python_dispatch``): ATen ops with views included,
after composite ops (``linear``, ``matmul``, ``dropout``) have been decomposed, and collective
ops (``c10d``, ``_c10d_functional``). The forward is counted with autograd recording on; the
backward counts what the autograd engine dispatches (the dispatch mode follows the engine's
threads through PyTorch's thread-local state). This is the unit :mod:`sim.compute.host` charges
per op and :mod:`sim.compute.megatron_ops` counts by reading code.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

COUNTED = ("aten", "c10d", "_c10d_functional")
"""Operator namespaces counted as ops (``prim`` helpers such as ``prim.device`` are not)."""


class OpCount(TorchDispatchMode):
    """Counts operator calls (module doc).

    Attributes:
        ops: calls seen in :data:`COUNTED` namespaces.
    """

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        if func.namespace in COUNTED:
            self.ops += 1
        return func(*args, **(kwargs or {}))


def count_ops(run: Callable[[], object]) -> int:
    """Ops issued by ``run()`` (module doc)."""
    with OpCount() as counter:
        run()
    return counter.ops


def layer_ops(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> tuple[int, int]:
    """``(forward ops, backward ops)`` of ``fn`` on ``x`` (``x`` gets ``requires_grad`` when it
    is floating point; the backward seeds the output with ones)."""
    x = x.detach().requires_grad_(x.is_floating_point())
    out: dict[str, torch.Tensor] = {}

    def forward() -> None:
        out["y"] = fn(x)

    fwd = count_ops(forward)
    y = out["y"]
    if not y.requires_grad:
        return fwd, 0
    grad = torch.ones_like(y)
    bwd = count_ops(lambda: torch.autograd.backward(y, grad))
    return fwd, bwd
