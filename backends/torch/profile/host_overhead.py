"""Measure what issuing one op costs this machine's host: the ``host_overhead`` of a hardware YAML.

:func:`measure_host_overhead` runs a transformer block of the kind the traces describe
(:class:`backends.torch.models.transformer.Block`, GPT, pre-norm) at a tiny size (hidden 64, 4
heads, 8 tokens, one sample), so that the device work of each op is negligible and the wall time is
the host's: Python, ``nn.Module`` calls, the dispatcher, autograd, and on GPUs the kernel launch.
It counts the block's ops as traces count them (:mod:`backends.torch.profile.op_count`) and divides:

* ``op_s``: seconds per op of a forward with autograd recording;
* ``nograd_op_s``: the same under ``torch.no_grad()`` (the first forward of a checkpointed
  layer);
* ``backward_op_s``: seconds per op of ``torch.autograd.backward`` (the autograd engine's
  per-node work and the ops its formulas dispatch), on a fresh forward;
* ``checkpoint_s``: ``torch.utils.checkpoint.checkpoint(f, x, use_reentrant=True)`` forward
  and backward of a one-op function ``f`` (Megatron's ``CheckpointFunction`` works the same
  way: save the RNG states, run ``f`` without autograd, and in the backward restore them, run
  ``f`` again with autograd and a nested backward) minus ``f`` run without and with autograd
  and its backward: the wrapper's own work per region.

Per op, the probe's ``nn.Module`` calls are taken out (their count times ``module_s``, measured
by :mod:`backends.torch.profile.python_overhead` with the Function figures), since the host model
charges module calls and ``autograd.Function`` applies separately (``module_s``,
``function_s``, ``function_backward_s``: :meth:`sim.hardware.host_ops.HostOverhead.calls_s`).

It also times one primitive op (``x * y`` on one-element tensors) with and without autograd,
for comparison with published figures (``primitive``).

On GPUs the host time is taken without synchronising inside the timed loop (the device keeps
up with ops this small; it is synchronised before each call). Each figure is the fastest of
``reps`` repetitions (other processes only ever add time to a host measurement, as
``timeit``'s documentation argues for its minimum); still, re-measure on an idle machine.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from backends.torch.models.transformer import Block, ModelSpec
from backends.torch.profile.layers import cpu_model_name
from backends.torch.profile.op_count import count_module_calls, count_ops, layer_ops
from backends.torch.profile.python_overhead import measure_python_overhead

TINY = ModelSpec(name="host-probe", kind="gpt", layers=1, hidden=64, heads=4, seq_len=8)
"""The probe block's size: small enough that its kernels take about a microsecond."""


def _host_seconds(
    run: Callable[[], object],
    dev: torch.device,
    *,
    setup: Callable[[], object] | None = None,
    inner: int = 20,
    reps: int = 5,
    warmup: int = 2,
) -> float:
    """Fastest host seconds of one ``run()`` over ``reps`` repetitions of ``inner`` calls, each
    after an untimed ``setup()`` (module doc)."""
    times = []
    for i in range(warmup + reps):
        total = 0.0
        for _ in range(inner):
            if setup is not None:
                setup()
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            t0 = time.perf_counter()
            run()
            total += time.perf_counter() - t0
        if i >= warmup:
            times.append(total / inner)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    return min(times)


def primitive_op_s(dev: torch.device, *, grad: bool, inner: int = 200, reps: int = 5) -> float:
    """Host seconds of ``x * y`` on one-element tensors, with or without autograd recording."""
    x = torch.ones(1, device=dev, requires_grad=grad)
    y = torch.ones(1, device=dev)

    def loop() -> None:
        for _ in range(inner):
            x * y

    return _host_seconds(loop, dev, inner=1, reps=reps) / inner


def measure_host_overhead(dev: torch.device, *, reps: int = 5, inner: int = 20) -> dict[str, Any]:
    """Host seconds per op of this machine (module doc).

    Returns:
        ``op_s``, ``nograd_op_s``, ``backward_op_s``, ``checkpoint_s`` (seconds), the op
        counts they were divided by (``fwd_ops``, ``nograd_ops``, ``bwd_ops``), the probe's
        ``modules`` (calls per forward, taken out of the forward figures), ``python``
        (:func:`~backends.torch.profile.python_overhead.measure_python_overhead`), the probe's shape
        and ``primitive`` (``{"grad_s", "nograd_s"}``).
    """
    torch.manual_seed(0)
    block = Block(TINY).to(dev)
    x = torch.randn(1, TINY.seq_len, TINY.hidden, device=dev)
    xg = x.detach().requires_grad_(True)
    fwd_ops, bwd_ops = layer_ops(block, x)
    with torch.no_grad():
        nograd_ops = count_ops(lambda: block(x))
    state: dict[str, torch.Tensor] = {}

    def forward() -> None:
        state["y"] = block(xg)

    def nograd() -> None:
        with torch.no_grad():
            block(x)

    def backward() -> None:
        state["y"].backward(torch.ones_like(state["y"]))

    def one_op(h: torch.Tensor) -> torch.Tensor:
        return h * 2.0

    def checkpointed() -> None:
        y = checkpoint(one_op, xg, use_reentrant=True)
        y.backward(torch.ones_like(y))

    def plain() -> None:
        with torch.no_grad():
            one_op(xg)
        y = one_op(xg)
        y.backward(torch.ones_like(y))

    def host_s(run: Callable[[], object], setup: Callable[[], object] | None = None) -> float:
        return _host_seconds(run, dev, setup=setup, inner=inner, reps=reps)

    fwd_s, nograd_s = host_s(forward), host_s(nograd)
    bwd_s = host_s(backward, setup=forward)
    extra = host_s(checkpointed) - host_s(plain)
    python = measure_python_overhead()
    modules = count_module_calls(nograd)
    calls_s = modules * python["module_s"]
    return {
        "op_s": max(0.0, fwd_s - calls_s) / fwd_ops,
        "nograd_op_s": max(0.0, nograd_s - calls_s) / nograd_ops,
        "backward_op_s": bwd_s / bwd_ops,
        "checkpoint_s": max(0.0, extra),
        "fwd_ops": fwd_ops,
        "nograd_ops": nograd_ops,
        "bwd_ops": bwd_ops,
        "modules": modules,
        "python": python,
        "probe": TINY.to_dict(),
        "primitive": {
            "grad_s": primitive_op_s(dev, grad=True, reps=reps),
            "nograd_s": primitive_op_s(dev, grad=False, reps=reps),
        },
    }


def host_overhead_yaml(measured: dict[str, Any], cpu: str, date: str) -> dict[str, Any]:
    """The ``host_overhead`` mapping of a hardware YAML from :func:`measure_host_overhead`."""

    def us(key: str) -> str:
        return f"{measured[key] * 1e6:.3f} us"

    prim, py = measured["primitive"], measured["python"]
    return {
        "op": us("op_s"),
        "nograd_op": us("nograd_op_s"),
        "backward_op": us("backward_op_s"),
        "checkpoint": us("checkpoint_s"),
        "module": f"{py['module_s'] * 1e6:.3f} us",
        "function": f"{py['function_s'] * 1e6:.3f} us",
        "function_backward": f"{py['function_backward_s'] * 1e6:.3f} us",
        "cpu": cpu,
        "source": (
            f"Measured by sim calibrate (backends.torch.profile.host_overhead) on {date}, torch "
            f"{torch.__version__}: host time of a tiny GPT block (hidden {TINY.hidden}, "
            f"{TINY.heads} heads, {TINY.seq_len} tokens) per op: forward "
            f"{measured['fwd_ops']} ops, no-grad forward {measured['nograd_ops']}, backward "
            f"{measured['bwd_ops']} (the forward figures less {measured['modules']} module "
            f"calls at the module figure); module, function, function_backward: "
            f"backends.torch.profile.python_overhead (empty nn.Module call; identity "
            f"autograd.Function apply less a view_as, and its backward node; medians); "
            f"checkpoint = reentrant torch.utils.checkpoint of one op, "
            f"forward and backward, minus the op's. One x*y op: {prim['grad_s'] * 1e6:.2f} us with "
            f"autograd, {prim['nograd_s'] * 1e6:.2f} us without."
        ),
    }


def describe_host_overhead(kind: str, hardware: dict[str, Any], date: str) -> dict[str, Any]:
    """Measure this machine (one thread) and put it into a calibrated hardware dict: as
    ``host_overhead`` on ``cuda``; on ``cpu`` into the description only (a CPU rank's profiled
    times already contain its ops' host time: host and device are one thread).

    Returns:
        :func:`measure_host_overhead`'s result.
    """
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        measured = measure_host_overhead(torch.device("cuda" if kind == "cuda" else "cpu"))
    finally:
        torch.set_num_threads(old)
    entry = host_overhead_yaml(measured, cpu_model_name(), date)
    if kind == "cuda":
        hardware["host_overhead"] = entry
    else:
        hardware["description"] += (
            f" Host time per op (not written as host_overhead: a CPU rank's profiled times "
            f"contain it): forward {entry['op']}, no-grad {entry['nograd_op']}, backward "
            f"{entry['backward_op']}, checkpoint wrapper {entry['checkpoint']} per region; "
            f"nn.Module call {entry['module']}, autograd.Function apply {entry['function']}, "
            f"its backward node {entry['function_backward']}."
        )
    return measured
