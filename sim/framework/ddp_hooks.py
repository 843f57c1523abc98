"""Megatron-Core's gradient hooks: one Python call per parameter tensor in each backward.

Megatron-Core's ``DistributedDataParallel`` registers a Python hook on every parameter's
gradient accumulator (NVIDIA/Megatron-LM@d98e8a64 ``megatron/core/distributed/
distributed_data_parallel.py``: ``grad_acc = param.expand_as(param).grad_fn.next_functions[0][0]``,
``grad_acc.register_hook(self._make_backward_post_hook(param))``). The autograd engine calls it
once per parameter tensor in every micro-batch's backward; the hook adds ``param.grad`` into
``param.main_grad`` when the weight-gradient GEMM has not (``--no-gradient-accumulation-fusion``),
drops ``param.grad`` and, with ``--overlap-grad-reduce``, marks the parameter ready in its
bucket. The ``add_`` is among the layer's counted backward ops
(:data:`sim.compute.megatron_ops.BLOCK_BWD`); the call itself is charged here as one Python
backward node (:attr:`~sim.hardware.host_ops.HostOverhead.function_backward_s`: the engine
calling a Python callable, an assumption that a hook costs what a Function's backward node
does). The parameter tensors per layer are :func:`sim.compute.megatron_ops.param_tensors` (a
GPT layer's; other layers counted as GPT's, its assumption). torch's own
``DistributedDataParallel`` hooks its reducer in C++ (no Python call) and is not charged.
"""

from __future__ import annotations

from dataclasses import replace

from sim.compute.decoder_shape import base_kind
from sim.compute.megatron_ops import param_tensors
from sim.engine.stage_cost import StageCost


def grad_hooks(kind: str) -> float:
    """Python gradient hooks of one layer of ``kind``: its parameter tensors.

    Example:
        >>> grad_hooks("block"), grad_hooks("embedding"), grad_hooks("head")
        (12.0, 2.0, 2.0)
    """
    kind = base_kind(kind)
    known = kind if kind in ("block", "embedding", "head") else "block"
    return float(sum(param_tensors(known)))


def with_grad_hooks(cost: StageCost, kinds: list[str]) -> StageCost:
    """``cost`` with each backward layer's Python nodes raised by its gradient hooks
    (:func:`grad_hooks`); ``kinds``: the stage's layer kinds in order. Unchanged without
    per-layer backward counts.

    Example:
        >>> c = StageCost(1.0, 2.0, 0.0, 0.0, bwd_layers=((1.0, 90.0, 8.0), (0.1, 8.0, 0.0)))
        >>> [n for _, _, n in with_grad_hooks(c, ["block", "embedding"]).bwd_layers]
        [20.0, 2.0]
    """
    if not cost.bwd_layers:
        return cost
    layers = tuple(
        (sec, ops, nodes + grad_hooks(kind))
        for (sec, ops, nodes), kind in zip(cost.bwd_layers, kinds, strict=False)
    )
    return replace(cost, bwd_layers=layers)


__all__ = ["grad_hooks", "with_grad_hooks"]
