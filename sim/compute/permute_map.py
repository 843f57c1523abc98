"""The index maps Transformer Engine builds before its fused token permutation and chunk sort.

With ``--moe-permute-fusion`` Megatron-Core's ``alltoall`` and ``allgather`` dispatchers permute
the rank's tokens with Transformer Engine's mask-map permutation
(NVIDIA/Megatron-LM@d98e8a64 ``megatron/core/transformer/moe/moe_utils.py`` lines 412-434,
``fused_permute_with_probs``), which first turns the ``r x E`` bool routing map into a row map
(NVIDIA/TransformerEngine@d0067d0 ``transformer_engine/pytorch/permutation.py`` line 321,
``triton/permutation.py`` lines 24-118, ``make_row_id_map``): an ``int32 [r, 2E + 1]`` tensor
written by three Triton kernels,

1. a per-block cumulative sum per expert: reads the bool map, writes ``int32`` counts
   (``5 r E`` bytes);
2. the global cumulative sum into destination rows: reads and writes them (``8 r E``);
3. the dense map: reads them, writes ``r (2E + 1)`` ``int32`` (``4 r E + 4 r (2E + 1)``);

the permute and unpermute kernels (and the backward, which keeps the map) then read it, their
bytes counted with them (:mod:`sim.compute.moe`). The chunk sort by local expert
(:mod:`sim.compute.moe_sort`, ``sort_chunks_by_idxs``, ``moe_utils.py`` lines 628-660) builds
its own row map in the forward, one kernel writing an ``int32`` per row
(``triton/permutation.py`` lines 361-390, ``make_chunk_sort_map``), for the sort and again
for the unsort; the backward reuses it. HybridEP runs none of these (its preprocessing,
:mod:`sim.compute.hybridep`). Memory-bound kernels: launch overhead plus bytes at the HBM rate
(:func:`sim.compute.kernels.kernel_time_s`); the ``num_experts x blocks`` workspace is left out.
"""

from __future__ import annotations

from sim.compute.kernels import Kernel, mem

INDEX_BYTES = 4
"""The row maps are ``int32``."""


def row_id_map(r: int, experts: int) -> list[Kernel]:
    """The three passes of ``make_row_id_map`` over ``r`` tokens and ``E`` experts (module doc).

    Example: 2 tokens, 3 experts: ``5*6 = 30``, ``8*6 = 48`` and ``4*6 + 4*2*7 = 80`` bytes.

    >>> [k.bytes for k in row_id_map(2, 3)]
    [30.0, 48.0, 80.0]
    """
    n = float(r * experts)
    dense = INDEX_BYTES * r * (2 * experts + 1)
    return [mem("permute[row_id_pass1]", (1 + INDEX_BYTES) * n),
            mem("permute[row_id_pass2]", 2 * INDEX_BYTES * n),
            mem("permute[row_id_pass3]", INDEX_BYTES * n + dense)]  # fmt: skip


def chunk_sort_map(name: str, rows: float) -> Kernel:
    """``make_chunk_sort_map`` for ``rows`` rows (module doc); ``name``: the sort's kernel."""
    return mem(f"{name}[map]", INDEX_BYTES * rows)
