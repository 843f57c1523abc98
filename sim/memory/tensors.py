"""A layer's parameter tensors, grouped as the frameworks register them.

Chunk packing (PatrickStar) and the largest-parameter buffers of DeepSpeed need the parameter
tensors, not only their total. PatrickStar registers a module's own parameters as one list
(``_post_init_method``: ``module.named_parameters(recurse=False)`` appended together by
``client.append_tensor``, ``patrickstar/core/preprocess.py``), so a Linear's weight and bias
form one group that must fit in one chunk.

A trace's :class:`~sim.trace.schema.LayerProfile` carries only ``param_bytes``. For the
transformer layers of :mod:`sim.trace.generator` the groups follow from its formulas:

* ``block.*``: ``12h^2 + 13h`` parameters (``block_params``, feed-forward ``4h``), in GPT-2's
  module order (``GPT2Block.__init__``): LayerNorm ``2h``, QKV ``3h^2 + 3h``, projection
  ``h^2 + h``, LayerNorm ``2h``, fc1 ``4h^2 + 4h``, fc2 ``4h^2 + h``; ``h`` is the positive
  integer root of ``12h^2 + 13h = P``; a block of 16 parameter tensors is Hugging Face's
  ``BertLayer`` instead (the same ``12h^2 + 13h``; :data:`sim.compute.hf_bert.TENSORS`), whose
  modules register in ``__init__`` order (``transformers`` ``modeling_bert.py``
  ``BertSelfAttention``: query, key, value; ``BertSelfOutput``: dense, LayerNorm;
  ``BertIntermediate``: dense; ``BertOutput``: dense, LayerNorm; the same layer PatrickStar
  copied into ``examples/optimizations/ps_tile_modeling_bert.py``@2384535): three ``h^2 + h``,
  ``h^2 + h``, ``2h``, ``4h^2 + 4h``, ``4h^2 + h``, ``2h``;
* ``head``: split into its modules (:func:`head_groups`), with ``h`` from the stage's blocks;
* ``embedding``: one group of the layer's whole size. This overstates the word embedding
  (``V*h``) by the position table's ``s*h`` (``2 %`` of it for GPT-2's vocabulary at
  ``s = 1024``, ``3 %`` for BERT's; an approximation: a layer does not carry ``s``);
* any other layer (a profiled trace): one group of its whole size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from sim.compute.hf_bert import TENSORS
from sim.trace.schema import LayerProfile

HF_BLOCK_TENSORS = sum(TENSORS["block"])
"""Parameter tensors of a Hugging Face ``BertLayer`` (16); a GPT-2 or Megatron block has 12."""


def block_hidden(params: float) -> int | None:
    """``h`` with ``12h^2 + 13h == params`` (a standard transformer block), else None."""
    if params <= 0:
        return None
    h = round((-13 + math.sqrt(169 + 48 * params)) / 24)
    return h if h > 0 and 12 * h * h + 13 * h == round(params) else None


def param_groups(
    layer: LayerProfile, dtype_bytes: int, hidden: int | None = None
) -> tuple[float, ...]:
    """The layer's parameter groups in registration order, in elements (module doc);
    ``hidden``: the model's ``h`` (from its blocks), which splits the head."""
    params = layer.param_bytes / dtype_bytes
    if params <= 0:
        return ()
    h = block_hidden(params) if layer.name.startswith("block") else None
    if h is not None and layer.param_tensors == HF_BLOCK_TENSORS:
        return (*(1.0 * h * h + h,) * 4, 2.0 * h, 4.0 * h * h + 4 * h, 4.0 * h * h + h, 2.0 * h)
    if h is not None:
        return (
            2.0 * h,
            3.0 * h * h + 3 * h,
            1.0 * h * h + h,
            2.0 * h,
            4.0 * h * h + 4 * h,
            4.0 * h * h + h,
        )
    if layer.name == "head" and hidden:
        return head_groups(params, hidden)
    return (params,)


def head_groups(params: float, h: int) -> tuple[float, ...]:
    """The generator's heads (:func:`sim.trace.analytic_layers.head_layer`), split into modules: GPT, final
    LayerNorm ``2h`` and the output projection ``V*h``; BERT, MLM transform ``h^2 + h``, its
    LayerNorm ``2h``, decoder ``V*h + V``, pooler ``h^2 + h`` and classifier ``2h + 2``; any
    other size stays one group."""
    gpt_v = (params - 2 * h) / h
    if gpt_v > 0 and gpt_v == int(gpt_v):
        return (2.0 * h, params - 2 * h)
    rest = params - (2 * h * h + 6 * h + 2)  # everything but the decoder's V*h + V
    if rest > 0 and rest % (h + 1) == 0:
        return (h * h + h, 2.0 * h, rest, h * h + h, 2.0 * h + 2)
    return (params,)


def stage_hidden(layers: Sequence[LayerProfile], dtype_bytes: int) -> int | None:
    """``h`` of the first transformer block among ``layers`` (None without one)."""
    for layer in layers:
        if layer.name.startswith("block"):
            h = block_hidden(layer.param_bytes / dtype_bytes)
            if h is not None:
                return h
    return None


def stage_groups(layers: Sequence[LayerProfile], dtype_bytes: int) -> list[float]:
    """Every parameter group of ``layers``, in order, in elements."""
    h = stage_hidden(layers, dtype_bytes)
    return [g for layer in layers for g in param_groups(layer, dtype_bytes, h)]


def largest_tensor(layers: Sequence[LayerProfile], dtype_bytes: int) -> float:
    """Elements of the largest parameter group of ``layers`` (0 without parameters)."""
    return max(stage_groups(layers, dtype_bytes), default=0.0)
