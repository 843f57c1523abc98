"""Megatron-Core's ``jit_fuser`` calls in a layer: what a ``torch.compile``-d call costs the host.

Megatron-Core's ``jit_fuser`` is ``torch.compile`` on torch >= 2.2 (NVIDIA/Megatron-LM@d98e8a64
``megatron/core/jit.py`` l.16-33). Megatron-LM's training arguments turn the fusions on
(``megatron/training/arguments.py`` l.2892-2901: ``--no-bias-gelu-fusion``,
``--no-bias-swiglu-fusion``, ``--no-bias-dropout-fusion`` are ``store_false``), so a dense layer's
forward calls, per micro-batch (same commit):

* ``bias_dropout_add_fused_train`` twice (``fusions/fused_bias_dropout.py`` l.69-73; called by
  ``transformer_layer.py`` l.753-754 after the attention and l.1104-1105 after the MLP, under
  ``torch.enable_grad``): compiled calls **with autograd recording**; AOTAutograd runs each as an
  ``autograd.Function`` whose compiled backward the backward calls once;
* the activation (``mlp.py`` l.299-314): ``bias_gelu`` inside ``GeLUFunction.forward``
  (``fusions/fused_bias_gelu.py`` l.16-47) or ``bias_swiglu`` / ``swiglu`` inside
  ``SwiGLUFunction.forward`` (``fused_bias_swiglu.py`` l.15-41, l.160-245): a compiled call
  **without** autograd recording (inside a Function's forward), and one more
  (``bias_gelu_back``, ``bias_swiglu_back`` / ``swiglu_back``) in the Function's backward.

The layer's op counts stand for Megatron's eager / TorchScript pieces
(:data:`sim.compute.megatron_ops.BLOCK_FWD`: a bias-dropout-add is 4 forward and 4 backward ops,
the bias-GeLU one fusion group), and ``scripts/time_mcore_layer.py`` timed megatron-core with the
fusions off (``scripts/mcore_cpu.py`` l.86-90), so neither prices the compiled call. Its host
cost: pytorch/pytorch#122029 (jansel, 2024-03-16, ``benchmarks/dynamo/microbenchmarks/
overheads.py``, a one-op function): eager 5.6 us and compiled 39.0 us per call with
``requires_grad=True``, eager 4.6 us and compiled 14.0 us without: a compiled call costs one op
plus :data:`GRAD_CALL_S` (33.4 us) with autograd recording and :data:`NOGRAD_CALL_S` (9.4 us)
without (Dynamo's cache lookup and guards, AOTAutograd's runtime wrappers, Inductor's Python
wrapper). A micro-measurement on this project's loaded 2-core AMD EPYC VM (torch 2.13 CPU,
``measurements/host/jit_fuser.md``) gives 23.8 us (grad) and 8-13 us (no grad) beyond one op,
and 33.7 us for the compiled backward beyond a one-node backward.

So each compiled call is charged as one op plus that excess, in place of its eager pieces'
ops: a bias-dropout-add's 4 forward and 4 backward ops become 1 and 1 (:data:`OPS_TAKEN`); the
activation's op counts stay (one fusion group forward, two ops backward). The excess is Python
(CPython running Dynamo's and AOTAutograd's wrappers), so it is charged in Python's units, as
:mod:`sim.framework.mcore_python` does: forward in ``nn.Module``-call equivalents of the x86
presets' 2 us (pytorch/pytorch#50431), backward in Python-backward-node equivalents of their
7.5 us, which carry it to a Grace host by the Python ratio (1.135, ``gb200-nvl72.yaml``).
**Assumptions**: #122029's CPU (not stated) is the presets' x86 host, as for their other
published figures; a compiled backward costs the host what a compiled forward with autograd does
(the VM above measures it 1.4x: an underestimate, if anything); the compiled graphs' own kernel
launches are the one op charged; a MoE block's experts' activation (``weighted_bias_swiglu``
per expert group) is not counted, its two bias-dropout-adds are.
"""

from __future__ import annotations

from dataclasses import replace

from sim.compute.decoder_shape import base_kind
from sim.engine.stage_cost import StageCost

GRAD_CALL_S = 39.0e-6 - 5.6e-6
"""Seconds a ``torch.compile``-d call with autograd recording costs the x86 host beyond one eager
op (pytorch/pytorch#122029: 39.0 against 5.6 us)."""

NOGRAD_CALL_S = 14.0e-6 - 4.6e-6
"""The same without autograd recording (pytorch/pytorch#122029: 14.0 against 4.6 us)."""

X86_MODULE_S = 2e-6
"""The x86 presets' ``module`` (pytorch/pytorch#50431), the unit of the forward's excess."""

X86_FUNCTION_BACKWARD_S = 7.5e-6
"""The x86 presets' ``function_backward``, the unit of the backward's excess."""

CALLS = {"block": (2, 1), "mtp": (2, 1), "moe_block": (2, 0)}
"""``(compiled calls with autograd, compiled calls without)`` of one forward of a layer kind
(module doc): the two bias-dropout-adds and the activation; its backward calls as many again."""

OPS_TAKEN = 3.0
"""Forward (and backward) ops each compiled bias-dropout-add takes off the eager count: 4 -> 1."""


def jit_calls(kind: str) -> tuple[int, int]:
    """``(with autograd, without)`` compiled calls of one forward of a ``kind`` layer.

    Example:
        >>> jit_calls("block"), jit_calls("moe_block"), jit_calls("embedding")
        ((2, 1), (2, 0), (0, 0))
    """
    return CALLS.get(base_kind(kind), (0, 0))


def excess_units(kind: str) -> tuple[float, float, float]:
    """``(forward module-call equivalents, backward node equivalents, ops taken off each)`` of
    one ``kind`` layer's compiled calls (module doc).

    Example: a dense block: (2 x 33.4 + 9.4) / 2 = 38.1 module calls, 76.2 / 7.5 nodes, 6 ops.

    >>> [round(x, 2) for x in excess_units("block")]
    [38.1, 10.16, 6.0]
    """
    grad, nograd = jit_calls(kind)
    excess_s = grad * GRAD_CALL_S + nograd * NOGRAD_CALL_S
    return excess_s / X86_MODULE_S, excess_s / X86_FUNCTION_BACKWARD_S, grad * OPS_TAKEN


def with_jit_fuser(cost: StageCost, kinds: list[str]) -> StageCost:
    """``cost`` with each layer's compiled calls priced (:func:`excess_units` of its kind;
    ``kinds``: the stage's layer kinds in order): forward module calls and backward Python
    nodes raised, the eager ops they replace taken off. Unchanged without per-layer counts.

    Example:
        >>> c = StageCost(1.0, 2.0, 0.0, 0.0, fwd_layers=((0.5, 60.0, 1.0, 0.0, 0.0),) * 2,
        ...               bwd_layers=((1.0, 90.0, 8.0),) * 2)
        >>> d = with_jit_fuser(c, ["embedding", "block"])
        >>> [(x[1], round(x[2], 1)) for x in d.fwd_layers]
        [(60.0, 1.0), (54.0, 39.1)]
        >>> [(x[1], round(x[2], 2)) for x in d.bwd_layers]
        [(90.0, 8.0), (84.0, 18.16)]
    """
    if not cost.fwd_layers:
        return cost
    units = [excess_units(kind) for kind in kinds]
    units += [(0.0, 0.0, 0.0)] * (max(len(cost.fwd_layers), len(cost.bwd_layers)) - len(units))
    fwd = tuple(
        (sec, ops, mods + u[0], fns, te)
        for (sec, ops, mods, fns, te), u in zip(cost.fwd_layers, units, strict=False)
    )
    bwd = tuple(
        (sec, ops, nodes + u[1])
        for (sec, ops, nodes), u in zip(cost.bwd_layers, units, strict=False)
    )
    taken = [-min(u[2], x[1]) for u, x in zip(units, cost.fwd_layers, strict=False)]
    taken_bwd = [-min(u[2], x[1]) for u, x in zip(units, cost.bwd_layers, strict=False)]
    return replace(cost, fwd_layers=fwd, bwd_layers=bwd).with_layer_ops(taken, taken_bwd)


__all__ = [
    "CALLS",
    "GRAD_CALL_S",
    "NOGRAD_CALL_S",
    "OPS_TAKEN",
    "excess_units",
    "jit_calls",
    "with_jit_fuser",
]
