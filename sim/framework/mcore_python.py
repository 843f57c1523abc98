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
torch Linear) pay the same; Mamba and MTP layers are not measured and get none.

**A MoE block** (``moe_block``: attention and a MoE MLP) is measured the same way by
``scripts/time_mcore_moe_layer.py`` (``measurements/host/mcore_moe_layer.md``): megatron-core
0.15.0's MoE layer (router with top-2 routing and the auxiliary loss, the ``allgather``
dispatcher, ``SequentialMLP``) with 2 and 8 experts beside the dense layer, in the same run, with
Python's automatic garbage collection off while timing, as Megatron-Bridge's ``manual_gc=True``
runs a step. Its forward's difference is 124.0 forward-op equivalents of that CPU (2.78 us each)
that do not grow with the experts (plus 3.3 per ``SequentialMLP`` expert, a loop the grouped
experts do not run; the dense layer's 52.1 in the same run). That is Python, so it is charged
in Python's unit, as :data:`MOE_BLOCK_PYTHON_CALLS` module-call equivalents of the same CPU
(0.55 us each) priced at the host's ``module_s`` (2 us on the x86 presets: 1.25 ms per MoE
block forward; 2.27 us on Grace, whose CPython runs 1.135x the x86 reference's:
``gb200-nvl72.yaml``), instead of the dense block's forward ops, which a Grace preset prices at
its C++ dispatch figure (3x). Assumptions: the ``alltoall`` dispatcher (it builds a CUDA
stream at construction and cannot run on the CPU) and the fused router and permutation that
Megatron-Bridge's MoE recipes run carry as much Python as the measured unfused ``allgather``
path; one clean run on a loaded 2-core VM. A hybrid's MoE-only ``moe``
layer (no attention) is not measured and gets none.
"""

from __future__ import annotations

from dataclasses import replace

from sim.compute.decoder_shape import base_kind
from sim.engine.stage_cost import StageCost

LAYER_PYTHON_OPS = 40.0
"""Megatron-Core's Python per dense layer forward, in forward-op equivalents of the same host
(module doc: the fastest of five runs of ``scripts/time_mcore_layer.py``; 40-90 over the
five)."""

MOE_BLOCK_PYTHON_CALLS = 124.0 * 2.78 / 0.55
"""Megatron-Core's Python per MoE block forward, in module-call equivalents: 124.0 forward-op
equivalents (2.78 us each) of the MoE block's part that does not grow with the experts, over the
same CPU's module call (0.55 us), one run of ``scripts/time_mcore_moe_layer.py`` (module doc;
``measurements/host/mcore_moe_layer.md``)."""

MEASURED_OPS = {"block": LAYER_PYTHON_OPS}
"""Python forward-op equivalents by the layer kinds the dense measurement stands for (a dense
attention + MLP block)."""
MEASURED_CALLS = {"moe_block": MOE_BLOCK_PYTHON_CALLS}
"""Python module-call equivalents by the layer kinds the MoE measurement stands for (an
attention + MoE block)."""


def layer_python_ops(kind: str) -> float:
    """Forward-op equivalents of Megatron-Core's Python in one forward of a ``kind`` layer.

    Example:
        >>> layer_python_ops("block"), layer_python_ops("embedding"), layer_python_ops("moe")
        (40.0, 0.0, 0.0)
        >>> layer_python_ops("moe_block")
        0.0
    """
    return MEASURED_OPS.get(base_kind(kind), 0.0)


def layer_python_calls(kind: str) -> float:
    """Module-call equivalents of Megatron-Core's Python in one forward of a ``kind`` layer
    (the MoE block's, module doc; 0 for the others).

    Example:
        >>> round(layer_python_calls("moe_block"), 1), layer_python_calls("block")
        (626.8, 0.0)
    """
    return MEASURED_CALLS.get(base_kind(kind), 0.0)


def with_mcore_python(cost: StageCost, kinds: list[str]) -> StageCost:
    """``cost`` with each forward layer's ops raised by :func:`layer_python_ops` of its kind
    (``kinds``: the stage's layer kinds in order) and the stage's ``fwd_ops`` by their sum, and
    its module calls by :func:`layer_python_calls`. Unchanged without per-layer forward counts.

    Example:
        >>> c = StageCost(1.0, 2.0, 0.0, 0.0, fwd_layers=((0.5, 10.0, 1.0, 0.0, 0.0),) * 2)
        >>> [x[1] for x in with_mcore_python(c, ["embedding", "block"]).fwd_layers]
        [10.0, 50.0]
    """
    if not cost.fwd_layers:
        return cost
    cost = cost.with_layer_ops([layer_python_ops(kind) for kind in kinds])
    calls = [layer_python_calls(kind) for kind in kinds]
    calls += [0.0] * (len(cost.fwd_layers) - len(calls))
    layers = tuple(
        (sec, ops, mods + x, fns, te)
        for (sec, ops, mods, fns, te), x in zip(cost.fwd_layers, calls, strict=False)
    )
    return replace(cost, fwd_layers=layers)


__all__ = [
    "LAYER_PYTHON_OPS",
    "MOE_BLOCK_PYTHON_CALLS",
    "layer_python_calls",
    "layer_python_ops",
    "with_mcore_python",
]
