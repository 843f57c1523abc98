"""Regenerate the traces shipped in the repository's ``traces/`` directory.

``python traces/make_traces.py`` (from the repository root) calls :func:`build_shipped`, which
writes, in pipesim's native format with provenance sidecars:

* ``gnmt16``: GNMT-16 from PipeDream's ``gnmt_large/graph.txt`` (micro-batch 64, fp32, as profiled);
* ``vgg16``: VGG-16 from PipeDream's ``vgg16/graph.txt`` (micro-batch 128, fp32, as profiled);
* ``gpt2-1.5b``, ``bert-large``, ``gpt-5b``: analytic, micro-batch 1, fp16, on the V100-SXM2 of
  the ``dgx1-v100-16gb`` preset, timed by the kernel model of :mod:`sim.compute` (math
  attention, as in Megatron-LM);
* ``gpt2-1b`` ... ``gpt-ds-40b``: the same, with the GPT shapes of PatrickStar's benchmarks
  (:data:`PATRICKSTAR_SHIPPED`);
* ``gpt-sc21-1.7b`` ... ``gpt-sc21-1t``: the GPT shapes of Megatron-LM's weak-scaling runs
  (Narayanan et al. SC'21, arXiv:2104.04473, Table 1; :data:`SC21_SHIPPED`), sequence 2048,
  vocabulary 51,200, micro-batch 1, fp16, math attention, on the A100 of the
  ``dgx-a100-80gb`` preset (what the runs used), for experiments/megatron-scaling.yaml;
* ``mixtral-8x7b``, ``qwen1.5-moe-a2.7b``, ``deepseek-v3`` (and ``deepseek-v3-l16``, trimmed to
  16 layers), ``llama3-8b-128k``, ``llama3.1-8b``, ``llama3-405b``, ``qwen3-30b-a3b``,
  ``llama3-70b``: decoder models
  (:mod:`sim.trace.decoder`) from the Hugging Face ``config.json`` files in ``examples/hf/``
  (:data:`DECODER_SHIPPED`), micro-batch 1, bf16, flash attention, on the H100 of the
  ``dgx-h100`` preset.

The PipeDream sources are read from ``<traces>/pipedream/<model>/graph.txt`` (copies of
msr-fiddle/pipedream@7db6a1c, MIT).
"""

from __future__ import annotations

import datetime as _dt
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from sim.hardware.gpu_compute import PRESET_SOURCE, ComputeSpec, spec_sources
from sim.trace.decoder import decoder_trace
from sim.trace.generator import preset_gpu, preset_trace, transformer_trace
from sim.trace.hf_config import read_config
from sim.trace.native import write_trace
from sim.trace.pipedream import read_pipedream
from sim.trace.schema import Trace

COMMAND = "python traces/make_traces.py"
PIPEDREAM_SHIPPED = {"gnmt16": "gnmt_large", "vgg16": "vgg16"}
GENERATED_SHIPPED = ("gpt2-1.5b", "bert-large", "gpt-5b")
PATRICKSTAR_SHIPPED = (
    "gpt2-1b",
    "gpt2-4b",
    "gpt3-8b",
    "gpt3-10b",
    "gpt3-13b",
    "gpt3-15b",
    "gpt3-18b",
    "gpt-ds-20b",
    "gpt-ds-40b",
    "gpt-ds-50b",
    "gpt-ds-60b",
    "gpt-ds-68b",
    "gpt-ds-70b",
    "gpt-nv-76b",
    "zo-gpt2-10b",
)
"""GPT shapes of PatrickStar's benchmarks (memory.md §5.4), for experiments/dgx1-memory.yaml,
and the ZeRO-Offload tutorial's 10B GPT-2 (experiments/zero-offload-dgx2.yaml)."""
PATRICKSTAR_BERT_SHIPPED = tuple(
    f"ps-{n}"
    for n in (
        "gpt2-1b",
        "gpt2-2b",
        "gpt2-4b",
        "gpt3-6b",
        "gpt3-8b",
        "gpt3-10b",
        "gpt3-12b",
        "gpt3-15b",
        "gpt3-18b",
        "gpt-ds-20b",
        "gpt-ds-40b",
        "gpt-ds-50b",
        "gpt-ds-60b",
        "gpt-ds-68b",
        "gpt-ds-70b",
        "gpt-nv-76b",
    )
)
"""The same shapes as PatrickStar's benchmark builds them (BERT, vocabulary 30522), for
experiments/patrickstar-a100.yaml and patrickstar-v100.yaml."""
SC21_SHIPPED: dict[str, tuple[int, int, int]] = {
    "gpt-sc21-1.7b": (24, 2304, 24),
    "gpt-sc21-3.6b": (30, 3072, 32),
    "gpt-sc21-7.5b": (36, 4096, 32),
    "gpt-sc21-18b": (40, 6144, 48),
    "gpt-sc21-39b": (48, 8192, 64),
    "gpt-sc21-76b": (60, 10240, 80),
    "gpt-sc21-146b": (80, 12288, 96),
    "gpt-sc21-310b": (96, 16384, 128),
    "gpt-sc21-530b": (105, 20480, 128),
    "gpt-sc21-1t": (128, 25600, 160),
}
"""``name: (layers, hidden, heads)`` of Narayanan et al. SC'21 (arXiv:2104.04473) Table 1, the
same rows as ``measurements/megatron-sc21/table1.csv``; every one with sequence :data:`SC21_SEQ`
and vocabulary :data:`SC21_VOCAB`."""
SC21_SEQ = 2048
SC21_VOCAB = 51200
"""The paper §5.1: "All models use a vocabulary size of 51,200 (multiple of 1024) and a sequence
length of 2048"."""
DECODER_SHIPPED: dict[str, tuple[str, int, int | None]] = {
    "mixtral-8x7b": ("mixtral-8x7b-config.json", 4096, None),
    "qwen1.5-moe-a2.7b": ("qwen1.5-moe-a2.7b-config.json", 4096, None),
    "deepseek-v3": ("deepseek-v3-config.json", 4096, None),
    "deepseek-v3-l16": ("deepseek-v3-config.json", 4096, 16),
    "llama3-8b-128k": ("llama3-8b-config.json", 131072, None),
    "llama3.1-8b": ("llama3-8b-config.json", 8192, None),
    "llama3-405b": ("llama3-405b-config.json", 8192, None),
    "llama3-70b": ("llama3-70b-config.json", 8192, None),
    "qwen3-30b-a3b": ("qwen3-30b-a3b-config.json", 4096, None),
}
"""Decoder traces: ``name: (examples/hf/ config file, training sequence length, layers or None
for the config's)``; ``deepseek-v3-l16`` is DeepSeek-V3 trimmed to 16 layers (3 dense, 13
MoE), as benchmarks trim it (SimuMax, Megatron-LM) to fit a few servers. ``llama3.1-8b``:
Llama-3.1-8B (the Llama 3 8B shape; 3.1 changes only the RoPE scaling and context length) at
torchtitan's training sequence 8,192 (``torchtitan/models/llama3/train_configs/
llama3_8b.toml``: ``seq_len = 8192``). ``llama3-405b``:
the shape of Llama Team, "The Llama 3 Herd of Models" (arXiv:2407.21783) Table 3 (126 layers,
model dimension 16,384, FFN 53,248, 128 heads, 8 key/value heads, vocabulary 128,256) in the
Llama 3 70B config's format, at the pre-training sequence length 8,192 (§3.4.1).
``llama3-70b``: meta-llama/Meta-Llama-3-70B's ``config.json`` (80 layers, hidden 8,192, FFN
28,672, 64 heads, 8 key/value heads, vocabulary 128,256) at sequence 8,192, for
experiments/llama3-70b-64xh100.yaml."""
HF_DIR = Path(__file__).resolve().parents[2] / "examples" / "hf"
DECODER_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "llama3.1-8b-torchtitan": ("llama3.1-8b", {"rope_complex": True}),
    "llama3.1-8b-torchtitan-2412": (
        "llama3.1-8b",
        {"rope_complex": True, "norm_fp32": True, "kv_repeat": True},
    ),
}
"""Decoder traces of a :data:`DECODER_SHIPPED` model with another framework's kernels:
``name: (model, DecoderShape fields)``. ``llama3.1-8b-torchtitan``: torchtitan's eager Llama 3
today (pytorch/torchtitan@b5bcd76: complex fp32 RoPE; ``nn.RMSNorm``, fused in torch 2.13;
SDPA with ``enable_gqa``); ``-2412``: the code of its December 2024 H100 benchmarks
(@ba2469780: also its fp32 ``RMSNorm`` ops and ``repeat_kv``), :mod:`sim.compute.torchtitan_ops`."""


DEVICE_PRESET = "dgx1-v100-16gb"
"""The hardware preset whose GPU the shipped analytic traces are generated on."""

_DEFAULT_NOTE = {
    "hbm_efficiency": "HBM efficiency {v:g}: an A100 STREAM measurement "
    "(te42kyfo/gpu-benches@cdcc732 cuda-stream/a100_80.txt), an assumption on this GPU",
    "kernel_overhead_s": "{us:g} us per kernel: an assumption (unverified)",
}


def device_note(gpu: ComputeSpec) -> str:
    """The sentence a shipped analytic trace's ``notes`` ends with: the GPU the kernel model ran
    on and where its figures come from. The preset's description cites the peaks, HBM bandwidth
    and SM count; ``hbm_efficiency`` and ``kernel_overhead_s`` at their defaults are not the
    preset's (:func:`sim.hardware.gpu_compute.spec_sources`: an A100 STREAM measurement, an
    assumption on other GPUs; an assumption), and the note names them so.

    Args:
        gpu: the kernel model's GPU (:func:`~sim.trace.generator.preset_gpu` of
            :data:`DEVICE_PRESET`).
    """
    sources = spec_sources(gpu.to_dict())
    figures = {"hbm_efficiency": gpu.hbm_efficiency, "kernel_overhead_s": gpu.kernel_overhead_s}
    unsourced = [
        _DEFAULT_NOTE[key].format(v=value, us=value * 1e6)
        for key, value in figures.items()
        if sources[key] != PRESET_SOURCE
    ]
    cites = "cites every number" if not unsourced else "cites the other numbers"
    tail = "; ".join(unsourced) + ("; " if unsourced else "")
    return (
        f" Device model: the {DEVICE_PRESET} preset's GPU (its description {cites}); "
        f"{tail}`sim trace show` lists each figure's source. At other micro-batch sizes and on "
        "other GPUs `sim run` regenerates the trace with the same model."
    )


def shipped_traces(pipedream_dir: str | os.PathLike[str]) -> list[Trace]:
    """The shipped traces, in memory, without ``date`` (deterministic).

    Args:
        pipedream_dir: directory holding ``<model>/graph.txt`` for the PipeDream models.

    Raises:
        InputError: a PipeDream source is missing or malformed.
    """
    base = Path(pipedream_dir)
    out = []
    for name, model in PIPEDREAM_SHIPPED.items():
        t = read_pipedream(base / model / "graph.txt", name=name)
        prov = dict(
            t.provenance,
            file=f"traces/pipedream/{model}/graph.txt",
            device="V100",
            device_evidence="the PipeDream paper profiled on V100 GPUs; the file does "
            "not record the GPU, so pipesim treats the times as V100 times and rescales "
            "them (with a note) on other GPUs",
        )
        out.append(replace(t, provenance=prov))
    for name in GENERATED_SHIPPED + PATRICKSTAR_SHIPPED + PATRICKSTAR_BERT_SHIPPED:
        gpu = preset_gpu(DEVICE_PRESET)
        t = preset_trace(name, microbatch_size=1, dtype="fp16", gpu=gpu)
        prov = dict(t.provenance)
        prov["notes"] += device_note(gpu)
        if name in PATRICKSTAR_BERT_SHIPPED:
            prov["shape_source"] = (
                "Tencent/PatrickStar@04af7c9 examples/model_builder.py (hidden/seq/layers/heads; "
                "BertForSequenceClassification, vocabulary 30522)"
            )
        elif name == "zo-gpt2-10b":
            prov["shape_source"] = (
                "deepspeedai/DeepSpeed@2dea61f28 docs/_tutorials/zero-offload.md (50 layers, "
                "hidden 4096, 32 heads; Megatron-LM GPT-2, sequence 1024, GPT-2 vocabulary)"
            )
        elif name in PATRICKSTAR_SHIPPED:
            prov["shape_source"] = (
                "Tencent/PatrickStar@2384535 examples/model_builder.py "
                "(hidden/seq/layers/heads; memory.md §5.4)"
            )
        out.append(replace(t, provenance=prov))
    out += _sc21_traces()
    gpu = preset_gpu("dgx-h100")
    models: dict[str, tuple[tuple[str, int, int | None], dict[str, Any]]] = {
        n: (v, {}) for n, v in DECODER_SHIPPED.items()
    }
    models |= {n: (DECODER_SHIPPED[m], f) for n, (m, f) in DECODER_VARIANTS.items()}
    for name, ((config, seq_len, layers), fields) in models.items():
        shape = replace(read_config(HF_DIR / config, seq_len, layers=layers), **fields)
        t = decoder_trace(shape, name=name, microbatch_size=1, gpu=gpu, dtype="bf16")
        prov = dict(t.provenance, config=f"examples/hf/{config}", seq_len=seq_len)
        out.append(replace(t, provenance=prov))
    return out


SC21_LINEAR_BIAS = "unfused"
SC21_DROPOUT_ADD = "fused"
"""How the SC'21 runs' Megatron-LM (NVIDIA/Megatron-LM@6985e58938, ``examples/sc21/``) in NGC
PyTorch 20.12 (``SRUN.sh``; PyTorch 1.8) runs a block, as the :func:`transformer_trace`
options ``linear_bias`` and ``dropout_add``:

* ``linear_bias="unfused"``: the QKV bias added by its own kernel
  (:mod:`sim.compute.linear_bias`);
* ``dropout_add="fused"``: ``bias_dropout_add_fused_train`` is ``@torch.jit.script``
  (``megatron/model/transformer.py`` l.355-371, called at l.464-520), run by the legacy
  executor with the legacy GPU fuser (l.30-34: ``_jit_set_profiling_executor(False)``,
  ``_jit_override_can_fuse_on_gpu(True)``), whose autodiff lowers ``dropout`` on CUDA to
  ``rand_like(input) < p1m`` and multiplies ("lowering is specialized for cuda because cuda fuser
  can efficiently fuse those operations", PyTorch ``torch/csrc/jit/runtime/symbolic_script.cpp``,
  ``def dropout``), so bias add, dropout and residual add are one kernel writing the output and
  a 1-byte mask, as :func:`sim.compute.transformer._dropout_residual` models nvFuser's.
"""


def _sc21_traces() -> list[Trace]:
    """The :data:`SC21_SHIPPED` traces (analytic GPT, micro-batch 1, fp16, A100-SXM4-80GB)."""
    gpu = preset_gpu("dgx-a100-80gb")
    out = []
    for name, (layers, hidden, heads) in SC21_SHIPPED.items():
        t = transformer_trace(
            "gpt",
            name=name,
            layers=layers,
            hidden=hidden,
            heads=heads,
            seq_len=SC21_SEQ,
            vocab=SC21_VOCAB,
            microbatch_size=1,
            dtype="fp16",
            gpu=gpu,
            linear_bias=SC21_LINEAR_BIAS,
            dropout_add=SC21_DROPOUT_ADD,
        )
        prov = dict(t.provenance)
        prov["shape_source"] = (
            "Narayanan et al. SC'21 (arXiv:2104.04473) Table 1 (layers/hidden/heads) and §5.1 "
            "(sequence 2048, vocabulary 51,200)"
        )
        prov["notes"] += (
            " Device model: the dgx-a100-80gb preset's GPU; at other micro-batch sizes and on "
            "other GPUs `sim run` regenerates the trace with the same model."
        )
        out.append(replace(t, provenance=prov))
    return out


def build_shipped(
    out_dir: str | os.PathLike[str],
    *,
    pipedream_dir: str | os.PathLike[str] | None = None,
    date: str | None = None,
) -> list[Path]:
    """Write every shipped trace into ``out_dir`` as ``<name>.csv`` + ``<name>.yaml``.

    Args:
        out_dir: destination (created if absent).
        pipedream_dir: PipeDream sources; default ``<out_dir>/pipedream``.
        date: ISO date recorded in each provenance; default today.

    Returns:
        The CSV paths written.

    Raises:
        InputError: a PipeDream source is missing or malformed.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    src = Path(pipedream_dir) if pipedream_dir is not None else out / "pipedream"
    stamp = date or _dt.date.today().isoformat()
    written = []
    for t in shipped_traces(src):
        prov = dict(t.provenance, command=COMMAND, date=stamp)
        csv_path, _ = write_trace(replace(t, provenance=prov), out / t.name)
        written.append(csv_path)
    return written
