"""The host ops of Megatron-Core's MoE layer, counted from a run of its code.

Counted, not read: ``scripts/count_mcore_ops.py`` builds a ``GPTModel`` of megatron-core 0.15.0
(PyPI; ``get_gpt_layer_local_spec``, no Transformer Engine or Apex: torch's layer norm; the CPU
build of torch 2.13; one rank) with one and with two layers and counts, for each, the ATen ops
a ``TorchDispatchMode`` sees in the forward and in the backward, the ``nn.Module`` calls (a
global forward pre-hook) and the Python ``autograd.Function`` nodes of the autograd graph; the
difference of the two models is one layer. An op is the unit of the trace's ``fwd_ops`` /
``bwd_ops`` (:mod:`sim.compute.megatron_ops`). CPU-only changes to the counts: the CUDA RNG
tracker's ``fork`` replaced by a null context (it calls no ATen op) and Megatron's global
memory buffer placed on the CPU; torch's CPU dropout is 4 ops (``empty_like``, ``bernoulli_``,
``div_``, ``mul``) where CUDA's is one ``native_dropout``, so 3 ops are taken off each of the
layer's three dropouts (attention probabilities, the two bias-dropout-adds); its backward is
one ``mul`` on either device.

**The dense block, as a check** (GPT, learned absolute positions, ``add_bias_linear``): 63
forward ops on the CPU, 54 as on CUDA, 91 backward, 18 module calls, 8 Python Function nodes
— against 63 / 88 / 11 / 8 counted by hand from Megatron-DeepSpeed
(:func:`sim.compute.megatron_ops.block_ops`, :func:`~sim.compute.megatron_ops.block_calls`:
the stand-in decoder traces use). The stand-in is within 15 % for a dense block and is kept.
Rotary embeddings add 27 forward and 22 backward ops per layer (counted with
``position_embedding_type="rope"``, unfused); not applied here (the stand-in has none;
GPT-OSS's unfused YaRN RoPE is counted apart, :mod:`sim.compute.gptoss_host`).

**The MoE block** (:data:`MOE_BLOCK`) is not a dense block: the router (gating GEMM, softmax
and top-k, the auxiliary load-balancing loss and its tracker), the ``allgather`` token
dispatcher's permutation with its ``local_map.sum(dim=0).long().cpu()``, ``SequentialMLP``'s
Python loop over the rank's local experts (``experts.py``: one ``MLP`` per expert, its
``linear_fc1``, activation and ``linear_fc2``), the unpermutation. Counted with 2, 4 and 8
experts, top-2, ``add_bias_linear=False`` (megatron-core 0.15.0's ``SequentialMLP`` adds an
expert bias in place on a view, which autograd refuses on one rank):

=========  ============  =============  ===========  =============
experts    forward ops   backward ops   modules      Function nodes
=========  ============  =============  ===========  =============
2          127           125            24           14
4          145           154            30           22
8          181           210            42           38
=========  ============  =============  ===========  =============

i.e. (4 -> 8) 9 forward ops, 14 backward ops, 3 module calls and 4 Function nodes per local
expert over a fixed 109 / 98 / 18 / 6 (100 forward ops as on CUDA), which gives the 2-expert
row to one op (126 in one run, 127 in another: one op follows the random tokens' routing).
Assumptions: the same counts with the ``alltoall`` dispatcher (it builds a CUDA stream at
construction and cannot be run on the CPU); with ``--moe-grouped-gemm`` (``GroupedMLP``,
``TEGroupedMLP``: one grouped GEMM per projection) the experts issue one expert's ops
(``local_experts`` 1); Transformer Engine ``GroupedLinear``'s own per-expert work (its Python
loops, per-expert quantize kernels and cuBLAS launches, NVIDIA/TransformerEngine#1499) is
counted apart per local expert and recipe (:mod:`sim.compute.te_grouped_host`, added by the
shard, :mod:`sim.parallel.decoder_shard`); a MoE-only layer of a hybrid pattern
(``E``) is the MoE block less half a dense block. Which one a model runs is
:attr:`sim.compute.moe_shape.MoEShape.sequential_experts` (False, grouped, unless a run says so).
"""

from __future__ import annotations

from sim.compute.megatron_ops import block_calls, block_ops

COUNTED_WITH = "megatron-core 0.15.0, torch 2.13.0 (CPU), scripts/count_mcore_ops.py"
"""What the counts were taken with (module doc)."""

MOE_BLOCK = (100.0, 98.0, 18.0, 6.0)
"""``(forward ops, backward ops, module calls, Function applies)`` of a MoE block with no local
expert: the fixed part (module doc)."""

MOE_PER_EXPERT = (9.0, 14.0, 3.0, 4.0)
"""The same per local expert (``SequentialMLP``'s loop; module doc)."""


TE_MODULES = {
    "block": 4.0,
    "mtp": 4.0,
    "attention": 2.0,
    "mlp": 2.0,
    "moe_block": 4.0,
    "moe": 2.0,
    "mamba": 2.0,
}
"""Transformer Engine Linear-type modules per layer of Megatron-Core's TE spec, by base kind
(NVIDIA/Megatron-LM@d98e8a64 ``megatron/core/models/gpt/gpt_layer_specs.py::
get_gpt_layer_with_transformer_engine_submodules`` and ``bert/bert_layer_specs.py``): the
attention's ``linear_qkv`` (``TELayerNormColumnParallelLinear``) and ``linear_proj``
(``TERowParallelLinear``), the MLP's ``linear_fc1`` (``TELayerNormColumnParallelLinear``) and
``linear_fc2`` (``TERowParallelLinear``); a MoE layer's experts as ``TEGroupedMLP`` (two
``GroupedLinear``, its router a torch Linear), a Mamba layer's ``in_proj`` and ``out_proj``.
Each costs the host :attr:`sim.hardware.host_ops.HostOverhead.te_module_s` per forward beyond
the torch Linear the op counts stand for (NVIDIA/TransformerEngine#2053 measured ``te.Linear``;
``LayerNormLinear`` and ``GroupedLinear`` taken as one, an assumption).
``TEDotProductAttention`` is not counted (no per-module figure); the embedding and the output
layer are Megatron's own modules (0)."""


def te_modules(kind: str) -> float:
    """Transformer Engine Linear-type modules of one layer of base ``kind`` (:data:`TE_MODULES`;
    0 for the embedding, the head and unknown kinds).

    Example:
        >>> te_modules("block"), te_modules("moe"), te_modules("head")
        (4.0, 2.0, 0.0)
    """
    return TE_MODULES.get(kind, 0.0)


def moe_layer_ops(kind: str, local_experts: float) -> tuple[float, float, float, float]:
    """``(forward ops, backward ops, module calls, Function applies)`` of one ``moe_block`` (or
    a hybrid's MoE-only ``moe`` layer: the block less half a dense block) with
    ``local_experts`` experts on the rank (module doc).

    Example:
        >>> moe_layer_ops("moe_block", 8)
        (172.0, 210.0, 42.0, 38.0)
        >>> moe_layer_ops("moe", 8)[0] == 172.0 - block_ops()[0] / 2
        True
    """
    out = tuple(f + e * local_experts for f, e in zip(MOE_BLOCK, MOE_PER_EXPERT, strict=True))
    if kind == "moe":
        (fwd, bwd), (mods, fns) = block_ops(), block_calls()
        half = (fwd / 2, bwd / 2, mods / 2, fns / 2)
        out = tuple(max(0.0, x - h) for x, h in zip(out, half, strict=True))
    return out  # type: ignore[return-value]


def expert_ops(local_experts: float) -> tuple[float, float, float, float]:
    """The per-expert part of :func:`moe_layer_ops` for ``local_experts`` experts: what a
    rank that holds fewer experts (expert parallelism) does not issue.

    Example:
        >>> expert_ops(4)
        (36.0, 56.0, 12.0, 16.0)
    """
    return tuple(e * local_experts for e in MOE_PER_EXPERT)  # type: ignore[return-value]


__all__ = [
    "COUNTED_WITH",
    "MOE_BLOCK",
    "MOE_PER_EXPERT",
    "TE_MODULES",
    "expert_ops",
    "moe_layer_ops",
    "te_modules",
]
