"""Count and time the part of a Megatron-Core MoE layer that a ``moe_router`` CUDA graph captures.

With ``cuda_graph_impl=transformer_engine`` and ``cuda_graph_scope`` holding ``moe_router``
(and ``moe_preprocess``), a MoE layer's graph runs ``_forward_mlp`` up to the end of the
router and the dispatcher's preprocess and returns early (NVIDIA/Megatron-LM@2edffadb
``megatron/core/transformer/transformer_layer.py`` 1034-1069 ``_te_cuda_graph_capture``,
821-833 the early return after ``self.mlp``; ``moe/moe_layer.py`` 401-429 ``route`` and
``preprocess`` under ``maybe_skip_or_early_return_by_cudagraph``, 556-573): the pre-MLP norm,
``route`` (the router) and ``preprocess`` (``dispatch_preprocess``), forward and backward
(TE's ``make_graphed_callables`` captures both). The replay then runs the rest of the MoE layer
eagerly (1109-1171). This script counts that region in the configuration of
``scripts/count_mcore_ops.py`` (megatron-core 0.15.0, ``get_gpt_layer_local_spec``, top-2
routing with the auxiliary loss, the ``allgather`` dispatcher, whose ``dispatch_preprocess`` is
a ``view``), so that its counts are in the units of :data:`sim.compute.mcore_ops.MOE_BLOCK`:
ATen ops of the forward and of the backward (the root gradients made outside the count), module
calls and Python ``autograd.Function`` nodes; and times its forward and backward on this CPU
(fastest of ``REPS`` runs, the smallest of ``ROUNDS``, Python's automatic garbage collection
off as Megatron-Bridge's ``manual_gc``) against the same counts priced with ``sim calibrate``'s
figures of this CPU, the method of ``scripts/time_mcore_moe_layer.py``: the forward's
difference is the region's own Python in forward-op equivalents of this CPU.

Run (megatron-core is not a dependency of pipesim):

    pip install --target /tmp/mcore --no-deps megatron-core==0.15.0
    MCORE=/tmp/mcore python scripts/count_moe_router_region.py

Figures of a run: ``measurements/host/mcore_moe_router_region.md``. Not run by the tests.
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
start("29541")
REPS, ROUNDS = 200, 3
_S, _B, _H = 8, 1, 64


def _layer(experts: int):
    return moe_gpt(1, experts).decoder.layers[0]


def region(layer, x: torch.Tensor):
    """The captured region: pre-MLP norm, router and the dispatcher's preprocess."""
    ln = layer.pre_mlp_layernorm(x)
    hidden, probs, _ = layer.mlp.router_and_preprocess(ln)
    return hidden, probs


def counts(experts: int) -> tuple[int, int, int, int]:
    """``(forward ops, backward ops, module calls, Function nodes)`` of the region."""
    layer = _layer(experts)
    x = torch.randn(_S, _B, _H, requires_grad=True)
    with module_calls() as calls, OpCounter() as fwd:
        hidden, probs = region(layer, x)
    functions = python_nodes(probs) + python_nodes(hidden.sum())
    grads = [torch.ones_like(hidden), torch.ones_like(probs)]
    with OpCounter() as bwd:
        torch.autograd.backward([hidden, probs], grads)
    print(f"  forward ops by name: {dict(sorted(fwd.counts.items()))}")
    print(f"  backward ops by name: {dict(sorted(bwd.counts.items()))}")
    return fwd.n, bwd.n, calls[0], functions


def seconds(experts: int) -> tuple[float, float]:
    """Fastest forward and backward wall seconds of the region over ``REPS`` runs."""
    layer, fwd, bwd = _layer(experts), [], []
    x = torch.randn(_S, _B, _H, requires_grad=True)
    gc.collect()
    gc.disable()
    for i in range(REPS):
        moe_utils.get_moe_layer_wise_logging_tracker().clear()
        t0 = time.perf_counter()
        hidden, probs = region(layer, x)
        t1 = time.perf_counter()
        grads = [torch.ones_like(hidden), torch.ones_like(probs)]
        t2 = time.perf_counter()
        torch.autograd.backward([hidden, probs], grads)
        t3 = time.perf_counter()
        if i >= 20:
            fwd.append(t1 - t0)
            bwd.append(t3 - t2)
    gc.enable()
    return min(fwd), min(bwd)


def main() -> None:
    host = cpu_host_overhead(ROUNDS)
    us = 1e6
    print(describe_host(host))
    for e in (2, 8):
        fwd_ops, bwd_ops, modules, functions = counts(e)
        runs = [seconds(e) for _ in range(ROUNDS)]
        fwd_s, bwd_s = min(r[0] for r in runs), min(r[1] for r in runs)
        model_fwd, model_bwd = modelled_s(host, fwd_ops, bwd_ops, modules, functions)
        print(f"experts {e}: {fwd_ops} forward ops, {bwd_ops} backward ops, {modules} module "
              f"calls, {functions} Function nodes")  # fmt: skip
        for name, got, model in (("forward", fwd_s, model_fwd), ("backward", bwd_s, model_bwd)):
            print(f"  {name:8s} measured {got * us:6.1f} us  modelled {model * us:6.1f} us  "
                  f"difference {(got - model) / host.op_s:+.1f} forward ops "
                  f"({(got - model) / host.module_s:+.1f} module calls)")  # fmt: skip


if __name__ == "__main__":
    main()
