"""The word embedding a framework ties to the output layer: its bytes on the last stage, and
the head stored without its copy where both ends share a rank.

With a tied embedding the output projection reuses the word embedding's weight. Where the first
and the last stage sit on different ranks, the last keeps a copy of that weight (and of its
gradient, all-reduced with the first: :meth:`sim.framework.base.Framework.runtime`); where both
ends share a rank (``p = 1``, or a V-shaped schedule) it is stored once
(:meth:`sim.framework.base.Framework.tie`; Megatron-LM
``LanguageModule.shared_embedding_or_output_weight``; DeepSpeed builds a ``TiedLayerSpec`` once
per stage). The copy is ``V/t x h`` elements in the trace's dtype (Megatron's
``VocabParallelEmbedding``).
"""

from __future__ import annotations

from dataclasses import replace

from sim.parallel.shard import layer_kind, model_shape
from sim.trace.schema import Trace, dtype_bytes


def tied_embedding_bytes(trace: Trace, tensor_parallel: int = 1) -> float:
    """Bytes of the word embedding one tensor rank keeps on the last stage for the output
    projection, hence of its gradient: ``V/t x h`` elements in the trace's dtype (Megatron's
    ``VocabParallelEmbedding``; the vocabulary padding to a multiple of ``128 t`` is not
    modelled), from the trace's model shape; without one, the ``head`` layers' parameters."""
    shape = model_shape(trace)
    if shape is None:
        return sum(x.param_bytes for x in trace.layers if layer_kind(x.name) == "head")
    v, h = int(shape["vocab"]), int(shape["hidden"])
    return v * h * dtype_bytes(trace.dtype) / tensor_parallel


def share_head_weight(trace: Trace, tensor_parallel: int = 1) -> Trace:
    """``trace`` with the word-embedding copy (:func:`tied_embedding_bytes`) taken out of its
    ``head`` layers' parameters: the output projection uses the embedding's weight."""
    copy = tied_embedding_bytes(trace, tensor_parallel)
    layers = tuple(
        replace(x, param_bytes=max(0.0, x.param_bytes - copy))
        if layer_kind(x.name) == "head"
        else x
        for x in trace.layers
    )
    return replace(trace, layers=layers)


__all__ = ["share_head_weight", "tied_embedding_bytes"]
