"""What one micro-batch's activation stash holds under a recompute choice (memory.md §2, §5.1).

Per layer ``i`` of a stage, with ``act_i`` its stash and ``in_i`` its input:

* **keep**: ``act_i`` stays until the backward;
* **full** checkpoint (Megatron ``recompute_granularity=full``): only the input stays,
  ``min(in_i, act_i)`` (``2sbh`` for a transformer block, Korthikanti et al.); the layer's
  forward runs again before its backward, rebuilding ``act_i - kept`` bytes, one layer at a
  time: ``fwd_s`` less the kernels that run only with gradients, which the checkpointed first
  forward skips (:attr:`~sim.trace.schema.LayerProfile.full_recompute_s`);
* **selective** (``core_attn``): the attention core's ``5as^2b`` bytes (``attn_core_act_bytes``)
  are dropped and recomputed, costing the attention core's share of the forward,
  ``fwd_s * attn_core_flops / flops`` (``4bs^2h`` of ``24bsh^2 + 4bs^2h``). Layers without these
  trace fields keep everything.
* **modules** (Megatron-Core's ``recompute_modules``, torchtitan's per-op SAC ``sac``): each
  chosen module's dropped bytes and re-run seconds, from the layer's
  :attr:`~sim.trace.schema.LayerProfile.recompute_parts` (:mod:`sim.compute.recompute_modules`);
  ``core_attn`` on a layer with ``attn_core_act_bytes`` is the selective case above; ``moe``
  includes ``moe_act``; ``fused_group_mlp`` (offloaded, not recomputed) drops the fused grouped
  MLP's saved tensors, ``moe_act``'s output among them. A layer without parts keeps everything.

The host re-issues the recomputed ops (:mod:`sim.hardware.host_ops`): a full layer's ``fwd_ops``; for
selective recompute the attention core's share of them, taken as its share of the forward's
seconds (an assumption: a trace does not say which ops are the core's).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sim.memory.context import StageContext


@dataclass(frozen=True)
class Stash:
    """One micro-batch's stash on a stage under a recompute choice.

    Attributes:
        act_bytes: the stash with no policy.
        kept_bytes: bytes that stay after the forward (before any swap).
        transient_bytes: largest dropped bytes of one layer (live during F and recompute).
        recompute_s: forward seconds repeated before the backward.
        recompute_ops: forward ops the host issues again for it (module doc).
        full_layers: indices (within the stage) of fully checkpointed layers.
        selective_layers: layers whose attention core is dropped.
        label: ``keep``, ``selective``, ``full:K`` or ``full:K+selective``.
    """

    act_bytes: float
    kept_bytes: float
    transient_bytes: float
    recompute_s: float
    full_layers: tuple[int, ...] = ()
    selective_layers: tuple[int, ...] = ()
    label: str = "keep"
    recompute_ops: float = 0.0

    @property
    def dropped_bytes(self) -> float:
        return self.act_bytes - self.kept_bytes


def _attn_core(layer) -> tuple[float, float]:
    """``(bytes dropped, seconds recomputed)`` of selective recompute of one layer."""
    if not layer.attn_core_act_bytes or not layer.attn_core_flops or not layer.flops:
        return 0.0, 0.0
    dropped = min(layer.attn_core_act_bytes, layer.act_bytes)
    return dropped, layer.fwd_s * layer.attn_core_flops / layer.flops


def _modules(layer, modules: frozenset[str]) -> tuple[float, float]:
    """``(bytes dropped, seconds recomputed)`` of recomputing ``modules`` of one layer."""
    chosen = modules - {"moe_act", "fused_group_mlp"} if "moe" in modules else modules
    drop = secs = 0.0
    if "core_attn" in chosen and layer.attn_core_act_bytes:
        drop, secs = _attn_core(layer)
        chosen = chosen - {"core_attn"}
    for name, nbytes, seconds in layer.recompute_parts:
        if name == "moe_act" and "fused_group_mlp" in chosen:
            nbytes = 0.0  # its output is not saved: counted in the offloaded fused MLP's bytes
        if name in chosen:
            drop, secs = drop + nbytes, secs + seconds
    return min(drop, layer.act_bytes), secs


def stash(
    ctx: StageContext,
    full: Iterable[int] = (),
    selective: bool = False,
    modules: frozenset[str] = frozenset(),
) -> Stash:
    """The stash when layers ``full`` are checkpointed and, with ``selective``, the others'
    attention cores are dropped, or, with ``modules``, those modules of the others."""
    full_set = set(full)
    kept = transient = rec_s = rec_ops = 0.0
    sel = []
    for i, (layer, inp) in enumerate(zip(ctx.layers, ctx.layer_inputs, strict=True)):
        if i in full_set:
            k = min(inp, layer.act_bytes)
            kept += k
            transient = max(transient, layer.act_bytes - k)
            rec_s += layer.full_recompute_s
            rec_ops += layer.fwd_ops or 0.0
            continue
        if modules:
            drop, secs = _modules(layer, modules)
        else:
            drop, secs = _attn_core(layer) if selective else (0.0, 0.0)
        if drop > 0:
            sel.append(i)
            rec_ops += (layer.fwd_ops or 0.0) * secs / layer.fwd_s if layer.fwd_s > 0 else 0.0
        kept += layer.act_bytes - drop
        transient = max(transient, drop)
        rec_s += secs
    label = "keep"
    if full_set:
        label = f"full:{len(full_set)}" + ("+selective" if sel else "")
    elif modules:
        label = "selective:" + ",".join(sorted(modules))
    elif selective:
        label = "selective"
    full_layers = tuple(sorted(full_set))
    return Stash(ctx.act_bytes, kept, transient, rec_s, full_layers, tuple(sel), label, rec_ops)


def full_order(ctx: StageContext) -> list[int]:
    """Layers in the order that saves most bytes per recompute second (Capuchin's MSPS);
    layers that save nothing are left out."""
    scored = []
    for i, (layer, inp) in enumerate(zip(ctx.layers, ctx.layer_inputs, strict=True)):
        saved = layer.act_bytes - min(inp, layer.act_bytes)
        if saved > 0:
            scored.append((-saved / max(layer.fwd_s, 1e-12), i))
    return [i for _, i in sorted(scored)]


def has_attn_core(ctx: StageContext) -> bool:
    """Whether some layer of the stage records an attention core that selective recompute can
    drop (``attn_core_act_bytes`` > 0)."""
    return any(_attn_core(layer)[0] > 0 for layer in ctx.layers)
