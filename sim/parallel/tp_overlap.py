"""Tensor-parallel collectives overlapped with the GEMMs beside them (sequence parallelism).

With sequence parallelism a transformer block's forward all-gathers the norm's output before
the column-parallel GEMM (QKV, FC1) and reduce-scatters the row-parallel GEMM's output (the
attention projection, FC2); its backward all-gathers the output gradient before the
row-parallel dgrad and reduce-scatters the column-parallel dgrad's output
(:mod:`sim.parallel.megatron`). Two implementations overlap them with the GEMMs:

* **Transformer Engine userbuffers** (Megatron-LM ``--tp-comm-overlap``; TE
  ``transformer_engine/pytorch/module/base.py::initialize_ub`` defaults at d0067d0d):
  ``qkv_fprop``/``fc1_fprop`` and ``proj_dgrad``/``fc2_dgrad`` **ring-exchange** (the GEMM
  split in ``t`` chunks, each chunk's all-gather step a peer copy on the copy engines beside
  the previous chunk's GEMM; 1 SM, no SM margin); ``proj_fprop``/``fc2_fprop`` **pipeline**
  (the GEMM in 4 splits, each split's reduce-scatter on 16 SMs beside the next split's GEMM,
  which runs with a 16-SM margin); ``qkv_wgrad``/``fc1_wgrad`` **bulk** (the dgrad output's
  reduce-scatter beside the whole weight-gradient GEMM, 16 SMs, margin). Expert linears are
  never overlapped (Megatron-LM ``extensions/transformer_engine.py``).
* **torch's AsyncTP** (torchtitan ``compile.enable_async_tensor_parallel``; torch
  ``_inductor/fx_passes/micro_pipeline_tp.py``, ``distributed/_symmetric_memory``): every
  all-gather -> matmul and matmul -> reduce-scatter of the compiled block (forward and
  backward, the backward's reduce-scatter beside its dgrad) as a ring of ``t`` chunks, copies
  on the copy engines.

Per collective of full-buffer time ``C`` (the communicator's uncontended time, as the engine
times a collective) beside a GEMM of ``G`` seconds, split in ``n`` chunks of ``g`` seconds each
(the kernel model's time of the chunk's shape, so the chunks' tile and wave losses count; times
``sm / (sm - margin)`` under an SM margin, an assumption: a GEMM's time scales with the SMs it
has), the pair takes:

* ring-exchange: ``g + (n - 1) max(g, C / (n - 1))`` with ``n = t`` (each of the ``t - 1``
  steps moves ``1/t`` of the buffer);
* pipeline: ``g + (n - 1) max(g, C / n) + C / n`` (split ``i``'s reduce-scatter beside split
  ``i + 1``'s GEMM; the last one after);
* bulk: ``max(G', C)``.

The pair's time less ``G`` is added to the compute (the engine runs the collective beside it,
holding its links: :mod:`sim.engine.tensor_collectives`). Not modelled: the userbuffers
running at another bandwidth than NCCL's ring (assumption: the same), and the extra all-gather
of the saved input that TE overlaps with the QKV/FC1 dgrad (taken as hidden under
``tp_comm_overlap``; without it the backward runs it as a collective of its own,
:mod:`sim.parallel.megatron`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.compute.kernels import Kernel, kernel_time_s
from sim.hardware.gpu_compute import ComputeSpec
from sim.parallel.megatron import AG, RS, LayerComm

METHODS = ("ring_exchange", "pipeline", "bulk")
TE_MARGIN_SMS = 16
"""SMs of a pipeline or bulk overlap's communication kernels, taken from the GEMM
(``num_sm = 16``, ``set_sm_margin = True``: TE ``module/base.py::get_default_config``)."""
TE_PIPELINE_SPLITS = 4
"""``num_splits = 4`` of TE's pipeline method."""

ATTN_IN = ("qkv", "q", "k", "v")
MLP_IN = ("gate", "up")


@dataclass(frozen=True)
class Implementation:
    """How one framework overlaps each of a block's sequence-parallel collectives.

    Attributes:
        name: what it is (for notes).
        fwd_ag, fwd_rs, bwd_ag, bwd_rs: the method (:data:`METHODS`) of each.
        bwd_rs_beside: the GEMM the backward reduce-scatter runs beside: ``wgrad`` (TE's
            bulk overlap) or ``dgrad`` (AsyncTP's fused matmul-reduce-scatter).
        margin_sms: SMs taken from a GEMM by each method.
        source: where it is defined.
    """

    name: str
    fwd_ag: str
    fwd_rs: str
    bwd_ag: str
    bwd_rs: str
    bwd_rs_beside: str
    margin_sms: tuple[tuple[str, int], ...]
    source: str


TE_USERBUFFERS = Implementation(
    "Transformer Engine userbuffers",
    "ring_exchange",
    "pipeline",
    "ring_exchange",
    "bulk",
    "wgrad",
    (("ring_exchange", 0), ("pipeline", TE_MARGIN_SMS), ("bulk", TE_MARGIN_SMS)),
    "TE transformer_engine/pytorch/module/base.py::initialize_ub (methods, get_default_config)",
)
ASYNC_TP = Implementation(
    "torch AsyncTP (micro-pipelined TP)",
    "ring_exchange",
    "ring_exchange",
    "ring_exchange",
    "ring_exchange",
    "dgrad",
    (("ring_exchange", 0),),
    "torch/_inductor/fx_passes/micro_pipeline_tp.py; torch/distributed/_symmetric_memory "
    "(fused_all_gather_matmul, fused_matmul_reduce_scatter: t chunks, copy-engine copies)",
)


@dataclass(frozen=True)
class Partners:
    """The GEMMs beside each collective of a layer, aligned with its :class:`LayerComm`.

    Attributes:
        fwd: per forward collective, the GEMM kernels it overlaps (empty: none).
        bwd: per backward collective, the dgrad GEMM kernels beside it.
        bwd_wgrad: per backward collective, the wgrad GEMM kernels beside it.
    """

    fwd: tuple[tuple[Kernel, ...], ...] = ()
    bwd: tuple[tuple[Kernel, ...], ...] = ()
    bwd_wgrad: tuple[tuple[Kernel, ...], ...] = ()


def partners(comm: LayerComm, fwd: list[Kernel], dx: list[Kernel], dw: list[Kernel]) -> Partners:
    """The GEMMs beside ``comm``'s collectives, from the layer's forward, input-gradient and
    weight-gradient kernels on the rank: the attention's pair (all-gather before QKV,
    reduce-scatter after the projection) where the layer has a projection, then a dense MLP's
    (before FC1 = gate/up, after FC2 = down), matched to the layer's first all-gather and
    reduce-scatter pairs in order; other collectives (experts' rows, embedding, head) get none.
    Without sequence parallelism (all-reduces) nothing is paired."""
    names = {k.name: k for k in fwd + dx + dw}
    pairs: list[tuple[tuple[str, ...], str]] = []
    if "proj" in names:
        pairs.append((ATTN_IN, "proj"))
    if "down" in names and any(n in names for n in MLP_IN):
        pairs.append((MLP_IN, "down"))

    def pick(prefix: str, suffix: str, which: tuple[str, ...]) -> tuple[Kernel, ...]:
        return tuple(
            names[f"{prefix}{n}{suffix}"] for n in which if f"{prefix}{n}{suffix}" in names
        )

    f_out: list[tuple[Kernel, ...]] = []
    b_out: list[tuple[Kernel, ...]] = []
    w_out: list[tuple[Kernel, ...]] = []
    for i, op in enumerate(comm.fwd):
        j, second = divmod(i, 2)
        if j >= len(pairs) or op.kind != (RS if second else AG):
            f_out.append(())
            continue
        ins, out = pairs[j]
        f_out.append(pick("", "", (out,)) if second else pick("", "", ins))
    for i, op in enumerate(comm.bwd):
        j, second = divmod(i, 2)
        if j >= len(pairs) or op.kind != (RS if second else AG):
            b_out.append(())
            w_out.append(())
            continue
        ins, out = pairs[j]
        if second:  # reduce-scatter of the column-parallel GEMM's input gradient
            b_out.append(pick("d_", "_in", ins))
            w_out.append(pick("d_", "_w", ins))
        else:  # all-gather of the output gradient before the row-parallel dgrad
            b_out.append(pick("d_", "_in", (out,)))
            w_out.append(())
    return Partners(tuple(f_out), tuple(b_out), tuple(w_out))


@dataclass(frozen=True)
class OverlapOp:
    """A collective the engine runs beside its GEMM (module doc).

    Attributes:
        kind: ``all_gather`` or ``reduce_scatter``.
        nbytes: its full buffer's bytes.
        count: how many such pairs (layers) the action has.
        method: one of :data:`METHODS`.
        gemm_s: the GEMM's own seconds (already in the action's compute).
        chunk_s: seconds of one chunk of it, under the method's SM margin.
        chunks: ``t`` (ring-exchange), 4 (pipeline) or 1 (bulk).
    """

    kind: str
    nbytes: float
    count: int
    method: str
    gemm_s: float
    chunk_s: float
    chunks: int

    def pair_s(self, comm_s: float) -> float:
        """Seconds of one GEMM with its collective of ``comm_s`` beside it (module doc).

        Example:
            >>> op = OverlapOp("all_gather", 1.0, 1, "ring_exchange", 4.0, 1.0, 4)
            >>> op.pair_s(1.5), op.pair_s(6.0)  # hidden; the collective is longer
            (4.0, 7.0)
        """
        g, n = self.chunk_s, self.chunks
        if self.method == "bulk" or n < 2:
            return max(g * max(n, 1), comm_s)
        if self.method == "ring_exchange":
            return g + (n - 1) * max(g, comm_s / (n - 1))
        c = comm_s / n
        return g + (n - 1) * max(g, c) + c

    def extra_s(self, comm_s: float) -> float:
        """Seconds the pair adds to the action's compute: ``count * (pair - G)``."""
        return self.count * max(0.0, self.pair_s(comm_s) - self.gemm_s)


def _chunk(kern: Kernel, n: int) -> Kernel:
    """``kern`` on ``1/n`` of its rows (``m``; of ``k`` for a weight gradient, whose rows are
    the reduction over tokens)."""
    if kern.name.endswith("_w"):
        k = max(1, kern.k // n)
        return replace(kern, k=k, flops=kern.flops * k / kern.k, bytes=kern.bytes / n)
    m = max(1, kern.m // n)
    return replace(kern, m=m, flops=kern.flops * m / kern.m, bytes=kern.bytes * m / kern.m)


def overlap_op(
    kind: str,
    nbytes: float,
    method: str,
    kernels: tuple[Kernel, ...],
    spec: ComputeSpec,
    dtype: str,
    tp: int,
    margin_sms: int = 0,
) -> OverlapOp:
    """The :class:`OverlapOp` of one collective beside ``kernels`` (module doc).

    Raises:
        ValueError: an unknown method.
    """
    if method not in METHODS:
        raise ValueError(f"unknown overlap method {method!r}; use one of {', '.join(METHODS)}")
    n = {"ring_exchange": tp, "pipeline": TE_PIPELINE_SPLITS, "bulk": 1}[method]
    slow = spec.sm_count / (spec.sm_count - margin_sms) if 0 < margin_sms < spec.sm_count else 1.0
    full = sum(kernel_time_s(k, spec, dtype) for k in kernels)
    chunk = sum(kernel_time_s(_chunk(k, n), spec, dtype) for k in kernels) if n > 1 else full
    return OverlapOp(kind, nbytes, 1, method, full, chunk * slow, n)


def merge(ops: list[OverlapOp]) -> tuple[OverlapOp, ...]:
    """``ops`` with equal ones merged (their counts summed), first-seen order."""
    counts: dict[OverlapOp, int] = {}
    for op in ops:
        key = replace(op, count=1)
        counts[key] = counts.get(key, 0) + op.count
    return tuple(replace(k, count=c) for k, c in counts.items())


def split_comm(
    comm: LayerComm,
    pair: Partners,
    impl: Implementation,
    spec: ComputeSpec,
    dtype: str,
    tp: int,
) -> tuple[tuple[list, list], tuple[list, list]]:
    """A layer's collectives under ``impl``: ``((forward exposed, forward overlapped),
    (backward exposed, backward overlapped))``, the exposed ones as
    :class:`~sim.parallel.megatron.CommOp` s (run after the compute, as without overlap), the
    others as :class:`OverlapOp` s; a collective with no GEMM beside it stays exposed."""
    margins = dict(impl.margin_sms)
    out = []
    for phase, ops, beside in (
        ("fwd", comm.fwd, pair.fwd),
        ("bwd", comm.bwd, pair.bwd),
    ):
        exposed: list = []
        hidden: list = []
        for i, op in enumerate(ops):
            gemms = beside[i] if i < len(beside) else ()
            method = getattr(impl, f"{phase}_{'ag' if op.kind == AG else 'rs'}")
            if phase == "bwd" and op.kind == RS and impl.bwd_rs_beside == "wgrad":
                gemms = pair.bwd_wgrad[i] if i < len(pair.bwd_wgrad) else ()
            if not gemms or op.kind not in (AG, RS):
                exposed.append(op)
                continue
            args = (op.kind, op.nbytes, method, gemms, spec, dtype, tp, margins.get(method, 0))
            hidden.append(overlap_op(*args))
        out.append((exposed, hidden))
    return out[0], out[1]
