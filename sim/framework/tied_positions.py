"""Megatron-DeepSpeed's last pipeline stage holds a second, unused position embedding.

``GPTModelPipe`` ties the word embedding by listing the same ``TiedLayerSpec('embed',
EmbeddingPipe, hidden, padded_vocab, max_position_embeddings, ...,
tied_weight_attr='word_embeddings_weight')`` first and last, the last one with
``forward_fn=_logits_helper`` (microsoft/Megatron-DeepSpeed@4822c87e
``megatron/model/gpt_model.py`` l.228-237, 266-276). DeepSpeed's ``PipelineModule._build``
builds the whole module on every stage that owns such a spec
(``self.tied_modules[layer.key] = layer.build()``, microsoft/DeepSpeed@f5dde36
``deepspeed/runtime/pipe/module.py`` l.231-235), so with ``p > 1`` the last stage has an
``EmbeddingPipe`` of its own, position embedding included (``torch.nn.Embedding(
max_sequence_length, h)``, whole on every tensor rank: :mod:`sim.parallel.replicated`). Only
its word embedding is all-reduced with the first stage (``allreduce_tied_weight_gradients``
reads ``comm['weight_attr']``, l.406-410); ``_logits_helper`` never reads the position table,
so its ``.grad`` stays None through the backward, and
``DeepSpeedEngine._get_gradients_for_reduction`` fills it with zeros before the data-parallel
all-reduce (``param.grad = torch.zeros(param.size(), ...)``, ``deepspeed/runtime/engine.py``
l.2265-2272). Its weights, that gradient and its optimizer state are the last stage's; the
all-reduce carries its bytes. With ``p = 1`` the spec is built once.

The table has ``max_position_embeddings`` rows; pipesim counts ``s`` (the assumption of
:mod:`sim.trace.generator`).
"""

from __future__ import annotations

from dataclasses import replace

from sim.parallel.shard import model_shape
from sim.trace.schema import Trace, dtype_bytes, layer_kind


def position_table_bytes(trace: Trace) -> float:
    """Bytes of a GPT trace's learned position embedding, ``s x h`` elements in its dtype
    (whole on every tensor rank); 0 for another model or without a model shape."""
    shape = model_shape(trace)
    if shape is None or shape["kind"] != "gpt":
        return 0.0
    return float(int(shape["seq_len"]) * int(shape["hidden"]) * dtype_bytes(trace.dtype))


def with_tied_positions(trace: Trace) -> Trace:
    """``trace`` with the last stage's copy of the position embedding
    (:func:`position_table_bytes`, module doc) added to its first ``head`` layer's
    parameters; unchanged without one."""
    extra = position_table_bytes(trace)
    heads = [i for i, x in enumerate(trace.layers) if layer_kind(x.name) == "head"]
    if extra <= 0 or not heads:
        return trace
    layers = list(trace.layers)
    head = layers[heads[0]]
    layers[heads[0]] = replace(head, param_bytes=head.param_bytes + extra)
    return replace(trace, layers=tuple(layers))
