"""Megatron-Core's router expert-bias update at the step (aux-loss-free load balancing): which
layers of a rank take part, the bytes of its all-reduce and its update kernels.

A router with ``moe_router_enable_expert_bias`` (``--moe-router-enable-expert-bias``;
:attr:`~sim.compute.moe_shape.MoEShape.router_expert_bias`) keeps two fp32 buffers of
``num_moe_experts`` elements, ``local_tokens_per_expert`` and ``expert_bias``
(NVIDIA/Megatron-LM@d98e8a64 ``megatron/core/transformer/moe/router.py`` l.180-197: both
``torch.zeros(num_moe_experts, dtype=torch.float32)``; l.262-271 keeps the bias fp32 under any
``--bf16``). Its forward adds each micro-batch's routed-token counts into the first
(``_apply_expert_bias``, l.733-744).

At the step, ``finalize_model_grads`` (``megatron/core/distributed/finalize_model_grads.py``
l.560-713) runs, after ``finish_grad_sync`` (the data-parallel reduction, l.639-640), the
tensor-group all-reduce (l.661) and the embedding all-reduces (l.676-677),
``_update_router_expert_bias`` (called at l.682-687, defined at l.334-371) over the group
``parallel_state.get_tensor_and_data_parallel_group(with_context_parallel=True)`` (l.684-686):
every tensor, data and context rank of the pipeline stage. That function collects, over every
model chunk of the rank, each training router's two buffers (l.344-357; nothing when none,
l.358-360: a dense model, or a rank holding only dense layers), stacks them (two
``torch.stack``, l.361-362) and calls ``get_updated_expert_bias`` (``megatron/core/
transformer/moe/moe_utils.py`` l.1199-1229): one ``all_reduce`` of the stacked counts
(``L x E`` fp32 over the group, l.1225), then ``sum(dim=-1)``, ``/ E``, ``average - tokens``,
``sign``, ``* rate`` and ``expert_bias + ...`` (six elementwise kernels, l.1226-1228), then one
``copy_`` per router back into its bias (l.370-371). ``reset_model_temporary_tensors``
(called at l.692, defined at l.316-324) then zeroes each router's counts, one ``zero_`` each.

How it is priced: the all-reduce of :func:`update_bytes` over the stage's GPUs
(:meth:`sim.engine.collectives.Collectives.join_stage`, event ``allreduce``
:data:`ROUTER_BIAS` ``<stage>STEP<k>``) and the kernels of :func:`update_kernels` on the compute
stream (:func:`update_s`), once per rank and step. Assumption: a framework other than
Megatron-Core that reads a shape with the flag (torchtitan's ``load_balance_coeff`` update is
its counterpart) runs the same. The forward's per-micro-batch count (``routing_map.sum(dim=0)``
and the add, l.744) is the router's kernel (:mod:`sim.compute.router_fused`, step 4).
"""

from __future__ import annotations

from sim.compute.decoder import DecoderShape, mtp_inner
from sim.compute.decoder_shape import base_kind, kind_of
from sim.compute.kernels import Kernel, kernel_time_s, mem
from sim.hardware.formats import FP32_BYTES
from sim.hardware.gpu_compute import ComputeSpec
from sim.parallel.decoder_shard import DecoderShard
from sim.parallel.shard import ShardedTrace
from sim.trace.decoder import decoder_shape

ROUTER_BIAS = "router-expert-bias"
"""Label of the step's expert-bias all-reduce and update (module doc)."""
MOE_KINDS = ("moe_block", "moe")
"""Layer kinds with a MoE router (an MTP depth has one where its block is a ``moe_block``)."""


def router_experts(kind: str, m: DecoderShape) -> int:
    """Experts of the router with an expert bias in a ``kind`` layer of ``m`` (its buffers'
    length, ``num_moe_experts``); 0 for a layer without a router or a router without the bias.

    Example (8 experts: a MoE block's router; none in a dense block):
        >>> from sim.compute.moe_shape import MoEShape
        >>> moe = MoEShape(8, 8, 2, 16, router_expert_bias=True)
        >>> m = DecoderShape(2, 8, 2, 4, vocab=32, ffn_hidden=16, moe=moe)
        >>> router_experts("moe_block", m), router_experts("block", m), router_experts("mtp", m)
        (8, 0, 8)
    """
    if m.moe is None or not m.moe.router_expert_bias:
        return 0
    base = base_kind(kind)
    if base == "mtp":
        base = mtp_inner(m)
    return m.moe.experts if base in MOE_KINDS else 0


def layer_router_experts(sharded: ShardedTrace | DecoderShard) -> tuple[int, ...]:
    """Per layer of ``sharded``'s trace, :func:`router_experts` (0 for every layer of a trace
    that is not a decoder's)."""
    layers = sharded.trace.layers
    if not isinstance(sharded, DecoderShard):
        return (0,) * len(layers)
    m = decoder_shape(sharded.trace)
    kinds = sharded.trace.provenance.get("layer_kinds") or [kind_of(x.name) for x in layers]
    return tuple(router_experts(k, m) for k in kinds)


def update_bytes(experts: tuple[int, ...]) -> float:
    """Bytes of the all-reduce of the stacked counts of routers of ``experts`` each (fp32).

    Example (2 routers of 8 experts: 2 x 8 x 4 B):
        >>> update_bytes((8, 8))
        64.0
    """
    return float(sum(experts) * FP32_BYTES)


def update_kernels(experts: tuple[int, ...]) -> tuple[Kernel, ...]:
    """The memory-bound kernels around the all-reduce for routers of ``experts`` each (module
    doc; ``n`` elements in all, ``L`` routers, 4 B each): the two stacks (read and write ``4n``
    each), the sum (reads ``4n``, writes ``4L``), the mean (``8L``), the offset (reads ``4L +
    4n``, writes ``4n``), the sign and the rate (``8n`` each), the add (reads ``8n``, writes
    ``4n``); per router its ``copy_`` (``8E``) and ``zero_`` (``4E``). Empty without routers.

    Example (2 routers of 8 experts, n = 16: 8 + 2 x 2 kernels; 56n + 16L = 928 bytes of the
    chain, 2 x 96 of the routers):
        >>> ks = update_kernels((8, 8))
        >>> len(ks), sum(k.bytes for k in ks)
        (12, 1120.0)
    """
    if not experts:
        return ()
    n, layers, b = float(sum(experts)), float(len(experts)), float(FP32_BYTES)
    chain = (
        mem("stack_tokens", 2 * b * n), mem("stack_bias", 2 * b * n),
        mem("sum", b * (n + layers)), mem("mean", 2 * b * layers),
        mem("offset", b * (layers + 2 * n)), mem("sign", 2 * b * n),
        mem("rate", 2 * b * n), mem("add", 3 * b * n),
    )  # fmt: skip
    per_router = tuple(
        k for e in experts for k in (mem("copy_bias", 2 * b * e), mem("zero_tokens", b * e))
    )
    return chain + per_router


def update_s(experts: tuple[int, ...], spec: ComputeSpec) -> float:
    """Device seconds of :func:`update_kernels` on ``spec`` (fp32, one after another)."""
    return sum(kernel_time_s(k, spec, "fp32") for k in update_kernels(experts))
