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
323 us against 210 us modelled (run 3; other processes only add time, so the fastest run is
taken, as ``sim calibrate`` does), is 113 us more. A cProfile of the forward puts 45 % of its time in C functions (the ops the
model counts) and the rest in Python files (``megatron/core`` 27 %, ``torch/nn/modules/
module.py`` 13 %): the excess is Python, so it is charged in Python's unit, as the MoE block's
is below:
:data:`LAYER_PYTHON_CALLS` = 113 / 0.60 = 188.3 module-call equivalents of that CPU (its module
call in the same run, 0.60 us) priced at the host's ``module_s`` in every forward of a layer,
first or recomputed (2 us on the x86 presets: 377 us per dense block forward; 2.27 us on
Grace, whose CPython runs 1.135x the x86 reference's, ``gb200-nvl72.yaml``: 427 us). Until
2026-11-30 it was charged as 40 forward-op equivalents at the host's ``op_s``, which prices
Python at a Grace preset's C++ dispatch figure (3.03x the x86 one: 1.19 ms per block forward);
on the x86 presets the two agree within 4 % (40 x 9.8 = 392 us). Assumptions: a dense block of
any model family (GPT, BERT, T5) and a Transformer Engine layer (TE replaces
``tensor_parallel/layers.py``, about a fifth of the Python, and
:attr:`~sim.hardware.host_ops.HostOverhead.te_module_s` charges TE's own beyond a torch Linear)
pay the same; Mamba and MTP layers are not measured and get none.

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
block forward; 2.27 us on Grace: 1.42 ms). Assumptions: the ``alltoall`` dispatcher (it builds a CUDA
stream at construction and cannot run on the CPU) and the fused router and permutation that
Megatron-Bridge's MoE recipes run carry as much Python as the measured unfused ``allgather``
path; one clean run on a loaded 2-core VM. A hybrid's MoE-only ``moe``
layer (no attention) is not measured and gets none.
"""

from __future__ import annotations

from dataclasses import replace

from sim.compute.decoder_shape import base_kind
from sim.engine.stage_cost import StageCost

LAYER_PYTHON_CALLS = (323.0 - 210.0) / 0.60
"""Megatron-Core's Python per dense layer forward, in module-call equivalents: the fastest
forward of five runs of ``scripts/time_mcore_layer.py``, 323 us against 210 us of counted ops,
module calls and Function nodes, over the same CPU's module call in that run (0.60 us)
(module doc; ``measurements/host/mcore_layer.md`` run 3; the five runs' excess spreads 113-250
us)."""

MOE_BLOCK_PYTHON_CALLS = 124.0 * 2.78 / 0.55
"""Megatron-Core's Python per MoE block forward, in module-call equivalents: 124.0 forward-op
equivalents (2.78 us each) of the MoE block's part that does not grow with the experts, over the
same CPU's module call (0.55 us), one run of ``scripts/time_mcore_moe_layer.py`` (module doc;
``measurements/host/mcore_moe_layer.md``)."""

MEASURED_CALLS = {"block": LAYER_PYTHON_CALLS, "moe_block": MOE_BLOCK_PYTHON_CALLS}
"""Python module-call equivalents by the layer kinds each measurement stands for (the dense
measurement: an attention + MLP block; the MoE one: an attention + MoE block)."""


def layer_python_calls(kind: str) -> float:
    """Module-call equivalents of Megatron-Core's Python in one forward of a ``kind`` layer
    (the dense and the MoE block's, module doc; 0 for the others).

    Example:
        >>> round(layer_python_calls("moe_block"), 1), round(layer_python_calls("block"), 1)
        (626.8, 188.3)
        >>> layer_python_calls("embedding"), layer_python_calls("moe")
        (0.0, 0.0)
    """
    return MEASURED_CALLS.get(base_kind(kind), 0.0)


def with_mcore_python(cost: StageCost, kinds: list[str]) -> StageCost:
    """``cost`` with each forward layer's module calls raised by :func:`layer_python_calls` of
    its kind (``kinds``: the stage's layer kinds in order). Unchanged without per-layer forward
    counts.

    Example:
        >>> c = StageCost(1.0, 2.0, 0.0, 0.0, fwd_layers=((0.5, 10.0, 1.0, 0.0, 0.0),) * 2)
        >>> [round(x[2], 1) for x in with_mcore_python(c, ["embedding", "block"]).fwd_layers]
        [1.0, 189.3]
    """
    if not cost.fwd_layers:
        return cost
    calls = [layer_python_calls(kind) for kind in kinds]
    calls += [0.0] * (len(cost.fwd_layers) - len(calls))
    layers = tuple(
        (sec, ops, mods + x, fns, te)
        for (sec, ops, mods, fns, te), x in zip(cost.fwd_layers, calls, strict=False)
    )
    return replace(cost, fwd_layers=layers)


__all__ = [
    "LAYER_PYTHON_CALLS",
    "MOE_BLOCK_PYTHON_CALLS",
    "layer_python_calls",
    "with_mcore_python",
]
