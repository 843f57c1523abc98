"""Transformer Engine's per-tensor amax all-reduce over the tensor-parallel group under
sequence parallelism (current-scaling FP8 and NVFP4): :func:`amax_ops`.

With sequence parallelism a column-parallel linear layer quantizes its rank's ``1/t`` of the
input before the all-gather, so that the gathered tensor has one scale; a per-tensor recipe
needs the amax of the whole tensor, so the quantizer all-reduces (MAX) its local amax over the
tensor group between the amax kernel and the cast. Transformer Engine sets the group on a
column-parallel layer's input quantizer in the forward and on a row-parallel layer's
output-gradient quantizer in the backward, both only with ``sequence_parallel``
(NVIDIA/TransformerEngine@d0067d0 ``pytorch/module/linear.py:351-355`` and ``809-824``,
``layernorm_linear.py:233-237`` and ``732-741``, ``layernorm_mlp.py:406-410`` and
``1154-1160``, through ``module/_common.py:20-32``, which sets it on any quantizer that has
``with_amax_reduction``: ``Float8CurrentScalingQuantizer``, ``tensor/float8_tensor.py:222``,
and ``NVFP4Quantizer``, ``tensor/nvfp4_tensor.py:122``; the same at TE v2.9, set once by
``_customize_quantizers_float8_current_scaling`` and ``_customize_quantizers_nvfp4``,
``linear.py:1648-1695``; not delayed scaling's
``Float8Quantizer``, MXFP8 or the blockwise FP8 quantizers, whose scales are local). The
reduction runs inside the quantize call on the compute stream's order:
``Float8CurrentScalingQuantizer::quantize_impl`` computes the amax, calls
``amax_reduction_group->allreduce({amax})->wait()`` and only then the scale and the cast
(``csrc/quantizer.cpp:1008-1027``); ``NVFP4Quantizer::quantize_impl`` all-reduces its row-wise
and column-wise amaxes in one ``allreduce_coalesced`` (``quantizer.cpp:2508-2537``, one fp32
each: 8 bytes when both usages are quantized, as for a linear's input whose weight gradient
needs it and for an output gradient). The fused norm paths reach the same call
(``FUSED_NORM_AMAX_FP8`` / ``_NVFP4``, ``csrc/extensions/normalization.cpp:101-124``,
``quantize_with_amax``). Userbuffers (``tp_comm_overlap``) do not change it: the local shard
is quantized before ``fill_userbuffers_buffer_for_all_gather`` (``linear.py:378-418``,
``layernorm_linear.py:294-305``, ``module/base.py:1725-1743`` for the output gradient), so the
all-reduce stays serialised on the compute stream; :func:`sim.parallel.tp_overlap.split_comm`
keeps it exposed (it pairs all-gathers and reduce-scatters only).

Per layer and micro-batch: one all-reduce in the forward for each column-parallel TE linear
that gathers its input (a block's QKV, ``LayerNormLinear``, and FC1, ``LayerNormMLP``; the
shared experts' FC1; Mamba's ``in_proj``) and one in the backward for each row-parallel one
(the attention projection, FC2, the shared experts' FC2, Mamba's ``out_proj``), each only where
that linear runs under the recipe (not :attr:`~sim.compute.precision_rules.LayerRules.keep16`
or ``mxfp8``). A full recompute runs the forward's again
(:attr:`~sim.engine.stage_cost.StageCost.tp_recompute` re-runs a layer's forward collectives).
None for the routed experts (``GroupedLinear`` sets no amax group: ``grouped_linear.py``
at d0067d0), nor without sequence parallelism (the input is whole on every rank), nor at
``t = 1``. Not modelled: MLA's projections (its down projections are ``duplicated``
linears; whether its up projections gather through TE is not checked here), a column-parallel
input quantized again in the backward (only when its original input is saved). The
all-reduces are timed as the engine times every exposed collective (latency-bound at 4 or 8
bytes: NCCL's model, :mod:`sim.comm.nccl`).
"""

from __future__ import annotations

from sim.compute.decoder import DecoderShape
from sim.compute.decoder_shape import base_kind
from sim.compute.precision import TE
from sim.compute.precision_rules import LowPrecision
from sim.parallel.megatron import AR, CommOp
from sim.trace.decoder import MOE_KINDS

AMAX_BYTES = {"fp8-tensorwise": 4.0, "nvfp4": 8.0}
"""Bytes of one amax all-reduce per recipe (module doc): Float8CurrentScaling one fp32;
NVFP4 a row-wise and a column-wise fp32 in one coalesced call."""
ATTENTION = (("qkv", "q", "k", "v"), "proj")
MLP = (("gate", "up"), "down")
SHARED = (("shared_up",), "shared_down")
MAMBA = (("in_proj",), "out_proj")
"""``(column-parallel GEMMs fed by one gathered input, row-parallel GEMM)`` of each pair
(GEMM names of :data:`sim.compute.quantize.LINEARS`)."""


def linear_pairs(kind: str, mla: bool, mamba: bool, shared: bool) -> list[tuple]:
    """The column/row linear pairs of a layer ``kind`` whose column input TE gathers
    (module doc); ``mla``: the attention is MLA (left out), ``mamba``: the mixer is Mamba-2,
    ``shared``: a MoE layer with shared experts."""
    base = base_kind(kind)
    pairs: list[tuple] = []
    if base == "mamba" and mamba:
        pairs.append(MAMBA)
    elif base in ("block", "moe_block", "attention", "mtp") and not mla:
        pairs.append(ATTENTION)
    if base in ("block", "mlp"):
        pairs.append(MLP)
    if base in MOE_KINDS and shared:
        pairs.append(SHARED)
    return pairs


def amax_ops(
    kind: str, m: DecoderShape | None, tp: int, sp: bool, low: LowPrecision | None
) -> tuple[tuple[CommOp, ...], tuple[CommOp, ...]]:
    """The amax all-reduces of one layer (``kind`` of decoder shape ``m``) per micro-batch:
    ``(forward, backward)`` :class:`~sim.parallel.megatron.CommOp` s of
    :data:`AMAX_BYTES` bytes each over the tensor group (module doc); none unless ``tp > 1``,
    ``sp`` and ``low`` is a per-tensor TE recipe the layer runs.

    Example:
        >>> from sim.compute.precision import get_recipe
        >>> from sim.compute.precision_rules import LayerRules
        >>> low = LowPrecision(get_recipe("fp8-tensorwise"), LayerRules())
        >>> fwd, bwd = amax_ops("block", None, 2, True, low)
        >>> [(op.kind, op.nbytes) for op in fwd], len(bwd)
        ([('allreduce', 4.0), ('allreduce', 4.0)], 2)
    """
    if tp < 2 or not sp or low is None or low.recipe.library != TE:
        return (), ()
    nbytes = AMAX_BYTES.get(low.recipe.name)
    if nbytes is None:
        return (), ()
    moe = getattr(m, "moe", None)
    shared = bool(moe is not None and moe.shared_ffn)
    mla = getattr(m, "mla", None) is not None
    mamba = getattr(m, "mamba", None) is not None
    off = set(low.rules.keep16) | set(low.rules.mxfp8)
    fwd: list[CommOp] = []
    bwd: list[CommOp] = []
    for cols, row in linear_pairs(kind, mla, mamba, shared):
        if not set(cols) <= off:
            fwd.append(CommOp(AR, nbytes))
        if row not in off:
            bwd.append(CommOp(AR, nbytes))
    return tuple(fwd), tuple(bwd)
