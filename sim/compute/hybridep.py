"""The device work HybridEP adds around its dispatch and combine, on the rank that runs it.

Megatron-Core's ``flex`` token dispatcher with the HybridEP backend (``_HybridEPManager``,
NVIDIA/Megatron-LM@d98e8a64 ``megatron/core/transformer/moe/token_dispatcher.py`` lines
1001-1240; ``fused_a2a.py`` ``HybridEPDispatch`` / ``HybridEPCombine`` lines 358-513) hands the
experts rows already grouped by local expert: its ``get_permuted_hidden_states_by_experts``
returns the dispatched rows as they are, so no Transformer Engine permutation runs on either
side. HybridEP does the grouping itself (deepseek-ai/DeepEP@94a9f8f6, branch ``hybrid-ep``:
``csrc/hybrid_ep/hybrid_ep.cu`` ``metadata_preprocessing``, ``dispatch_with_permute``,
``combine_with_unpermute``; ``executor/executor.cu``; ``docs/Hybrid-EP_Implementation.md``
§7). Per MoE layer forward:

1. the routing map is all-gathered over the dispatcher's group, the ``etp x ep`` ranks
   (``Executor::allgather_routing_map``: ``torch.distributed.all_gather_into_tensor``, unless
   the experimental custom all-gather is enabled, off by default): :func:`routing_map_bytes`,
   an exchange the engine times in place of the alltoall dispatcher's token counts. Each
   rank's map is ``bool [r, C]`` with ``C = etp x E`` columns: Megatron's flex dispatcher
   replicates the map and the probabilities over the expert-tensor ranks
   (``MoEFlexTokenDispatcher._initialize_metadata``, NVIDIA/Megatron-LM@d98e8a64
   ``token_dispatcher.py`` lines 1906-1917; ``_HybridEPManager`` gets ``num_experts = tp_size x
   num_moe_experts``, line 1849, ``tp_size`` being the expert-tensor group's, line 89), and
   HybridEP gathers ``routing_map.size(-1)`` columns, asserting it is ``experts_per_rank x
   ranks`` (DeepEP@94a9f8f6 ``executor/executor.cu`` lines 32-50);
2. a preprocessing kernel scans the gathered map and writes the per-token routing metadata
   (``metadata_preprocess_core``: ``local_expert_routing_map`` ``bool`` and
   ``dense_to_expert_map`` ``int32``, one each per received token and local expert):
   :func:`preprocess`. Of each of the ``etp x ep x r`` gathered tokens it loads only the
   columns of its own NVLink domain, ``C / domains`` (``scan`` in
   ``backend/hybrid_ep_backend.cuh`` lines 4953-4955 and 5335-5337 at 94a9f8f6: the load starts
   at ``node_rank x experts_per_rank x ranks_per_node``; the second pass re-reads a block's
   sub-chunk, taken as hitting L2, an assumption); without a token budget
   (``num_permuted_tokens``; Megatron's ``moe_expert_rank_capacity_factor``, unset in the
   Bridge recipes) the stream is then synchronised to size the output (the token-count host
   sync of :mod:`sim.compute.moe`);
3. the dispatch kernel sends each token once to every rank holding one of its experts (timed
   by the engine, :mod:`sim.comm.ep_dispatch`); unless ``moe_permute_fusion_into_hybridep``
   (Megatron-Core's default ``False`` at every Bridge release's commit that has it:
   ``transformer_config.py`` line 762 at 2edffadb, 804 at d0b3b775 / 458c8d0e, 875 at
   cd4afffa, 882 at 2a75ac12; the older 0d8e0714, b0cc2706 and d7288711 call
   ``dispatch_with_permute`` without it; the Bridge sets it only in H100 recipes of 26.08: NVIDIA-NeMo/Megatron-Bridge@067f987
   ``perf_recipes/qwen/h100/qwen3_moe.py`` line 40, ``perf_recipes/nemotronh/h100/nemotronh.py``
   line 246), a standalone permute kernel then copies each received row to every local expert
   it goes to, with its fp32 probability (``Executor::dispatch_postprocess``,
   ``permute_launcher``): :func:`permute_fwd`;
   Where the group spans NVLink domains (HybridEP's ``num_of_nodes > 1``: the group's ranks
   over the ranks per NVLink domain, ``deep_ep/hybrid_ep_buffer.py`` line 83), the dispatch
   first copies the rank's input rows and fp32 probabilities into its RDMA buffer
   (``Executor::dispatch_preprocess``, ``executor/executor.cu`` lines 183-217, a
   ``cudaMemcpyAsync`` on the current stream; ``hybrid_ep.cu`` lines 323-324): :func:`rdma_stage`;
4. after the experts, a standalone unpermute kernel gathers each token's local-expert rows
   back into one row per received token (``Executor::combine_preprocess``,
   ``unpermute_launcher``), and the combine kernel returns and sums them.

The backward runs the same kernels the other way: the combine's backward is a
``dispatch_with_permute`` with the forward's handle (no all-gather, no preprocessing, no sync;
the permute without probabilities), the dispatch's backward a ``combine_with_unpermute`` that
also carries the probabilities' gradients (``fused_a2a.py`` lines 449-470 and 502-513):
:func:`permute_bwd`. Across NVLink domains the combine's backward, a dispatch without
probabilities (``forward_dispatch_api`` false), copies the gradient rows alone into the RDMA
buffer (:func:`rdma_stage`); the combine runs no such copy (``combine_preprocess``, lines
389-431, copies into the NVLink buffer only without the unpermute).

**Rows.** A rank receives one row per token and source that routes to at least one of its
``m`` local experts, ``sources * r * hit_share(E, k, m)`` (:func:`received_rows`; uniform
top-``k`` routing, as :func:`sim.comm.ep_dispatch.hit_share`, whose closed form this repeats:
compute and comm do not import each other), and its experts compute the routed copies
(``rows``, :func:`sim.compute.routing.expert_rows`).

**Speed.** The permute kernels run on ``16 x`` the GPU's SMs, one warp per received row,
``float4`` copies (``config.cuh`` lines 449-451, ``permute.cu`` ``permute_kernel``): memory-bound
kernels at the HBM rate (:func:`sim.compute.kernels.kernel_time_s`), no measurement of them
being published (a lower bound, as :mod:`sim.compute.moe_sort`).
"""

from __future__ import annotations

import math

from sim.compute.kernels import Kernel, mem
from sim.hardware.formats import FP32_BYTES

PROB_BYTES = FP32_BYTES
"""fp32 routing probabilities (HybridEP asserts ``torch::kFloat32``, ``hybrid_ep.cu``)."""
MAP_BYTES = 1 + 4
"""Per received token and local expert: ``local_expert_routing_map`` (bool) and
``dense_to_expert_map`` (int32) the preprocessing writes (``executor.cu``
``metadata_preprocess_core``)."""


def hit_share(experts: int, top_k: int, held: int) -> float:
    """Share of tokens that choose at least one of ``held`` given experts when each picks
    ``top_k`` distinct of ``experts`` uniformly: ``1 - C(E - m, k) / C(E, k)`` (module doc).

    >>> round(hit_share(4, 2, 2), 4)  # 1 - C(2, 2) / C(4, 2) = 1 - 1/6
    0.8333
    """
    return 1.0 - math.comb(experts - held, top_k) / math.comb(experts, top_k)


def received_rows(r: int, sources: int, experts: int, top_k: int, local: int) -> float:
    """Rows a rank's dispatch buffer receives: ``sources * r * hit_share(E, k, m)``.

    Example: 2 sources of 3 tokens, 4 experts, top-2, 2 local: ``6 * 5/6 = 5``.

    >>> received_rows(3, 2, 4, 2, 2)
    5.0
    """
    return sources * r * hit_share(experts, top_k, local)


def routing_map_bytes(r: int, columns: int, sources: int) -> float:
    """Bytes of the gathered routing map: ``bool [r, C]`` from each of ``sources`` ranks, ``C``
    the columns of a rank's map, ``etp x E`` (module doc, step 1).

    Example: 3 tokens, 4 experts replicated over 2 expert-tensor ranks, 2 x 2 sources:
    ``3 * 8 * 4 = 96`` bytes.

    >>> routing_map_bytes(3, 2 * 4, 4)
    96.0
    """
    return float(r * columns * sources)


def preprocess(r: int, sources: int, columns: int, local: int, domains: int = 1) -> Kernel:
    """The preprocessing kernel: reads of every gathered token (``sources * r``) its NVLink
    domain's ``columns / domains`` map entries, writes the per-token metadata of every received
    candidate (``sources * r`` tokens, ``local`` experts each; module doc, step 2).

    Example: 3 tokens from 4 sources, 8 columns over 2 domains, 2 local experts:
    ``12 * 4 + 12 * 2 * 5 = 168`` bytes.

    >>> preprocess(3, 4, 8, 2, 2).bytes
    168.0
    """
    read = sources * r * columns / domains
    return mem("hybridep_preprocess", read + sources * r * local * MAP_BYTES)


def replicate(r: int, experts: int, etp: int, fwd: bool) -> list[Kernel]:
    """Megatron's copy of the ``[r, E]`` routing map (bool) and fp32 probabilities into
    ``[r, etp x E]`` before HybridEP (``_initialize_metadata``'s ``expand(...).contiguous()``,
    ``token_dispatcher.py``@d98e8a64 lines 1906-1917; module doc step 1): each read once and
    written ``etp`` times; its backward sums the probabilities' gradients back over the
    ``etp`` copies (read ``etp`` times, written once). None at ``etp`` 1 (the expand of a
    size-1 axis is a view, ``contiguous`` copies nothing). The map's bool and the fp32
    probabilities: ``(1 + 4)`` bytes per entry forward, ``4`` backward.

    Example: 3 tokens, 4 experts, etp 2: ``12 * 5 + 24 * 5 = 180`` and ``24 * 4 + 12 * 4 = 144``.

    >>> [k.bytes for k in replicate(3, 4, 2, True) + replicate(3, 4, 2, False)]
    [180.0, 144.0]
    """
    if etp <= 1:
        return []
    entry = 1 + PROB_BYTES if fwd else PROB_BYTES
    name = "flex_replicate" if fwd else "flex_replicate_bwd"
    return [mem(name, float(r * experts * entry * (1 + etp)))]


def dispatch_payload(row_bytes: float, columns: int, domains: int = 1) -> float:
    """Bytes the forward dispatch moves per token and destination over the bytes of its
    routed copy as :func:`sim.parallel.expert.expert_plan` counts it (the row and one fp32
    probability): ``(row + 4 C / domains) / (row + 4)``. HybridEP sends a token with its NVLink
    domain's probabilities, ``experts_per_rank x ranks_per_node = C / domains`` fp32 (of the
    ``[r, etp x E]`` Megatron passes, module doc step 1), to every rank (over NVLink) and every
    remote domain (over RDMA) it goes to (``dispatch_kernel``, ``FORWARD_DISPATCH``: the
    ``cp_async_bulk`` of ``NUM_OF_EXPERTS_PER_RANK * NUM_OF_RANKS_PER_NODE`` floats per
    destination, ``backend/hybrid_ep_backend.cuh`` lines 1340-1365 and 1638-1646 at 94a9f8f6;
    RDMA lines 766-770). The dispatch's backward, a combine with the probabilities'
    gradients, carries them back (an assumption: the same columns); the combine and its
    backward carry none.

    Example: rows of 8 bytes, 16 columns over 2 domains: ``(8 + 32) / (8 + 4) = 3.333``.

    >>> round(dispatch_payload(8, 16, 2), 3)
    3.333
    """
    return (row_bytes + PROB_BYTES * columns / domains) / (row_bytes + PROB_BYTES)


def permute_fwd(received: float, rows: float, w: int, d: int) -> tuple[Kernel, Kernel]:
    """``(permute, unpermute)`` of a forward: ``received`` rows read and ``rows`` written with
    their probabilities (read and written), then the ``rows`` expert outputs read and
    ``received`` rows written (module doc).

    Example: 5 received rows, 6 routed, width 4 in bf16: ``5*8 + 6*8 + 6*8 = 136`` and
    ``6*8 + 5*8 = 88`` bytes.

    >>> [k.bytes for k in permute_fwd(5, 6, 4, 2)]
    [136.0, 88.0]
    """
    row = w * d
    return (mem("hybridep_permute", float(received * row + rows * (row + 2 * PROB_BYTES))),
            mem("hybridep_unpermute", float(rows * row + received * row)))  # fmt: skip


def permute_bwd(received: float, rows: float, w: int, d: int) -> tuple[Kernel, Kernel]:
    """``(combine's backward, dispatch's backward)`` in the order the backward runs them: the
    gradient permuted without probabilities, then unpermuted with the probabilities' gradients
    (read per routed row, written per routed row; module doc).

    >>> [k.bytes for k in permute_bwd(5, 6, 4, 2)]
    [88.0, 136.0]
    """
    row = w * d
    return (mem("hybridep_unpermute_bwd", float(received * row + rows * row)),
            mem("hybridep_permute_bwd", float(rows * (row + 2 * PROB_BYTES) + received * row)))  # fmt: skip


def rdma_stage(r: int, w: int, d: int, columns: int, probs: bool) -> Kernel:
    """The copy of a rank's ``r`` input rows of ``w`` elements (``d`` bytes each) into the RDMA
    buffer before a dispatch across NVLink domains, with the fp32 probabilities when ``probs``
    (module doc): each byte read and written, ``2 (r w d + r C 4)``. Megatron passes them as
    ``[r, C]``, ``C = etp x E`` columns (``MoEFlexTokenDispatcher._initialize_metadata``
    replicates them over the expert-tensor ranks, NVIDIA/Megatron-LM@d98e8a64
    ``token_dispatcher.py`` lines 1906-1917, 1849; ``_HybridEPManager.setup_metadata`` line
    1087).

    Example: 3 rows of 4 bf16, 2 columns: ``2 * (24 + 24) = 96`` bytes, ``48`` without.

    >>> rdma_stage(3, 4, 2, 2, True).bytes, rdma_stage(3, 4, 2, 2, False).bytes
    (96.0, 48.0)
    """
    nbytes = r * w * d + (r * columns * PROB_BYTES if probs else 0)
    return mem("hybridep_rdma_stage", 2.0 * nbytes)
