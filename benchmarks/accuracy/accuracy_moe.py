"""Published measured MoE, expert-parallel and context-parallel runs against pipesim.

Nothing here is fitted: each case is simulated from its published configuration (hardware
preset, Hugging Face config, sequence length, parallel sizes, micro-batch size and count) and
the error is reported against the published measurement.

* **SimuMax B200 release v1.2** (MooreThreads/SimuMax ``docs/b200/b200_release_v1.2_summary.md``
  and ``.json``; launcher ``simu_tools/megatron_scripts/scripts/run_pretrain_deepseekv2.sh``,
  ``tools/b200/run_params/b200_bf16_ceperm_sweep.json``): Megatron-LM
  (commit 23e00ed) with TransformerEngine 2.11 on one DGX B200; ``real ms`` is the measured
  iteration time (steady iterations 2-3), ``real alloc GiB`` the largest
  ``torch.cuda.max_memory_allocated`` over ranks. Settings common to the rows: bf16, seq 4096
  (CP rows: 32K / 128K), micro-batch 1, global batch = ``mbc x dp``, distributed optimizer,
  flash attention, no recompute, 1F1B, no overlap of gradient reduction or p2p (simulated as
  ``framework: megatron-lm``, whose defaults these are); DeepSeek-V2/V3 trimmed to 4 layers, the first dense
  (``moe_layer_freq ([0]*1+[1]*3)``), ``alltoall`` dispatcher, ``--moe-expert-capacity-factor
  1 --moe-pad-expert-input-to-capacity`` (every expert computes its capacity); Llama3-70B
  trimmed to 12 layers; CP rows with ``--cp-comm-type a2a``. Simulated on ``dgx-b200`` with
  SimuMax's node's own GEMM figure set over it (the shipped overlay ``simumax-b200``).
* **Megatron-Core MoE, Mixtral 8x7B** (NVIDIA/Megatron-LM ``megatron/core/transformer/moe/
  README.md``): "468 TFLOPS for Mixtral 8X7B bf16 training" (MCore v0.9) and the reference
  mapping (MCore v0.8): 64 H100, TP1 EP8 PP4 VP8, MBS 1, GBS 256, seq 4096, dropless. The
  TFLOPS are converted to an iteration time with Megatron's own FLOP count
  (``megatron/training/training.py`` ``num_floating_point_operations``, the v0.9 form:
  ``12 B s L h^2 (1 + f/h k 3/2 + g/a + s/h + V/(2Lh))``). The two statements may describe
  different runs (the README does not say the 468 TFLOPS used that mapping): read the error as
  indicative. Simulated with ``framework: pipesim`` (DDP-style gradient buckets overlapping the
  last backward, as the README's ``--overlap-grad-reduce``); ``megatron-lm`` (overlap off)
  deadlocks on interleaved 1F1B with data parallelism in main's engine (the tied-embedding
  all-reduce against the step barrier), with or without expert parallelism.

Run: ``python benchmarks/accuracy/bench_accuracy.py --sections moe`` (about a minute).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from sim.config import parse_experiment
from sim.hardware.loader import load_hardware
from sim.hardware.overlay import with_overlays
from sim.plan.point_row import point_row
from sim.plan.sweep import expand
from sim.point.experiment import prepare
from sim.trace.decoder import decoder_trace
from sim.trace.hf_config import read_config
from sim.trace.native import write_trace

TITLE = "Published measured MoE / EP / CP runs vs pipesim (time error = predicted / measured - 1)"
HF = Path(__file__).resolve().parents[2] / "examples" / "hf"
GIB = 2.0**30

# case: (model config, layers, tp, ep, pp, cp, mbc, seq, measured ms, measured alloc GiB)
SIMUMAX_B200 = [
    ("deepseek-v2", 4, 1, 8, 1, 1, 4, 4096, 366.6, 45.63),
    ("deepseek-v2", 4, 1, 4, 2, 1, 4, 4096, 282.1, 44.70),
    ("deepseek-v3", 4, 1, 8, 1, 1, 4, 4096, 603.2, 104.30),
    ("deepseek-v3", 4, 1, 4, 2, 1, 4, 4096, 452.2, 114.00),
    ("deepseek-v2", 4, 1, 8, 1, 1, 8, 4096, 676.2, 45.63),
    ("deepseek-v2", 4, 1, 4, 2, 1, 8, 4096, 492.6, 44.70),
    ("deepseek-v3", 4, 1, 8, 1, 1, 8, 4096, 1101.7, 104.30),
    ("deepseek-v3", 4, 1, 4, 2, 1, 8, 4096, 771.6, 114.00),
    ("deepseek-v2", 4, 1, 8, 1, 1, 32, 4096, 2721.3, 45.63),
    ("deepseek-v2", 4, 1, 4, 2, 1, 32, 4096, 1727.7, 44.70),
    ("deepseek-v3", 4, 1, 8, 1, 1, 32, 4096, 4141.2, 104.30),
    ("deepseek-v3", 4, 1, 4, 2, 1, 32, 4096, 2718.6, 114.00),
    ("llama3-70b", 12, 2, 1, 1, 4, 4, 32768, 1758.0, 68.43),
    ("llama3-70b", 12, 1, 1, 1, 8, 4, 32768, 1768.1, 104.51),
    ("llama3-70b", 12, 2, 1, 1, 4, 4, 131072, 11315.7, 112.67),
    ("llama3-70b", 12, 1, 1, 1, 8, 4, 131072, 11301.9, 147.99),
    ("llama3-70b", 12, 1, 1, 2, 1, 4, 4096, 843.0, 66.55),
    ("llama3-70b", 12, 2, 1, 1, 1, 4, 4096, 725.5, 60.68),
    ("llama3-70b", 12, 4, 1, 1, 1, 4, 4096, 409.8, 39.07),
    ("llama3-70b", 12, 8, 1, 1, 1, 4, 4096, 280.9, 28.29),
]

MIXTRAL_TFLOPS = 468.0
"""Megatron-Core MoE README: Mixtral 8x7B bf16, MCore v0.9."""


def megatron_flops(shape, batch: int) -> float:
    """Megatron-LM's ``num_floating_point_operations`` (MCore v0.9 form, GQA, SwiGLU, MoE)."""
    h, s, layers = shape.hidden, shape.seq_len, shape.layers
    k = shape.moe.top_k if shape.moe else 1
    f = shape.moe.expert_ffn if shape.moe else shape.ffn_hidden
    g = (shape.kv_heads or shape.heads) / shape.heads
    bracket = 1 + f / h * k * 1.5 + g + s / h + shape.vocab / (2 * layers * h)
    return 12.0 * batch * s * layers * h * h * bracket


def _trace_file(tmp: Path, config: str, layers: int, seq: int, hardware, moe_pad: bool) -> str:
    from dataclasses import replace

    shape = read_config(HF / f"{config}-config.json", seq, layers=layers)
    if moe_pad and shape.moe is not None:
        shape = replace(shape, moe=replace(shape.moe, capacity_factor=1.0, pad_to_capacity=True))
        shape = replace(shape, dense_layers=1)
    gpu = load_hardware(hardware).gpus[0].compute
    assert gpu is not None
    name = f"{config}-l{layers}-s{seq}"
    trace = decoder_trace(shape, name=name, microbatch_size=1, gpu=gpu, dtype="bf16")
    csv, _ = write_trace(trace, tmp / name)
    return str(csv)


def _row(tmp: Path, hardware, trace: str, sweep: dict, gb: int, framework: str):
    data = {
        "name": "published",
        "hardware": hardware,
        "framework": framework,
        "models": [{"name": "m", "trace": trace, "global_batch": gb}],
        "training": {"optimizer": "adam", "dtype": "bf16"},
        "sweep": {"microbatch_size": 1, "memory_policy": "dist_opt", **sweep},
        "options": {"partition": "uniform"},
    }
    file = str(tmp / "exp.yaml")
    exp = parse_experiment(data, file=file)
    prep = prepare(exp, file)
    points, _ = expand(prep)
    return point_row(prep, points[0])[0]


def tensor_peak_gib(row) -> float:
    """Predicted peak of tensors (what ``max_memory_allocated`` counts): the tightest GPU's
    weights, gradients, optimizer state, activations, buffers and working memory."""
    parts = ("weights", "gradients", "optimizer", "activations", "buffers", "working")
    return sum(getattr(row, f"peak_{p}_bytes") or 0.0 for p in parts) / GIB


def simumax_rows(tmp: Path) -> list[dict]:
    out = []
    node = with_overlays("dgx-b200", "simumax-b200")  # SimuMax's node
    for config, layers, tp, ep, pp, cp, mbc, seq, ms, alloc in SIMUMAX_B200:
        dp = 8 // (tp * pp * cp)
        trace = _trace_file(tmp, config, layers, seq, node, moe_pad=True)
        sweep = {
            "schedule": "1f1b",
            "stages": pp,
            "dp_width": dp,
            "tensor_parallel": tp,
            "sequence_parallel": tp > 1,
            "expert_parallel": ep,
            "context_parallel": cp,
            "context_parallel_comm": "a2a",
        }
        row = _row(tmp, node, trace, sweep, mbc * dp, "megatron-lm")
        pred = row.iteration_time_s * 1e3 if row.iteration_time_s else float("nan")
        out.append(
            {
                "source": "SimuMax B200",
                "case": f"{config} l{layers} tp{tp} ep{ep} pp{pp} cp{cp} s{seq // 1024}K mbc{mbc}",
                "measured_ms": ms,
                "predicted_ms": round(pred, 1),
                "time_error_%": round(100 * (pred / ms - 1), 1),
                "measured_alloc_GiB": alloc,
                "predicted_alloc_GiB": round(tensor_peak_gib(row), 2),
                "alloc_error_%": round(100 * (tensor_peak_gib(row) / alloc - 1), 1),
            }
        )
    return out


def mixtral_row(tmp: Path) -> dict:
    trace = _trace_file(tmp, "mixtral-8x7b", 32, 4096, "8x-dgx-h100", moe_pad=False)
    sweep = {
        "schedule": "interleaved_1f1b",
        "virtual_stages": 8,
        "stages": 4,
        "dp_width": 16,
        "expert_parallel": 8,
    }
    row = _row(tmp, "8x-dgx-h100", trace, sweep, 256, "pipesim")
    shape = read_config(HF / "mixtral-8x7b-config.json", 4096)
    measured = megatron_flops(shape, 256) / (MIXTRAL_TFLOPS * 1e12 * 64) * 1e3
    pred = row.iteration_time_s * 1e3 if row.iteration_time_s else float("nan")
    return {
        "source": "Megatron-Core MoE README",
        "case": "mixtral-8x7b 64xH100 tp1 ep8 pp4 vp8 mbs1 gbs256 (468 TFLOPS)",
        "measured_ms": round(measured, 1),
        "predicted_ms": round(pred, 1),
        "time_error_%": round(100 * (pred / measured - 1), 1),
        "measured_alloc_GiB": float("nan"),
        "predicted_alloc_GiB": round(tensor_peak_gib(row), 2),
        "alloc_error_%": float("nan"),
    }


def rows() -> list[dict]:
    """One row per published case (module doc)."""
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        return simumax_rows(tmp) + [mixtral_row(tmp)]
