"""Megatron-LM tensor parallelism: what one of ``t`` ranks communicates and stashes per layer.

Notation: ``b`` micro-batch, ``s`` sequence length, ``h`` hidden, ``a`` heads, ``d`` bytes per
element, ``t`` tensor-parallel size, ``sp`` sequence parallelism.

**Communication** (Shoeybi et al., arXiv:1909.08053, §3, Fig. 3 and 4; Korthikanti et al.,
arXiv:2205.05198, §4.2.2, Fig. 5). A transformer block splits its attention and MLP into a
column-parallel GEMM followed by a row-parallel one, so each of the two needs one all-reduce
of the ``b*s*h*d``-byte hidden state in the forward (operator ``g``) and one in the backward
(operator ``f``): 2 + 2 all-reduces per block. With sequence parallelism each all-reduce
becomes a reduce-scatter and each identity an all-gather, so the forward runs 2 all-gathers and
2 reduce-scatters of the same ``b*s*h*d`` buffer (the same bytes on the wire: a ring all-reduce
is a reduce-scatter followed by an all-gather), and the backward as many. The vocabulary-split
embedding all-reduces (sp: reduce-scatters) its output in the forward; the vocabulary-split
output layer's input is all-reduced in the backward (sp: all-gathered in the forward and
reduce-scattered in the backward), and the vocabulary-parallel cross-entropy exchanges per
token what its loss (:mod:`sim.compute.loss_fusion`) needs (:func:`loss_comm`): the unfused one
all-reduces three ``b*s`` fp32 vectors (max logit, target logit, sum of exponentials;
NVIDIA/Megatron-LM@d98e8a64dd ``megatron/core/tensor_parallel/cross_entropy.py`` lines 130,
146, 150), ``native`` two, the max and the target logits concatenated with the sums
(``megatron/core/fusions/fused_cross_entropy.py`` lines 94 and 112, the ``torch.cat`` of line
42: ``2*b*s`` floats), and Transformer Engine's all-gathers each rank's three floats per token
(NVIDIA/TransformerEngine@8b99682 ``transformer_engine/pytorch/triton/cross_entropy.py``
lines 78-82, only with more than one rank).

**Host ops**: a collective adds one op to its layer's count (:func:`with_comm_ops`, every
sharding path: GPT and BERT :mod:`sim.parallel.shard`, T5 :mod:`sim.parallel.t5_shard`, decoders
:mod:`sim.parallel.decoder_shard`): the host's one ``torch.distributed`` call. Megatron's
``mappings.py`` functions issue one per collective and return their input at ``t = 1``
(NVIDIA/Megatron-LM@d98e8a64dd ``megatron/core/tensor_parallel/mappings.py``: ``_reduce``
27-35, ``_gather_along_first_dim`` 135-146, ``_reduce_scatter_along_first_dim`` 171-186), and
so do Transformer Engine's linear layers, which a Megatron-Core decoder's attention and MLP
collectives go through (NVIDIA/TransformerEngine@d0067d0d ``pytorch/module/layernorm_linear.py``
283-309 and ``linear.py`` 407-412: the input's all-gather, ``gather_along_first_dim``;
``linear.py`` 569-577: the row-parallel output's reduce-scatter or all-reduce;
``pytorch/distributed.py`` 931-957, 1668-1691, 2095-2109: one call each, none on one rank);
so the trace, counted at one rank, holds none. Not the loss's all-reduces: Megatron calls them
on a group of one too, so the loss's own count holds them
(:data:`sim.compute.loss_fusion.LOSS_OPS`); TE's loss all-gather adds two, its output buffer's
``torch.zeros`` and the call, issued only at ``t > 1`` (TransformerEngine@8b99682
``pytorch/triton/cross_entropy.py`` lines 79-82). Assumptions: an FP8 or MXFP8 input gathered
as one call (TE gathers a quantized tensor's data and scales under one coalescing manager,
``distributed.py`` 1606-1640 and 1735-1773 at d0067d0d), and userbuffers (``tp_comm_overlap``)
issuing as many (their all-gather's ``copy_into_buffer``, ``module/base.py`` 607-654; their
reduce-scatter inside the GEMM call).

**The saved input gathered again** (``regather``): with sequence parallelism a column-parallel
linear layer (a block's QKV and first MLP GEMM, the output layer) keeps only its rank's
``1/t`` of its input for the backward and all-gathers it again there for the weight gradient:
Transformer Engine ``LayerNormLinear`` (NVIDIA/TransformerEngine v2.11
``pytorch/module/layernorm_linear.py:416-418`` ``ln_out_needs_gather``, ``:669-693``
``gather_along_first_dim(ln_out, ..., async_op=True)``) and Megatron-Core's own
``ColumnParallelLinear`` (NVIDIA/Megatron-LM@23e00ed ``core/tensor_parallel/layers.py:506-520``).
So the backward runs one more all-gather of ``b*s*h*d`` bytes per column-parallel layer: a
block's backward 4 all-gathers and 2 reduce-scatters. The libraries issue it asynchronously
beside the input-gradient GEMM, as they issue the backward's reduce-scatter beside the weight
gradient; like those, it is timed as the engine times every collective without
``tp_comm_overlap`` (after the compute it follows, not beside it).

**Activations** (Korthikanti et al., Table 2; memory.md §2): a block stashes
``sbh(10 + 24/t + 5as/(ht))`` bytes at 16 bit without sequence parallelism and
``sbh/t (34 + 5as/h)`` with it. The ``10 sbh`` replicated part is the inputs of the two norms
(``4 sbh``), of the QKV and first MLP GEMMs (``2 sbh`` each) and the two dropout masks
(``sbh`` each); in general ``(4d + 2) sbh``. The rest is split over the ``t`` ranks.

**Parameters**, gradients and optimizer states: divided by ``t`` (the norms' and biases'
replicated vectors are left out, as in the paper's count).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.compute.loss_fusion import CROSS_ENTROPY_FUSIONS
from sim.events import EventKind
from sim.trace.schema import LayerProfile

AR, AG, RS = EventKind.ALLREDUCE.value, EventKind.ALL_GATHER.value, EventKind.REDUCE_SCATTER.value

SOURCES = {
    "block_comm": "Shoeybi et al. arXiv:1909.08053 §3 (f and g operators: 2 all-reduces forward, "
    "2 backward per block); Korthikanti et al. arXiv:2205.05198 §4.2.2 (sequence parallel: "
    "all-gather + reduce-scatter)",
    "block_act": "Korthikanti et al. arXiv:2205.05198 Table 2: sbh(10 + 24/t + 5as/(ht)); "
    "sp: sbh/t (34 + 5as/h)",
    "cross_entropy": "Megatron-LM@d98e8a64dd tensor_parallel/cross_entropy.py 130-150: 3 "
    "all-reduces of b*s fp32; fusions/fused_cross_entropy.py 94, 112: 2 (b*s, 2*b*s); "
    "TransformerEngine@8b99682 pytorch/triton/cross_entropy.py 78-82: an all-gather of 3*b*s fp32",
}


@dataclass(frozen=True)
class CommOp:
    """One collective over the tensor-parallel group.

    Attributes:
        kind: ``allreduce``, ``all_gather`` or ``reduce_scatter``.
        nbytes: bytes of the full buffer ``B`` (an all-gather's output, a reduce-scatter's
            input), as nccl-tests counts them.
        host_ops: host ops it adds to its layer's count (module doc): one call; none for the
            loss's all-reduces (counted in the loss's ops), two for TE's loss all-gather.
    """

    kind: str
    nbytes: float
    host_ops: int = 1


@dataclass(frozen=True)
class LayerComm:
    """The tensor-parallel collectives of one layer for one micro-batch, in order.

    Attributes:
        fwd: during the forward.
        bwd: during the input-gradient backward (B or I).
    """

    fwd: tuple[CommOp, ...] = ()
    bwd: tuple[CommOp, ...] = ()


NO_COMM = LayerComm()


def block_comm(
    b: int, s: int, h: int, d: int, t: int, sp: bool, regather: bool = False
) -> LayerComm:
    """Collectives of a transformer block (module doc): forward and backward each 2
    all-reduces of ``b*s*h*d`` bytes, or with ``sp`` 2 all-gathers and 2 reduce-scatters
    (``regather``: the backward 2 all-gathers more, after them)."""
    if t == 1:
        return NO_COMM
    x = float(b * s * h * d)
    ops = (CommOp(AG, x), CommOp(RS, x)) * 2 if sp else (CommOp(AR, x),) * 2
    return LayerComm(ops, ops + regathered(x, 2, sp and regather))


def regathered(nbytes: float, layers: int, regather: bool) -> tuple[CommOp, ...]:
    """The backward's all-gathers of ``layers`` column-parallel layers' saved inputs of
    ``nbytes`` each (module doc), or none."""
    return (CommOp(AG, nbytes),) * layers if regather else ()


def embedding_comm(b: int, s: int, h: int, d: int, t: int, sp: bool) -> LayerComm:
    """Vocabulary-parallel embedding: its output is all-reduced (``sp``: reduce-scattered)."""
    if t == 1:
        return NO_COMM
    return LayerComm((CommOp(RS if sp else AR, float(b * s * h * d)),))


def loss_comm(b: int, s: int, t: int, fusion: str = "unfused") -> tuple[CommOp, ...]:
    """The forward collectives of the vocabulary-parallel loss ``fusion`` over ``b*s`` tokens
    on ``t`` ranks (module doc): ``unfused`` three all-reduces of ``4*b*s`` bytes, ``native``
    two of ``4*b*s`` and ``8*b*s``, ``te`` one all-gather of ``12*b*s*t`` (its output); none
    at ``t = 1``. The backward has none.

    Raises:
        ValueError: a fusion not in :data:`~sim.compute.loss_fusion.CROSS_ENTROPY_FUSIONS`.
    """
    if fusion not in CROSS_ENTROPY_FUSIONS:
        raise ValueError(f"cross_entropy_fusion must be one of {CROSS_ENTROPY_FUSIONS}")
    if t == 1:
        return ()
    n = 4.0 * b * s  # one fp32 per token
    if fusion == "native":
        return CommOp(AR, n, host_ops=0), CommOp(AR, 2 * n, host_ops=0)
    if fusion == "te":
        return (CommOp(AG, 3 * n * t, host_ops=2),)
    return (CommOp(AR, n, host_ops=0),) * 3


def with_comm_ops(layer: LayerProfile, comm: LayerComm) -> LayerProfile:
    """``layer`` with the host ops its collectives ``comm`` add to its ``fwd_ops`` and
    ``bwd_ops`` (:attr:`CommOp.host_ops` each, module doc); a count the trace lacks (None)
    stays None.

    Example: a sequence-parallel block's two all-gathers and two reduce-scatters each way.
        >>> blk = LayerProfile("block.0", 1.0, 2.0, 0.0, 0.0, 0.0, fwd_ops=60.0, bwd_ops=90.0)
        >>> out = with_comm_ops(blk, block_comm(1, 8, 4, 2, 2, True))
        >>> out.fwd_ops, out.bwd_ops
        (64.0, 94.0)
    """
    add_f, add_b = (sum(op.host_ops for op in ops) for ops in (comm.fwd, comm.bwd))
    fwd = None if layer.fwd_ops is None else layer.fwd_ops + add_f
    bwd = None if layer.bwd_ops is None else layer.bwd_ops + add_b
    return replace(layer, fwd_ops=fwd, bwd_ops=bwd)


def head_comm(b: int, s: int, h: int, d: int, t: int, sp: bool, regather: bool = False,
              fusion: str = "unfused") -> LayerComm:  # fmt: skip
    """Vocabulary-parallel output layer and cross-entropy (module doc; ``regather``: the
    output layer's input all-gathered again in the backward with ``sp``; ``fusion``: the loss,
    :func:`loss_comm`)."""
    if t == 1:
        return NO_COMM
    x, ce = float(b * s * h * d), loss_comm(b, s, t, fusion)
    if sp:
        return LayerComm((CommOp(AG, x),) + ce, (CommOp(RS, x),) + regathered(x, 1, regather))
    return LayerComm(ce, (CommOp(AR, x),))


def layer_comm(kind: str, b: int, s: int, h: int, d: int, t: int, sp: bool, regather: bool = False,
               fusion: str = "unfused") -> LayerComm:  # fmt: skip
    """The collectives of a layer of ``kind`` (``embedding``, ``head``; anything else is a
    block): :func:`embedding_comm`, :func:`head_comm` (its loss ``fusion``) or
    :func:`block_comm`."""
    if kind == "embedding":
        return embedding_comm(b, s, h, d, t, sp)
    if kind == "head":
        return head_comm(b, s, h, d, t, sp, regather, fusion)
    return block_comm(b, s, h, d, t, sp, regather)


def parallel_modules(kind: str, sp: bool) -> int:
    """Tensor-parallel modules of a layer, each of which costs the per-module overhead
    (:attr:`~sim.hardware.parts.GPU.tp_module_overhead_s`): a block's 2 column- and 2
    row-parallel linears (Shoeybi et al. §3) and, with sequence parallelism, its 2 norms; the
    vocabulary-parallel embedding; the output layer (and its norm with ``sp``). As the replay
    parallelizes them (backends/torch/parallel/tensor.py); the loss's vocabulary-parallel ops
    are not counted."""
    if kind == "block":
        return 6 if sp else 4
    if kind == "head":
        return 2 if sp else 1
    return 1


def replicated_act_bytes(b: int, s: int, h: int, d: int) -> float:
    """Bytes of a block's stash every rank keeps whole without sequence parallelism:
    ``(4d + 2) sbh`` (``10 sbh`` at 16 bit; module doc)."""
    return float((4 * d + 2) * s * b * h)


def block_act_bytes_tp(act_bytes: float, b: int, s: int, h: int, d: int, t: int, sp: bool) -> float:
    """A block's stash on one of ``t`` ranks, from its unsplit stash ``act_bytes``:
    ``(act - rep)/t + rep`` with ``rep`` = :func:`replicated_act_bytes`, or ``act/t`` with
    ``sp`` (Korthikanti et al., Table 2)."""
    if sp:
        return act_bytes / t
    rep = min(replicated_act_bytes(b, s, h, d), act_bytes)
    return (act_bytes - rep) / t + rep


def korthikanti_act_bytes(b: int, s: int, h: int, a: int, t: int, sp: bool) -> float:
    """Korthikanti et al.'s Table 2 per-layer bytes at 16 bit: ``sbh(10 + 24/t + 5as/(ht))``,
    or ``sbh/t (34 + 5as/h)`` with sequence parallelism."""
    sbh = s * b * h
    if sp:
        return sbh / t * (34 + 5 * a * s / h)
    return sbh * (10 + 24 / t + 5 * a * s / (h * t))


def aggregate(ops: list[CommOp] | tuple[CommOp, ...]) -> tuple[tuple[str, float, int], ...]:
    """``(kind, bytes each, count)`` of ``ops``, kinds in order of first appearance and equal
    ``(kind, bytes)`` counted once (the engine times each group as ``count`` collectives)."""
    counts: dict[tuple[str, float], int] = {}
    for op in ops:
        counts[(op.kind, op.nbytes)] = counts.get((op.kind, op.nbytes), 0) + 1
    kinds = list(dict.fromkeys(kind for kind, _ in counts))
    return tuple((k, nb, c) for kind in kinds for (k, nb), c in counts.items() if k == kind)
