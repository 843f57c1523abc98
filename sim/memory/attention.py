"""Which attention implementation a trace's activation bytes assume, and the flash default.

The attention core of a transformer block saves ``5*a*s^2*b`` bytes at 16 bit (softmax output,
dropout mask, dropout output; Korthikanti et al., arXiv:2205.05198, memory.md §2) under the
"math" implementation. FlashAttention and PyTorch's memory-efficient SDPA save no ``s^2`` scores
(only a ``4*a*s*b``-byte log-sum-exp, left out here), so those bytes are not stashed.

A trace says which one it measured or modelled with an ``attention`` attribute or a provenance
key ``attention`` (also under ``provenance.inputs``): its ``act_bytes`` are then used as
given. A trace that says nothing is assumed to use flash attention (modern PyTorch picks a fused
kernel): :func:`with_attention` removes each layer's ``attn_core_act_bytes`` from its stash and
records the assumption in the provenance.
"""

from __future__ import annotations

from dataclasses import replace

from sim.trace.schema import Trace

ATTENTION_IMPLS = ("flash", "math")
ASSUMED = "flash (assumed: the trace does not say)"


def trace_attention(trace: Trace) -> str | None:
    """The attention implementation the trace declares, or None."""
    value = getattr(trace, "attention", None)
    if value is None:
        prov = trace.provenance or {}
        inputs = prov.get("inputs")
        nested = inputs.get("attention") if isinstance(inputs, dict) else None
        value = prov.get("attention", nested)
    return str(value) if value is not None else None


def with_attention(trace: Trace) -> tuple[Trace, str]:
    """``(trace, attention)``: the trace unchanged when it declares its attention, else with
    flash attention assumed (module doc) and ``attention`` saying so."""
    declared = trace_attention(trace)
    if declared is not None:
        return trace, declared
    if not any(layer.attn_core_act_bytes for layer in trace.layers):
        return trace, ASSUMED
    layers = tuple(
        replace(
            layer,
            act_bytes=max(0.0, layer.act_bytes - layer.attn_core_act_bytes),
            attn_core_act_bytes=0.0,
        )
        if layer.attn_core_act_bytes
        else layer
        for layer in trace.layers
    )
    prov = {
        **trace.provenance,
        "attention": ASSUMED,
        "attention_note": "attn_core_act_bytes (5as^2b) removed from act_bytes: flash "
        "attention saves no s^2 scores (sim.memory.attention)",
    }
    return replace(trace, layers=layers, provenance=prov), ASSUMED
