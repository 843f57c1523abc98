"""Time one Megatron-Core GPT layer's host work on this CPU against pipesim's host model.

The question (issue 26 item 7, the functional tests' A100 rows): does pipesim's per-layer host
charge, ops x ``op_s`` + module calls x ``module_s`` + Function applies x ``function_s`` in the
forward and ops x ``backward_op_s`` + Python backward nodes x ``function_backward_s`` in the
backward (:class:`sim.hardware.host_ops.HostOverhead`), leave out Python that Megatron-Core's
layer runs around its ops? Both sides are taken on the same CPU, so the CPU's speed cancels:

* measured: a ``GPTModel`` of megatron-core 0.15.0 (PyPI, ``get_gpt_layer_local_spec``, one
  rank over gloo, the CPU build of torch; the set-up and CPU-only changes of
  ``scripts/mcore_cpu.py``) with 1 and with 9 layers, hidden 64, 4 heads, 1 sample of 8
  tokens, so that each op's kernel takes about a microsecond and the wall time is the host's;
  one layer's forward and backward seconds are the difference of the two models over 8, each
  the fastest of ``REPS`` runs, the smallest difference over ``ROUNDS`` (other processes only add
  time);
* modelled: the same layer's counted ops, module calls and Function nodes (a
  ``TorchDispatchMode``, a global forward pre-hook, the autograd graph) priced with the figures
  ``sim calibrate`` measures on this CPU (:func:`backends.torch.profile.host_overhead.
  measure_host_overhead`: per op of pipesim's own probe block, per module call, per Function;
  each the smallest over ``ROUNDS`` calibrations).

Not measured: CUDA's kernel launch and caching allocator (no GPU here), Transformer Engine's
modules (they need CUDA), the CUDA RNG tracker's ``fork`` (a null context here). It needs
megatron-core, which pipesim does not depend on:

    pip install --target /tmp/mcore --no-deps megatron-core==0.15.0
    MCORE=/tmp/mcore python scripts/time_mcore_layer.py

Figures of a run are in ``measurements/host/mcore_layer.md``. Not run by the tests.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
from mcore_cpu import OpCounter, cpu_host_overhead, module_calls, python_nodes, start, tiny_gpt  # noqa: E402

torch.set_num_threads(1)
start("29535")
REPS = 60
"""Runs per model; the first 5 are warm-up."""
ROUNDS = 3
"""Calibrations and timings, each figure the smallest over the rounds (a shared machine)."""
LAYERS = (1, 9)
"""The two models whose difference is taken (8 layers)."""


_B, _S = 1, 8
_TOKENS = torch.randint(0, 128, (_B, _S))
_POS = torch.arange(_S).unsqueeze(0)
_MASK = torch.ones(_B, 1, _S, _S, dtype=torch.bool).triu(1)
_LABELS = torch.randint(0, 128, (_B, _S))


def counts(layers: int) -> tuple[int, int, int, int]:
    """``(forward ops, backward ops, module calls, Function nodes)`` of a model."""
    m = tiny_gpt(layers)
    with module_calls() as calls:  # removed before anything is timed
        with OpCounter() as fwd:
            loss = m(_TOKENS, _POS, _MASK, labels=_LABELS).float().mean()
    functions = python_nodes(loss)
    with OpCounter() as bwd:
        loss.backward()
    return fwd.n, bwd.n, calls[0], functions


def host_seconds(layers: int) -> tuple[float, float]:
    """Fastest forward and backward wall seconds of a model over ``REPS`` runs."""
    m, fwd, bwd = tiny_gpt(layers), [], []
    for i in range(REPS):
        t0 = time.perf_counter()
        loss = m(_TOKENS, _POS, _MASK, labels=_LABELS).float().mean()
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        if i >= 5:
            fwd.append(t1 - t0)
            bwd.append(t2 - t1)
    return min(fwd), min(bwd)


def main() -> None:
    host = cpu_host_overhead(ROUNDS)
    lo, hi = (counts(n) for n in LAYERS)
    span = LAYERS[1] - LAYERS[0]
    fwd_ops, bwd_ops, modules, functions = ((h - low) / span for h, low in zip(hi, lo, strict=True))
    rounds = [[host_seconds(n) for n in LAYERS] for _ in range(ROUNDS)]
    fwd_s = min(hi[0] - lo[0] for lo, hi in rounds) / span
    bwd_s = min(hi[1] - lo[1] for lo, hi in rounds) / span
    model_fwd = host.forward_s(fwd_ops) + host.calls_s(modules, functions)
    model_bwd = host.backward_s(bwd_ops) + host.calls_s(modules, functions, backward=True)
    us = 1e6
    print(f"torch {torch.__version__}; this CPU's figures (sim calibrate): op {host.op_s * us:.2f} "
          f"us, backward op {host.backward_op_s * us:.2f}, module {host.module_s * us:.2f}, "
          f"function {host.function_s * us:.2f}, function backward "
          f"{host.function_backward_s * us:.2f}")  # fmt: skip
    print(f"one layer: {fwd_ops:.1f} forward ops, {bwd_ops:.1f} backward ops, {modules:.0f} "
          f"module calls, {functions:.0f} Function nodes")  # fmt: skip
    for name, got, model in (("forward", fwd_s, model_fwd), ("backward", bwd_s, model_bwd)):
        print(f"{name:8s} measured {got * us:6.0f} us  modelled {model * us:6.0f} us  "
              f"measured / modelled {got / model:.2f}")  # fmt: skip
    total, model = fwd_s + bwd_s, model_fwd + model_bwd
    print(f"layer    measured {total * us:6.0f} us  modelled {model * us:6.0f} us  "
          f"measured / modelled {total / model:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
