"""Time one Megatron-Core MoE layer's host work on this CPU against pipesim's host model.

``scripts/time_mcore_layer.py`` for a MoE block: the same method (both sides on one CPU, so
its speed cancels), with each layer's MLP a MoE of ``E`` local experts: megatron-core 0.15.0's
``get_gpt_layer_local_spec(num_experts=E)`` (router with top-2 routing and the auxiliary
load-balancing loss, the ``allgather`` token dispatcher: the ``alltoall`` one builds a CUDA
stream at construction; ``SequentialMLP`` experts, ``add_bias_linear=False``), the counting
configuration of ``scripts/count_mcore_ops.py``, hidden 64, 1 sample of 8 tokens.

measured: one layer's forward and backward seconds, the difference of a 9-layer and a 1-layer
model over 8, each the fastest of ``REPS`` runs, the smallest difference over ``ROUNDS``;
modelled: the same layer's counted ops, module calls and Function nodes priced with the figures
``sim calibrate`` measures on this CPU (smallest of ``ROUNDS``). Printed per ``E`` in
:data:`EXPERTS`: measured, modelled and their difference in forward ops of this CPU; the
difference's part that does not grow with ``E`` (the fit of the two ``E``) is the MoE block's
own Python (router, dispatcher, the layer around them), the part per expert is
``SequentialMLP``'s loop (Megatron-Bridge's runs use ``TEGroupedMLP``: not that loop).

Run (megatron-core is not a dependency of pipesim):

    pip install --target /tmp/mcore --no-deps megatron-core==0.15.0
    MCORE=/tmp/mcore [MANUAL_GC=1] python scripts/time_mcore_moe_layer.py

(``MANUAL_GC=1``: Python's automatic garbage collection off while timing, as Megatron-Bridge's
``manual_gc=True`` runs a step.)

Figures of a run are in ``measurements/host/mcore_moe_layer.md``. Not run by the tests.
"""

from __future__ import annotations

import gc
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from mcore_cpu import (  # noqa: E402
    OpCounter,
    cpu_host_overhead,
    describe_host,
    modelled_s,
    module_calls,
    moe_gpt,
    python_nodes,
    start,
)
from megatron.core.transformer.moe import moe_utils  # noqa: E402

torch.set_num_threads(1)
start("29536")
REPS = 40
"""Runs per model; the first 5 are warm-up."""
ROUNDS = 3
"""Calibrations and timings, each figure the smallest over the rounds (a shared machine)."""
LAYERS = (1, 9)
"""The two models whose difference is taken (8 layers)."""
EXPERTS = (0, 2, 8)
"""Local experts of the two MoE configurations (0: the dense layer, as a reference taken in the
same run)."""

_B, _S = 1, 8
_TOKENS = torch.randint(0, 128, (_B, _S))
_POS = torch.arange(_S).unsqueeze(0)
_MASK = torch.ones(_B, 1, _S, _S, dtype=torch.bool).triu(1)
_LABELS = torch.randint(0, 128, (_B, _S))


def counts(layers: int, experts: int) -> tuple[int, int, int, int]:
    """``(forward ops, backward ops, module calls, Function nodes)`` of a model."""
    m = moe_gpt(layers, experts)
    with module_calls() as calls:  # removed before anything is timed
        with OpCounter() as fwd:
            loss = m(_TOKENS, _POS, _MASK, labels=_LABELS).float().mean()
    functions = python_nodes(loss)
    with OpCounter() as bwd:
        loss.backward()
    return fwd.n, bwd.n, calls[0], functions


def host_seconds(layers: int, experts: int) -> tuple[float, float]:
    """Fastest forward and backward wall seconds of a model over ``REPS`` runs."""
    m, fwd, bwd = moe_gpt(layers, experts), [], []
    if os.environ.get("MANUAL_GC"):
        gc.collect()
        gc.disable()  # Megatron-Bridge's manual_gc: no automatic collection inside a step
    for i in range(REPS):
        moe_utils.get_moe_layer_wise_logging_tracker().clear()
        t0 = time.perf_counter()
        loss = m(_TOKENS, _POS, _MASK, labels=_LABELS).float().mean()
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        if i >= 5:
            fwd.append(t1 - t0)
            bwd.append(t2 - t1)
    gc.enable()
    return min(fwd), min(bwd)


def main() -> None:
    host = cpu_host_overhead(ROUNDS)
    us = 1e6
    print(describe_host(host))
    span = LAYERS[1] - LAYERS[0]
    extra = {}
    for e in EXPERTS:
        lo, hi = (counts(n, e) for n in LAYERS)
        fwd_ops, bwd_ops, modules, functions = (
            (h - low) / span for h, low in zip(hi, lo, strict=True)
        )
        rounds = [[host_seconds(n, e) for n in LAYERS] for _ in range(ROUNDS)]
        fwd_s = min(hi[0] - lo[0] for lo, hi in rounds) / span
        bwd_s = min(hi[1] - lo[1] for lo, hi in rounds) / span
        model_fwd, model_bwd = modelled_s(host, fwd_ops, bwd_ops, modules, functions)
        extra[e] = (fwd_s - model_fwd) / host.op_s
        print(f"experts {e}: {fwd_ops:.1f} forward ops, {bwd_ops:.1f} backward ops, {modules:.0f} "
              f"module calls, {functions:.0f} Function nodes")  # fmt: skip
        for name, got, model in (("forward", fwd_s, model_fwd), ("backward", bwd_s, model_bwd)):
            print(f"  {name:8s} measured {got * us:6.0f} us  modelled {model * us:6.0f} us  "
                  f"measured / modelled {got / model:.2f}  difference "
                  f"{(got - model) / host.op_s:+.1f} forward ops")  # fmt: skip
    (e0, x0), (e1, x1) = sorted((e, x) for e, x in extra.items() if e)
    slope = (x1 - x0) / (e1 - e0)
    print(f"forward difference: {x0 - slope * e0:+.1f} forward ops fixed, {slope:+.2f} per expert"
          f" (dense layer: {extra.get(0, float('nan')):+.1f})")  # fmt: skip


if __name__ == "__main__":
    main()
