"""Count the ops the host issues for a layer: the ``fwd_ops``/``bwd_ops`` of a trace.

An op is one operator call that reaches PyTorch's dispatcher below autograd, as a
``TorchDispatchMode`` sees it (``torch.utils._python_dispatch``): ATen ops with views included,
after composite ops (``linear``, ``matmul``, ``dropout``) have been decomposed, and collective
ops (``c10d``, ``_c10d_functional``). The forward is counted with autograd recording on; the
backward counts what the autograd engine dispatches (the dispatch mode follows the engine's
threads through PyTorch's thread-local state). This is the unit :mod:`sim.hardware.host_ops` charges
per op and :mod:`sim.compute.megatron_ops` counts by reading code.

The Python around the ops is counted too (``fwd_modules``, ``fwd_functions`` of a trace, charged
per call by :meth:`sim.hardware.host_ops.HostOverhead.calls_s`): ``nn.Module`` calls by a global
forward pre-hook (``torch.nn.modules.module.register_module_forward_pre_hook``), and custom
``autograd.Function`` applies by the nodes they leave in the autograd graph (each apply that
records a graph makes one node of a ``torch.autograd.function.BackwardCFunction`` subclass).
An apply whose outputs need no gradient leaves no node and is not counted.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.autograd.function import BackwardCFunction
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


def count_module_calls(run: Callable[[], object]) -> int:
    """``nn.Module`` calls made by ``run()`` (a global forward pre-hook counts them)."""
    calls = [0]

    def hook(module: nn.Module, args: object) -> None:
        calls[0] += 1

    handle = nn.modules.module.register_module_forward_pre_hook(hook)
    try:
        run()
    finally:
        handle.remove()
    return calls[0]


def count_function_nodes(y: torch.Tensor) -> int:
    """Custom ``autograd.Function`` nodes in ``y``'s autograd graph (module doc): a walk from
    ``y.grad_fn`` over ``next_functions``, each node once; 0 when ``y`` has no graph."""
    seen: set[int] = set()
    stack = [y.grad_fn]
    functions = 0
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        functions += isinstance(node, BackwardCFunction)
        stack.extend(nxt for nxt, _ in node.next_functions)
    return functions


def layer_calls(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> tuple[int, int]:
    """``(nn.Module calls, autograd.Function applies)`` of one forward of ``fn`` on ``x`` with
    autograd recording (module doc); ``x`` is detached, so the walk stops at the layer's input.
    ``fn`` itself counts as a call when it is a module."""
    x = x.detach().requires_grad_(x.is_floating_point())
    out: dict[str, torch.Tensor] = {}

    def forward() -> None:
        out["y"] = fn(x)

    modules = count_module_calls(forward)
    return modules, count_function_nodes(out["y"])
