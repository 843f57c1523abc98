"""Kernels of the embedding and head layers of a GPT or BERT stack, and layer times.

With ``T = b*s`` tokens, ``h`` hidden, ``V`` vocabulary, ``d`` bytes per element:

* embedding: memory-bound; forward moves ``8bs + (2b + 1)*s*h*d`` bytes (token ids, looked-up
  rows, the sum; plus ``2bsh*d`` for BERT's LayerNorm); backward reads the output gradient and
  writes a dense gradient of both tables, ``b*s*h*d + (V + s)*h*d`` (PyTorch's default dense
  embedding gradient), all weight-gradient (as :mod:`sim.trace.generator` documents);
* GPT head: final norm (``2*T*h*d``), logits GEMM ``[T, h] @ [h, V]``, and Megatron's fp32
  vocabulary-parallel cross-entropy (:func:`cross_entropy_kernels`), or a fused loss
  (:mod:`sim.compute.loss_fusion`); backward: the loss
  gradient, ``dX = dY W^T`` and ``dW = X^T dY``, the norm backward;
* BERT head: the MLM transform (GEMM ``[h, h]``, GELU, LayerNorm), the decoder GEMM and loss as
  above, the pooler ``[b, h] @ [h, h]`` and the NSP classifier ``[b, h] @ [h, 2]``.
"""

from __future__ import annotations

from sim.compute.kernels import Kernel, PhaseTime, gemm, mem, phase_time
from sim.compute.loss_fusion import fused_kernels
from sim.compute.transformer import BlockTimes
from sim.hardware.gpu_compute import ComputeSpec


def embedding_kernels(
    kind: str, b: int, s: int, h: int, vocab: int, d: int
) -> tuple[list[Kernel], list[Kernel]]:
    """``(forward, backward)`` kernels of the embedding layer (module doc)."""
    fwd = 8 * b * s + (2 * b + 1) * s * h * d + (2 * b * s * h * d if kind == "bert" else 0)
    return [mem("embedding", fwd)], [mem("embedding_bwd", b * s * h * d + (vocab + s) * h * d)]


def cross_entropy_kernels(
    t: int, vocab: int, d: int, fusion: str = "unfused"
) -> tuple[list[Kernel], list[Kernel]]:
    """``(forward, backward)`` memory-bound kernels of Megatron's fp32 cross-entropy over
    ``t`` tokens and ``vocab`` logits (the vocabulary shard of one tensor rank), ``N = t*vocab``;
    ``fusion`` ``native`` or ``te``: the fused losses of ``--cross-entropy-loss-fusion``
    (:mod:`sim.compute.loss_fusion`).

    Counted from the code, each pass reading and writing the whole logits: the 16-bit logits
    made fp32 (``float16_to_fp32`` of Megatron-DeepSpeed's ``GPTModelPipe``,
    ``output.float()`` of Megatron-LM's ``post_language_model_processing``; ``N*(d + 4)``,
    nothing for fp32), then ``_VocabParallelCrossEntropy.forward``
    (``megatron/core/tensor_parallel/cross_entropy.py``): ``max`` over the vocabulary (reads
    ``4N``), the max subtracted (``8N``), ``exp`` (``8N``), ``sum`` (``4N``), ``div_`` by the sum
    (``8N``, the softmax saved for backward). Backward: ``grad_input.mul_(grad_output)``
    (``8N``) and the fp32 gradient back to 16 bits (``N*(4 + d)``). The target gathers, the
    loss and the three all-reduces of ``t`` floats are small."""
    fused = fused_kernels(fusion, t, vocab, d)
    if fused is not None:
        return fused
    n = float(t * vocab)
    half = d < 4
    fwd = [mem("logits_to_fp32", n * (d + 4))] if half else []
    fwd += [
        mem("ce_max", 4 * n),
        mem("ce_sub_max", 8 * n),
        mem("ce_exp", 8 * n),
        mem("ce_sum", 4 * n),
        mem("ce_div", 8 * n),
    ]
    bwd = [mem("ce_grad_mul", 8 * n)]
    bwd += [mem("logits_grad_to_16bit", n * (4 + d))] if half else []
    return fwd, bwd


def head_kernels(
    kind: str, b: int, s: int, h: int, vocab: int, d: int, ce_fusion: str = "unfused"
) -> tuple[list[Kernel], list[Kernel], list[Kernel]]:
    """``(forward, backward input, backward weight)`` kernels of the head (module doc);
    ``ce_fusion``: the loss (:func:`cross_entropy_kernels`)."""
    t = b * s
    fwd = (
        [mem("final_norm", 2 * t * h * d)]
        if kind == "gpt"
        else [
            gemm("mlm_dense", t, h, h, d),
            mem("mlm_gelu", 2 * t * h * d),
            mem("mlm_norm", 2 * t * h * d),
        ]
    )
    ce_fwd, ce_bwd = cross_entropy_kernels(t, vocab, d, ce_fusion)
    fwd += [gemm("logits", t, vocab, h, d), *ce_fwd]
    bwd_in = [*ce_bwd, gemm("d_logits_in", t, h, vocab, d)]
    bwd_w = [gemm("d_logits_w", h, vocab, t, d)]
    if kind == "gpt":
        bwd_in.append(mem("final_norm_bwd", 3 * t * h * d))
    else:
        fwd += [gemm("pooler", b, h, h, d), gemm("nsp", b, 2, h, d)]
        bwd_in += [
            mem("mlm_norm_bwd", 3 * t * h * d),
            mem("mlm_gelu_bwd", 3 * t * h * d),
            gemm("d_mlm_dense_in", t, h, h, d),
            gemm("d_pooler_in", b, h, h, d),
        ]
        bwd_w += [gemm("d_mlm_dense_w", h, h, t, d), gemm("d_pooler_w", h, h, b, d)]
    return fwd, bwd_in, bwd_w


def _times(
    fwd: list[Kernel], bwd_in: list[Kernel], bwd_w: list[Kernel], spec: ComputeSpec, dtype: str
) -> BlockTimes:
    return BlockTimes(
        phase_time(fwd, spec, dtype),
        phase_time(bwd_in, spec, dtype),
        phase_time(bwd_w, spec, dtype),
    )


def embedding_times(
    kind: str, b: int, s: int, h: int, vocab: int, spec: ComputeSpec, dtype: str
) -> BlockTimes:
    """Seconds of the embedding layer; its whole backward is weight-gradient."""
    d = 4 if dtype in ("fp32", "float32") else 2
    fwd, bwd = embedding_kernels(kind, b, s, h, vocab, d)
    return _times(fwd, [], bwd, spec, dtype)


def head_times(
    kind: str,
    b: int,
    s: int,
    h: int,
    vocab: int,
    spec: ComputeSpec,
    dtype: str,
    ce_fusion: str = "unfused",
) -> BlockTimes:
    """Seconds of the head layer (module doc); ``ce_fusion``: its loss
    (:func:`cross_entropy_kernels`)."""
    d = 4 if dtype in ("fp32", "float32") else 2
    return _times(*head_kernels(kind, b, s, h, vocab, d, ce_fusion), spec, dtype)


EMPTY = PhaseTime(0.0, 0.0, 0.0, 0.0, 0)
"""A phase with no kernels."""
