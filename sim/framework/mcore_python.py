"""Megatron-Core's Python around a layer's ops: what its forward costs the host beyond them.

A Megatron-Core layer's forward runs Python besides the ops, module calls and ``autograd.
Function`` applies that its trace counts (:class:`~sim.hardware.host_ops.HostOverhead` prices
those): ``TransformerLayer._forward_attention`` / ``_forward_mlp``, the spec'd submodules'
argument plumbing, ``make_viewless_tensor``, the parallel-state and config queries of
``tensor_parallel/layers.py``, the bias-dropout-add closures (NVIDIA/Megatron-LM
``megatron/core/transformer/``; a cProfile of the forward puts about a quarter of its time in
``megatron/core`` files, a fifth of that in ``tensor_parallel/layers.py``).

Measured, not read: ``scripts/time_mcore_layer.py`` times one dense GPT layer of megatron-core
0.15.0 (``get_gpt_layer_local_spec``, torch 2.13 on the CPU, tiny tensors so that the wall time
is the host's) and prices the same layer's counted ops, module calls and Function nodes with
the figures ``sim calibrate`` measures on the same CPU
(:func:`backends.torch.profile.host_overhead.measure_host_overhead`). In five runs on a
loaded 2-core VM (``measurements/host/mcore_layer.md``) the backward is 0.89-1.13x the model
(the autograd engine's C++ dispatches it) and the forward 1.54-2.20x; the fastest forward,
323 us against 210 us modelled, is 113 us more, 40 times the same CPU's forward op (2.79 us;
other processes only add time, so the fastest run is taken, as ``sim calibrate`` does).
:data:`LAYER_PYTHON_OPS` charges that as
forward-op equivalents at the host's ``op_s`` (``nograd_op_s`` in a forward without autograd
recording) in every forward of a layer, first or recomputed, so it scales between hosts as a
forward op does (an assumption: the presets' ``op_s`` includes a kernel launch, which plain
Python does not pay). Assumptions: a dense block of any model family (GPT, BERT, T5) and a
Transformer Engine layer (TE replaces ``tensor_parallel/layers.py``, about a fifth of the
Python, and :attr:`~sim.hardware.host_ops.HostOverhead.te_module_s` charges TE's own beyond a
torch Linear) pay the same; MoE, Mamba and MTP layers are not measured and get none.
"""

from __future__ import annotations

from sim.compute.decoder_shape import base_kind
from sim.engine.stage_cost import StageCost

LAYER_PYTHON_OPS = 40.0
"""Megatron-Core's Python per dense layer forward, in forward-op equivalents of the same host
(module doc: the fastest of five runs of ``scripts/time_mcore_layer.py``; 40-90 over the
five)."""

MEASURED_KINDS = frozenset({"block"})
"""Layer kinds the measurement stands for (a dense attention + MLP block)."""


def layer_python_ops(kind: str) -> float:
    """Forward-op equivalents of Megatron-Core's Python in one forward of a ``kind`` layer.

    Example:
        >>> layer_python_ops("block"), layer_python_ops("embedding"), layer_python_ops("moe")
        (40.0, 0.0, 0.0)
    """
    return LAYER_PYTHON_OPS if base_kind(kind) in MEASURED_KINDS else 0.0


def with_mcore_python(cost: StageCost, kinds: list[str]) -> StageCost:
    """``cost`` with each forward layer's ops raised by :func:`layer_python_ops` of its kind
    (``kinds``: the stage's layer kinds in order) and the stage's ``fwd_ops`` by their sum.
    Unchanged without per-layer forward counts.

    Example:
        >>> c = StageCost(1.0, 2.0, 0.0, 0.0, fwd_layers=((0.5, 10.0, 1.0, 0.0, 0.0),) * 2)
        >>> [x[1] for x in with_mcore_python(c, ["embedding", "block"]).fwd_layers]
        [10.0, 50.0]
    """
    if not cost.fwd_layers:
        return cost
    return cost.with_layer_ops([layer_python_ops(kind) for kind in kinds])


__all__ = ["LAYER_PYTHON_OPS", "layer_python_ops", "with_mcore_python"]
