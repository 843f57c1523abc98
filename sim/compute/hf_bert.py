"""Hugging Face's ``BertForSequenceClassification`` as eager PyTorch of 2021 runs it: the model of
PatrickStar's benchmarks (``MODEL_TYPE=BERT``).

PatrickStar's benchmark builds ``transformers.BertForSequenceClassification`` (Tencent/PatrickStar
@2384535 ``examples/model_builder.py`` ``build_transformer_model``), with no fused kernels (its
only kernel options, tiling and activation offload, are off in the published runs:
``examples/run_transformers.sh`` ``TILING=0``, ``ACT_OFFLOAD=0``). The layer's code is the one
PatrickStar copied into ``examples/optimizations/ps_tile_modeling_bert.py`` (``BertSelfAttention``
lines 72-230, ``BertSelfOutput`` 232-244, ``BertIntermediate``/``BertOutput`` 304-348,
``BertForSequenceClassification`` 759-849). Against the fused block of
:mod:`sim.compute.transformer` (``fused_qkv=False``, ``math`` attention, no causal mask) it runs
these kernels more, with ``T = b*s`` tokens, ``S = b*a*s^2`` scores and ``d`` bytes per element:

* **bias adds**: ``nn.Linear`` on a 3-D ``[b, s, h]`` input is ``matmul`` then ``output.add_(bias)``
  in PyTorch of the time (``torch/nn/functional.py`` ``linear`` and, from 1.7, ATen's
  ``native/Linear.cpp`` ``linear``: ``addmm`` with its fused bias only for 2-D input; the
  flattening of contiguous 3-D input onto ``addmm`` came later): one read and write of each
  linear's output, ``2*T*n*d`` for an output width ``n`` (query, key, value, dense ``h``;
  intermediate ``4h``; output ``h``). Backward: each bias's gradient is a sum over the ``T``
  tokens of the output gradient (``T*n*d`` read), a weight-gradient kernel.
* **scale and mask**: ``attention_scores / math.sqrt(head_size)`` and ``+ attention_mask`` are
  two kernels over the scores (``2*S*d`` each; the ``[b, 1, 1, s]`` mask broadcast is small);
  the division's backward is one more (``2*S*d``), the addition's passes the gradient on.
* **layout copies**: ``torch.matmul`` of the ``[b, a, s, hd]`` views that ``transpose_for_scores``
  makes (``permute(0, 2, 1, 3)``) reshapes them to ``[b*a, s, hd]``, which cannot be a view of
  the permuted strides, so query, key and value are copied (``2*T*h*d`` each), and
  ``context_layer.permute(0, 2, 1, 3).contiguous()`` is a fourth copy; backward copies the four
  gradients back (``reshape`` of the permuted gradient): ``4 * 2*T*h*d`` each way.
* **gradient sums**: the layer input feeds the query, key and value linears and the residual,
  so its gradient is summed from four terms, two additions more than a fused QKV's
  (``3*T*h*d`` each).

The head is the pooler (``[b, h] @ [h, h]`` on the first token, ``tanh``), dropout and the
classifier ``[b, h] @ [h, num_labels]`` (2 labels: ``BertConfig``'s default ``num_labels``) with
cross-entropy over two logits: no vocabulary projection, no copy of the word embedding.
"""

from __future__ import annotations

from sim.compute.kernels import Kernel, gemm, mem, phase_time
from sim.compute.transformer import BlockShape, BlockTimes, block_bwd, block_fwd
from sim.hardware.gpu_compute import ComputeSpec

NUM_LABELS = 2
"""``BertConfig().num_labels`` (transformers' ``PretrainedConfig`` default), which PatrickStar's
``model_builder.py`` leaves as it is."""


TENSORS = {"embedding": (2, 3), "block": (10, 6), "head": (2, 2)}
"""``(vectors, matrices)``: parameter tensors of each layer of ``BertForSequenceClassification``
(``ps_tile_modeling_bert.py`` above): the word, position and token-type embeddings and the
embedding LayerNorm's weight and bias; per layer the query, key, value, attention-output,
intermediate and output weights, their six biases and two LayerNorms' weights and biases; the
pooler's and classifier's weights and biases."""


def hf_shape(hidden: int, heads: int, seq_len: int, ffn_hidden: int) -> BlockShape:
    """The block shape of a Hugging Face BERT layer: three ``[h, h]`` projections, dropout,
    bidirectional ``math`` attention."""
    return BlockShape(hidden, heads, seq_len, ffn_hidden, fused_qkv=False, causal=False)


def _widths(shape: BlockShape) -> dict[str, int]:
    h = shape.hidden
    return {"q": h, "k": h, "v": h, "proj": h, "up": shape.ffn_hidden, "down": h}


def extra_fwd(shape: BlockShape, b: int, d: int) -> list[Kernel]:
    """The kernels a Hugging Face BERT layer runs in forward beyond :func:`block_fwd`'s
    (module doc): bias adds, scale, mask addition, four layout copies."""
    t, h = b * shape.seq_len, shape.hidden
    scores = float(b * shape.heads * shape.seq_len * shape.seq_len)
    out = [mem(f"{n}_bias_add", 2 * t * w * d) for n, w in _widths(shape).items()]
    out += [mem("scores_scale", 2 * scores * d), mem("scores_mask_add", 2 * scores * d)]
    out += [mem(f"{n}_layout_copy", 2 * t * h * d) for n in ("q", "k", "v", "context")]
    return out


def extra_bwd(shape: BlockShape, b: int, d: int) -> tuple[list[Kernel], list[Kernel]]:
    """``(input_gradient, weight_gradient)`` kernels beyond :func:`block_bwd`'s (module doc):
    the scale's backward, four layout copies and two gradient sums; the bias gradients."""
    t, h = b * shape.seq_len, shape.hidden
    scores = float(b * shape.heads * shape.seq_len * shape.seq_len)
    grad_in = [mem("scores_scale_bwd", 2 * scores * d)]
    grad_in += [mem(f"d_{n}_layout_copy", 2 * t * h * d) for n in ("q", "k", "v", "context")]
    grad_in += [mem(f"input_grad_sum_{i}", 3 * t * h * d) for i in (1, 2)]
    grad_w = [mem(f"d_{n}_bias", t * w * d) for n, w in _widths(shape).items()]
    return grad_in, grad_w


def hf_block_kernels(
    shape: BlockShape, b: int, d: int
) -> tuple[list[Kernel], list[Kernel], list[Kernel]]:
    """``(forward, input_gradient, weight_gradient)`` kernels of one Hugging Face BERT layer at
    micro-batch ``b``: :func:`block_fwd`/:func:`block_bwd` of ``shape`` and the extras."""
    grad_in, grad_w = block_bwd(shape, b, d)
    more_in, more_w = extra_bwd(shape, b, d)
    return block_fwd(shape, b, d) + extra_fwd(shape, b, d), grad_in + more_in, grad_w + more_w


def hf_block_times(shape: BlockShape, b: int, spec: ComputeSpec, dtype: str) -> BlockTimes:
    """Seconds of one Hugging Face BERT layer at micro-batch ``b`` on ``spec`` (module doc).

    Raises:
        ValueError: ``b < 1``.
    """
    if b < 1:
        raise ValueError(f"micro-batch size must be >= 1, got {b}")
    return _times(hf_block_kernels(shape, b, _bytes(dtype)), spec, dtype)


def classifier_params(h: int) -> int:
    """Parameters of the pooler and classifier: ``h^2 + h + (h + 1)*num_labels``."""
    return h * h + h + (h + 1) * NUM_LABELS


def classifier_kernels(b: int, h: int, d: int) -> tuple[list[Kernel], list[Kernel], list[Kernel]]:
    """``(forward, input_gradient, weight_gradient)`` of the pooler, dropout, classifier and
    two-logit cross-entropy (module doc); the pooler's input is the first token of each of
    ``b`` samples."""
    n = NUM_LABELS
    fwd = [
        gemm("pooler", b, h, h, d),
        mem("pooler_bias_tanh", 4 * b * h * d),
        mem("classifier_dropout", (2 * d + 1) * b * h),
        gemm("classifier", b, n, h, d),
        mem("cross_entropy", 4 * b * n * 4),
    ]
    grad_in = [
        mem("cross_entropy_bwd", 4 * b * n * 4),
        gemm("d_classifier_in", b, h, n, d),
        mem("classifier_dropout_bwd", (2 * d + 1) * b * h),
        mem("tanh_bwd", 3 * b * h * d),
        gemm("d_pooler_in", b, h, h, d),
    ]
    grad_w = [gemm("d_classifier_w", h, n, b, d), gemm("d_pooler_w", h, h, b, d)]
    return fwd, grad_in, grad_w


def classifier_times(b: int, h: int, spec: ComputeSpec, dtype: str) -> BlockTimes:
    """Seconds of the classification head at micro-batch ``b`` (:func:`classifier_kernels`)."""
    return _times(classifier_kernels(b, h, _bytes(dtype)), spec, dtype)


def _bytes(dtype: str) -> int:
    return 4 if dtype in ("fp32", "float32") else 2


def _times(phases: tuple[list[Kernel], ...], spec: ComputeSpec, dtype: str) -> BlockTimes:
    """The forward, input-gradient and weight-gradient kernels' seconds as one block's."""
    return BlockTimes(*(phase_time(kernels, spec, dtype) for kernels in phases))
