"""The host side of a decoder layer on one rank: where its forward's host syncs fall and the
host ops of the experts the rank runs.

Split from :mod:`sim.parallel.decoder_shard`, which calls these per layer: :func:`sync_shares`
(the MoE dispatcher's token-count read-back, a clamped quick-GeGLU's offset copy),
:func:`recompute_sync_share` (that copy again in a ``moe_act`` recompute, in the backward),
:func:`attention_host_ops` (GPT-OSS's eager attention pieces), :func:`grouped_host_ops`
(Transformer Engine ``GroupedLinear``'s per-expert host work),
:func:`rank_expert_ops` (a layer's host ops without the experts other ranks hold) and
:func:`with_mamba_cp_ops` (the ops of Megatron-Core's context parallelism over a Mamba layer).
"""

from __future__ import annotations

from dataclasses import replace

from sim.compute.decoder import ATTN, DecoderShape
from sim.compute.decoder_shape import base_kind
from sim.compute.glu_clamp import OFFSET_COPY
from sim.compute.gptoss_host import attention_ops, expert_ops
from sim.compute.kernels import Kernel, kernel_time_s
from sim.compute.mamba_cp import host_ops as mamba_cp_ops
from sim.compute.mcore_ops import expert_ops as sequential_expert_ops
from sim.compute.moe import HOST_SYNC_KERNELS
from sim.compute.precision import TE
from sim.compute.precision_rules import TE_VERSION, LowPrecision
from sim.compute.te_grouped_host import grouped_expert_ops
from sim.hardware.gpu_compute import ComputeSpec
from sim.hardware.host_ops import HostOverhead
from sim.parallel.layout import ParallelLayout
from sim.trace.schema import LayerProfile


def sync_shares(kernels: list[Kernel], spec: ComputeSpec, dtype: str) -> tuple[float, ...]:
    """Shares of a forward's seconds up to each of its host syncs, in order
    (:data:`sim.compute.moe.HOST_SYNC_KERNELS`: the token counts read on the host, a clamped
    quick-GeGLU's offset copy), empty without one. The quantize kernels a recipe appends
    (:func:`~sim.compute.quantize.quantize_layer`) count as after them.

    Example: 1, 3 and 4 seconds' worth of bytes around two syncs: 1/8 and 4/8 (their own
    launches are no work beyond the overhead every kernel shares alike).

    >>> from sim.compute.kernels import mem
    >>> from sim.hardware.gpu_compute import ComputeSpec
    >>> g = ComputeSpec("x", 1e15, 1e14, 1e12, 100, 0.5, 0.5, hbm_efficiency=1.0,
    ...                 kernel_overhead_s=0.0)
    >>> ks = [mem("a", 1e12), mem("token_count_sync", 0.0), mem("b", 3e12),
    ...       mem("expert_act_offset_h2d", 0.0), mem("c", 4e12)]
    >>> sync_shares(ks, g, "bf16"), sync_shares(ks[:1], g, "bf16")
    ((0.125, 0.5), ())
    """
    times = [kernel_time_s(k, spec, dtype) for k in kernels]
    total = sum(times)
    if total <= 0:
        return ()
    cuts = [i for i, k in enumerate(kernels) if k.name in HOST_SYNC_KERNELS]
    return tuple(sum(times[: i + 1]) / total for i in cuts)


RECOMPUTE_HOOK = "d_expert_down_in"
"""The first backward kernel after a ``moe_act`` recompute: the experts' fc2 input gradient,
which needs the recomputed activation (the recompute is a hook on fc2's output gradient)."""


def recompute_sync_share(kernels: tuple[list[Kernel], ...], spec: ComputeSpec, dtype: str) -> float:
    """Share of a layer's backward seconds (``kernels``: its forward, input-gradient and
    weight-gradient kernels on the rank, :func:`sim.compute.decoder.layer_kernels`) issued
    before the host sync of a ``moe_act`` recompute, or 0.0 for a layer without one.

    Megatron-Core's ``moe_act`` recompute (``TEGroupedMLP.forward``: ``CheckpointWithoutOutput``
    over ``bias_act_func``, then ``discard_output_and_register_recompute(output)``, fc2's
    output) re-runs the activation in a hook on fc2's output gradient
    (``tensor_parallel/random.py`` ``CheckpointWithoutOutput._recompute``: ``self.run_function``
    under ``torch.enable_grad()``; NVIDIA/Megatron-LM@d7288711 ``moe/experts.py`` lines
    379-390, ``random.py`` 735-822; the same at 0d8e0714 and b0cc2706, the Megatron-LM of
    Megatron-Bridge v0.2.0 and v0.3.0). For a clamped quick-GeGLU the function is
    ``weighted_bias_quick_geglu_impl``, whose ``torch.tensor(linear_offset, device=...)`` is a
    blocking copy (:mod:`sim.compute.glu_clamp`): the host waits there for the device in the
    backward too, after the backward kernels before fc2's input gradient
    (:data:`RECOMPUTE_HOOK`; the recompute's own seconds run in the stage's recompute, not
    here). The share counts the backward's input- and weight-gradient seconds together.

    Example: 1 and 3 seconds' worth of bytes before and after the hook, nothing in the weight
    gradient: 1/4.

    >>> from sim.compute.kernels import mem
    >>> from sim.hardware.gpu_compute import ComputeSpec
    >>> g = ComputeSpec("x", 1e15, 1e14, 1e12, 100, 0.5, 0.5, hbm_efficiency=1.0,
    ...                 kernel_overhead_s=0.0)
    >>> fwd = [mem("expert_act_offset_h2d", 0.0)]
    >>> dx = [mem("a", 1e12), mem("d_expert_down_in[8]", 3e12)]
    >>> recompute_sync_share((fwd, dx, []), g, "bf16"), recompute_sync_share(([], dx, []), g, "bf16")
    (0.25, 0.0)
    """
    fwd, dx, dw = kernels[:3]
    names = [k.name.split("[")[0] for k in dx]
    if not any(k.name == OFFSET_COPY for k in fwd) or RECOMPUTE_HOOK not in names:
        return 0.0
    times = [kernel_time_s(k, spec, dtype) for k in [*dx, *dw]]
    total = sum(times)
    return sum(times[: names.index(RECOMPUTE_HOOK)]) / total if total > 0 else 0.0


def attention_host_ops(layer: LayerProfile, kind: str, m: DecoderShape) -> tuple[float, float]:
    """``(forward ops, backward ops)`` of GPT-OSS's eager pieces inside a layer's attention
    module (:func:`sim.compute.gptoss_host.attention_ops`: the unfused rotary embedding, the
    projection's bias), already in the layer's counts (:func:`sim.trace.decoder.
    layer_host_ops`), for a layer with attention whose trace counts host ops; ``(0, 0)``
    otherwise. Their own slot, so that a CUDA graph of the attention takes them whole
    (:func:`sim.framework.cuda_graphs.captured`)."""
    if base_kind(kind) not in ATTN or layer.fwd_ops is None or layer.bwd_ops is None:
        return 0.0, 0.0
    return attention_ops(m)


def grouped_host_ops(
    layer: LayerProfile,
    kind: str,
    m: DecoderShape,
    par: ParallelLayout,
    low: LowPrecision | None = None,
    host: HostOverhead | None = None,
) -> tuple[float, float]:
    """``(forward ops, backward ops)`` of the per-expert host work of the rank's ``E / ep``
    grouped experts: Transformer Engine ``GroupedLinear``'s under the layer's recipe ``low``,
    each kind priced at ``host``'s figures (None: the reference host's)
    (:func:`sim.compute.te_grouped_host.grouped_expert_ops`; under BF16 or a Transformer Engine
    recipe, at the recipe's Transformer Engine version ``low.te``) and GPT-OSS's eager clamp and expert biases
    (:func:`sim.compute.gptoss_host.expert_ops`), for a MoE layer whose trace counts host ops
    and whose experts run grouped (not ``sequential_experts``, not the fused grouped MLP);
    ``(0, 0)`` otherwise."""
    if m.moe is None or base_kind(kind) not in ("moe_block", "moe"):
        return 0.0, 0.0
    if m.moe.sequential_experts or m.moe.fused_grouped_mlp:
        return 0.0, 0.0
    if layer.fwd_ops is None or layer.bwd_ops is None:
        return 0.0, 0.0
    local = m.moe.experts / par.ep
    fwd, bwd = expert_ops(m.moe, local)
    if low is not None and low.recipe.library != TE:
        return fwd, bwd
    name, te = (low.recipe.name, low.te) if low is not None else (None, TE_VERSION)
    te_fwd, te_bwd = grouped_expert_ops(local, name, host=host, te=te)
    return te_fwd + fwd, te_bwd + bwd


def rank_expert_ops(
    layer: LayerProfile,
    kind: str,
    m: DecoderShape,
    par: ParallelLayout,
    grouped: tuple[float, float] = (0.0, 0.0),
) -> LayerProfile:
    """``layer`` without the host ops of the experts other ranks hold: with
    ``sequential_experts`` a MoE layer's trace counts ``SequentialMLP``'s loop over all ``E``
    experts (:func:`sim.trace.decoder.layer_host_ops`), a rank of ``ep`` runs ``E / ep`` of
    them (:func:`sim.compute.mcore_ops.expert_ops`); with grouped experts (not the fused
    grouped MLP) the trace counts one expert and the rank's ``E / ep`` add ``grouped``, the
    ``(forward, backward)`` ops of :func:`grouped_host_ops`."""
    if m.moe is None or base_kind(kind) not in ("moe_block", "moe"):
        return layer
    if not m.moe.sequential_experts:
        if layer.fwd_ops is None or layer.bwd_ops is None:
            return layer
        fwd, bwd = grouped
        return replace(layer, fwd_ops=layer.fwd_ops + fwd, bwd_ops=layer.bwd_ops + bwd)
    if par.ep <= 1:
        return layer
    fwd, bwd, mods, fns = sequential_expert_ops(m.moe.experts - m.moe.experts / par.ep)

    def less(v: float | None, d: float) -> float | None:
        return None if v is None else max(0.0, v - d)

    return replace(
        layer,
        fwd_ops=less(layer.fwd_ops, fwd),
        bwd_ops=less(layer.bwd_ops, bwd),
        fwd_modules=less(layer.fwd_modules, mods),
        fwd_functions=less(layer.fwd_functions, fns),
    )


def with_mamba_cp_ops(layer: LayerProfile, kind: str, par: ParallelLayout) -> LayerProfile:
    """``layer`` with the host ops Megatron-Core's context parallelism adds to a Mamba layer
    (:func:`sim.compute.mamba_cp.host_ops`; none for ``cp == 1`` or another kind); a count the
    trace lacks (None) stays None."""
    if base_kind(kind) != "mamba" or par.cp == 1 or layer.fwd_ops is None or layer.bwd_ops is None:
        return layer
    fwd, bwd = mamba_cp_ops(par.cp)
    return replace(layer, fwd_ops=layer.fwd_ops + fwd, bwd_ops=layer.bwd_ops + bwd)
