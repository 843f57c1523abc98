"""The layers of a Hugging Face ``BertForSequenceClassification`` trace that differ from the
Megatron-shaped ones of :mod:`sim.trace.generator`: the pooler-and-classifier head and the
parameter tensors each layer owns (kernels and sources: :mod:`sim.compute.hf_bert`)."""

from __future__ import annotations

from dataclasses import replace

from sim.compute.hf_bert import NUM_LABELS, TENSORS, classifier_params
from sim.compute.megatron_ops import head_ops
from sim.compute.transformer import BlockTimes
from sim.hardware.gpu_compute import ComputeSpec
from sim.trace.schema import LayerProfile, layer_kind

MODELINGS = ("megatron", "hf")
"""``transformer_trace``'s ``modeling``: Megatron-LM's layers, or Hugging Face's BERT."""


def check_modeling(
    modeling: str, kind: str, efficiency: float | None, gpu: ComputeSpec | None
) -> None:
    """Raises:
    ValueError: ``modeling`` not one of :data:`MODELINGS`, or ``hf`` with a GPT, without a
        ``gpu`` for the kernel model or with a constant ``efficiency``.
    """
    if modeling not in MODELINGS:
        raise ValueError(f"modeling must be 'megatron' or 'hf', got {modeling!r}")
    if modeling == "hf" and (kind != "bert" or efficiency is not None or gpu is None):
        raise ValueError("modeling 'hf' is BERT's, timed by the kernel model (gpu=, no efficiency)")


def classifier_head(b: int, h: int, d: int, t: BlockTimes) -> LayerProfile:
    """The pooler and classifier at micro-batch ``b`` (``d`` bytes per element, times ``t``):
    no vocabulary projection; it keeps the first tokens' pooled states and the logits
    (``4bh*d``, small)."""
    return LayerProfile(
        name="head",
        fwd_s=t.fwd.total_s,
        bwd_s=t.bwd_input.total_s + t.bwd_weight.total_s,
        param_bytes=float(classifier_params(h) * d),
        act_bytes=float(4 * b * h * d),
        out_bytes=0.0,
        bwd_input_s=t.bwd_input.total_s,
        bwd_weight_s=t.bwd_weight.total_s,
        flops=2.0 * b * h * h + 2.0 * b * h * NUM_LABELS,
        fwd_ops=float(head_ops("bert")[0]),
        bwd_ops=float(head_ops("bert")[1]),
    )


def with_tensors(chain: list[LayerProfile]) -> list[LayerProfile]:
    """``chain`` with each layer's Hugging Face parameter tensors (:data:`TENSORS`), one
    ``.grad`` each."""
    return [replace(x, param_tensors=float(sum(TENSORS[layer_kind(x.name)]))) for x in chain]
