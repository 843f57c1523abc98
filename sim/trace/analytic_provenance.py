"""The provenance of an analytic GPT or BERT trace (:mod:`sim.trace.generator`): the sources of
its formulas, its unique parameter count and how its layers were timed."""

from __future__ import annotations

from typing import Any

from sim.compute.hf_bert import classifier_params
from sim.hardware.gpu_compute import ComputeSpec
from sim.trace.analytic_layers import block_params

SOURCES = {
    "block_flops": "Narayanan et al. SC'21 arXiv:2104.04473 eq. 3; Korthikanti et al. arXiv:2205.05198",
    "block_act_bytes": "Korthikanti et al. arXiv:2205.05198 Table 2 (memory.md §2): sbh(34 + 5as/h)",
    "attn_core": "selective recompute: attention core stashes 5as^2b bytes, costs 4bs^2h FLOPs "
    "(Korthikanti et al. arXiv:2205.05198)",
    "block_params": "12h^2 + 13h: QKV 3h^2+3h, proj h^2+h, MLP 8h^2+5h, 2 LayerNorm 4h",
    "bwd": "backward = 2 x forward FLOPs; W = GEMM FLOPs, I = rest (Qi et al. arXiv:2401.10241)",
    "embedding": "time = bytes moved / HBM bandwidth; act 8sb + sbh (Megatron theoretical_memory_usage.py)",
    "head": "separate V*h copy of the word embedding on the last stage (Megatron); act 4sbh + 4sbV",
    "ops": "host ops per layer counted from Megatron-DeepSpeed's code (sim.compute.megatron_ops)",
}


def analytic_provenance(
    inputs: dict[str, Any],
    options: dict[str, str],
    gpu: ComputeSpec,
    efficiency: float | None,
) -> dict[str, Any]:
    """:func:`sim.trace.generator.transformer_trace`'s provenance: its ``inputs`` (the shape,
    dtype and device), to which are added the ``options`` (``modeling``, ``dropout_add``,
    ``cross_entropy_fusion``, ``linear_bias``) that are not the default (so the provenance of traces made before
    an option existed is unchanged) and the GPU's spec, or the constant ``efficiency``'s peak
    FLOP/s, efficiency and HBM B/s; the formulas' sources, the unique parameter count and how
    the layers were timed.
    """
    defaults = {
        "modeling": "megatron",
        "dropout_add": "eager",
        "cross_entropy_fusion": "unfused",
        "linear_bias": "fused",
    }
    inputs.update((k, v) for k, v in options.items() if v != defaults[k])
    modeling = options["modeling"]
    dtype, gpu_model, hidden, vocab = (inputs[k] for k in ("dtype", "gpu_model", "hidden", "vocab"))
    rate = gpu.peak_flops(dtype) * (efficiency or 1.0)
    if efficiency is None:
        inputs["gpu"] = gpu.without_low_precision().to_dict()
        how = (
            f"kernel model (sim.compute) on {gpu.model}: matmul {gpu.matmul_efficiency:g} x "
            f"{gpu.peak_flops(dtype) / 1e12:g} TFLOP/s with wave quantization on "
            f"{gpu.sm_count} SMs, HBM {gpu.hbm_efficiency:g} x "
            f"{gpu.hbm_bandwidth_Bps / 1e9:g} GB/s, {inputs['attention']} attention, "
            f"{gpu.kernel_overhead_s * 1e6:g} us per kernel"
        )
    else:
        eff = float(efficiency)
        inputs.update(
            peak_flops=float(rate / eff),
            efficiency=eff,
            hbm_bandwidth_Bps=float(gpu.hbm_bandwidth_Bps),
        )
        how = f"FLOPs / ({rate / eff / 1e12:g} TFLOP/s x {eff}) on {gpu_model}"
    shape = (inputs["kind"], inputs["layers"], hidden, inputs["seq_len"], vocab, inputs["ffn_mult"])
    return {
        "source": "analytic: sim.trace.generator.transformer_trace",
        "inputs": inputs,
        "formulas": dict(SOURCES),
        "unique_parameters": unique_parameters(*shape, modeling),
        "notes": f"Generated, not measured: times from the {how}. "
        + (
            "Hugging Face's BertForSequenceClassification (sim.compute.hf_bert): no head copy "
            "of the word embedding."
            if modeling == "hf"
            else f"param_bytes include Megatron's second copy of the word embedding in the "
            f"head ({vocab}x{hidden})."
        ),
    }


def unique_parameters(
    kind: str,
    layers: int,
    hidden: int,
    seq_len: int,
    vocab: int,
    ffn_mult: int = 4,
    modeling: str = "megatron",
) -> int:
    """Parameters of the model without the head's copy of the word embedding (``modeling``
    ``hf``: Hugging Face's ``BertForSequenceClassification``, ``model.numel()``)."""
    h = hidden
    emb = (vocab + seq_len) * h + (4 * h if kind == "bert" else 0)
    if modeling == "hf":
        return emb + layers * block_params(h, ffn_mult) + classifier_params(h)
    head = 2 * h if kind == "gpt" else 2 * (h * h + h) + 2 * h + vocab + 2 * h + 2
    return emb + layers * block_params(h, ffn_mult) + head
