"""Measure what Python's module and autograd-Function machinery costs this machine's host.

Besides the ops it dispatches (:mod:`backends.torch.profile.host_overhead`), an eager training step
pays for the Python around them: every ``nn.Module.__call__`` (``_call_impl``: the hook checks,
the ``forward`` call) and every custom ``torch.autograd.Function.apply`` (the C++
``THPFunction_apply``: unpacking the inputs, the ``ctx``, building the graph node, and a Python
``forward``), and in the backward the autograd engine calls each such node's Python
``backward`` (taking the GIL). Megatron's layers are built from such modules and Functions
(:mod:`sim.compute.megatron_ops`). Published figures: about 2 us per empty module call and
5 us per ``nn.Linear`` call beyond ``F.linear`` (pytorch/pytorch#50431, 2021, before the
no-hook fast path of pytorch/pytorch#52576); 3.6-21 us per ``Function.apply`` of 1-13 inputs
(pytorch/pytorch#189573, 2026).

:func:`measure_python_overhead` times, on a one-element tensor so that no kernel matters:

* ``module_s``: one call of an ``nn.Module`` whose ``forward`` returns its input;
* ``function_s``: one ``apply`` of an identity ``autograd.Function`` on an input that
  requires grad, so that a graph node is built, minus one ``view_as`` (``forward`` returns its
  input, which autograd turns into an alias view: an op the traces count already);
* ``function_backward_s``: the backward of a chain of ``CHAIN`` such applies minus the
  backward of the chain's root alone, per node: the engine's call into each Python
  ``backward``.

Each figure is the median over ``reps`` repetitions of ``inner`` calls (the brief of issue 16
asks for a median; CPU timings on a shared machine still need re-measuring on an idle one).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

CHAIN = 16
"""Identity Functions chained for the backward measurement."""


class _Empty(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class _Identity(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad


def _median_s(
    run: Callable[[], object], setup: Callable[[], object] | None, inner: int, reps: int
) -> float:
    """Median over ``reps`` of the mean seconds of one ``run()`` over ``inner`` calls, each
    after an untimed ``setup()``; two untimed repetitions first."""
    times = []
    for i in range(reps + 2):
        total = 0.0
        for _ in range(inner):
            if setup is not None:
                setup()
            t0 = time.perf_counter()
            run()
            total += time.perf_counter() - t0
        if i >= 2:
            times.append(total / inner)
    return statistics.median(times)


def measure_python_overhead(*, inner: int = 200, reps: int = 7) -> dict[str, float]:
    """Host seconds of one module call, one Function apply and one Function backward node on
    this machine's CPU (module doc).

    Returns:
        ``{"module_s", "function_s", "function_backward_s"}`` in seconds (each >= 0).
    """
    mod = _Empty()
    x = torch.ones(1, requires_grad=True)
    state: dict[str, torch.Tensor] = {}

    def module_loop() -> None:
        for _ in range(CHAIN):
            mod(x)

    def function_loop() -> None:
        for _ in range(CHAIN):
            _Identity.apply(x)

    def view_loop() -> None:
        for _ in range(CHAIN):
            x.view_as(x)

    def chain(n: int) -> Callable[[], None]:
        def build() -> None:
            y = x * 1.0
            for _ in range(n):
                y = _Identity.apply(y)
            state["y"] = y

        return build

    def backward() -> None:
        state["y"].backward()

    module_s = _median_s(module_loop, None, inner, reps) / CHAIN
    apply_s = _median_s(function_loop, None, inner, reps) / CHAIN
    view_s = _median_s(view_loop, None, inner, reps) / CHAIN
    with_chain = _median_s(backward, chain(CHAIN), inner, reps)
    root_only = _median_s(backward, chain(0), inner, reps)
    return {
        "module_s": module_s,
        "function_s": max(0.0, apply_s - view_s),
        "function_backward_s": max(0.0, (with_chain - root_only) / CHAIN),
    }
