"""Measured per-GPU peaks as pipesim configurations (for ``bench_memory.py``).

Reads ``../shared/data/measured/*.csv`` (the column layout of its README) minimally, until the
"runs" helper's readers (``sim/runs/``) land: each row with a ``peak_mem_gib`` becomes a
:class:`MemoryCase`, the model shape as Megatron-LM builds it from the row's arguments, the
parallel layout, the micro-batching and the memory settings the run used; or it is kept with
the reason it cannot be predicted (``skip``). Nothing here is fitted: the settings are the
runs' own (their launchers' and model arguments), the shapes their configurations.

* SimuMax's B200 rows (``simumax_b200.csv``): Megatron-LM 23e00ed with TE 2.11 on one 8xB200
  node, as MooreThreads/SimuMax@4dcaae5's launchers run it (``simu_tools/megatron_scripts/
  scripts/run_pretrain_llama3.sh``, ``run_pretrain_deepseekv2.sh``): bf16, distributed
  optimizer, sequence parallelism, flash attention, gradient-accumulation fusion, untied
  embeddings; ``_cef`` cases add TE's fused cross entropy; the MoE ones capacity factor 1
  with padding (``--moe-expert-capacity-factor 1 --moe-pad-expert-input-to-capacity``), MLA
  (q_lora 1536, kv_lora 512, 128 + 64 rope, v 128: SimuMax ``configs/models/deepseekv{2,3}
  .json``). The measured figure is the maximum over the ranks (``peak="max"``).
* Megatron-LM's functional tests (``megatron_golden_a100_gb200.csv``): each case's
  ``MODEL_ARGS`` in the note; ``mem-max-allocated-bytes`` is logged by the last rank
  (``megatron/training/training.py`` ``training_log`` writes TensorBoard from the rank that
  owns the writer: ``global_vars.py`` ``_set_tensorboard_writer`` on ``rank == world_size -
  1``), so ``peak="last"``. It is ``torch.cuda.memory_stats()["allocated_bytes.all.peak"]``
  (``training.py`` ``training_log``, never reset: the peak since the process started) at each
  logged step, and the row keeps the maximum over the steps. Each case runs as its arguments
  and its software say: the attention backend TE picks under ``--deterministic-mode`` in the
  image that generated the golden values (:func:`golden_environment`, from
  ``golden_generation.csv``: the ``[lts_...]`` values generated before 2025-11-06 ran
  NGC PyTorch 24.01, where TE 1.2 falls back to its unfused attention on A100), the
  ``CUBLAS_WORKSPACE_CONFIG`` that mode sets, Megatron's GPT defaults (dropout 0.1, tied
  embeddings, GeLU, learned positions), its pipeline split, the expert tensor-parallel size,
  the token dispatcher (``allgather`` by default), the distributed-optimizer instances, the
  deferred embedding weight gradient and TE's grouped GEMM.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from sim.memory.te_attention import TeEnvironment
from sim.runs.express import Expressed, NotExpressed, express
from sim.runs.measured_csv import read_measured_csv
from sim.runs.megatron_args import flag_memory_options
from sim.runs.pipeline_layout import layout_boundaries, split_layout
from sim.runs.te_environment import golden_environment, run_attention

MEASURED = Path(__file__).resolve().parents[3] / "shared" / "data" / "measured"
if not MEASURED.is_dir():  # a worktree of /work: the shared folder beside the checkouts
    MEASURED = Path("/work/shared/data/measured")
GIB = 2.0**30


def _generated() -> dict[str, str]:
    """Golden-values file -> the date its memory values were generated
    (``golden_generation.csv``, written by :mod:`golden_generation`)."""
    path = Path(__file__).with_name("golden_generation.csv")
    if not path.is_file():
        return {}
    df = pd.read_csv(path, dtype=str).fillna("")
    return dict(zip(df.path, df.generated_date, strict=True))


GENERATED = _generated()

PRESETS = {"B200": "dgx-b200", "A100-SXM-80GB": "dgx-a100-80gb", "GB200": "gb200-nvl72"}
"""GPU name in the rows -> the hardware preset whose GPU it is."""

MLA = {"q_lora": 1536, "kv_lora": 512, "d_nope": 128, "d_rope": 64, "d_v": 128}
"""DeepSeek-V2/V3's MLA dims (SimuMax ``configs/models/deepseekv2.json``, ``deepseekv3.json``:
q_lora_rank, kv_lora_rank, qk_head_dim, qk_pos_emb_head_dim, v_head_dim)."""

GPT2_VOCAB = 50257
"""Megatron's GPT-2 BPE vocabulary (``--tokenizer-type GPT2BPETokenizer``, the functional
tests' default ``gpt2-vocab.json``); BERT's ``bert-large-cased-vocab.txt`` has 28996 and
Llama-2's tokenizer 32000."""
TOKENIZER_VOCAB = {
    "GPT2BPETokenizer": GPT2_VOCAB,
    "BertWordPieceCase": 28996,
    "BertWordPieceLowerCase": 30522,
    "Llama2Tokenizer": 32000,
}


@dataclass
class MemoryCase:
    """One measured peak as a configuration.

    Attributes:
        case: the row's case name.
        source: ``simumax`` or ``golden``.
        version: the framework version label (``dev``/``lts`` for the functional tests).
        gpu: the row's GPU name; ``preset``: the hardware preset.
        model: ``{"decoder": DecoderShape dict}`` or ``{"gpt": generator shape}``.
        layout: tp, pp, vp, cp, ep, dp, sp.
        gbs, mbs, m: global batch, micro-batch size, micro-batches per step.
        policy: pipesim memory policy.
        memory: the experiment's ``memory:`` section.
        measured_gib, reserved_gib: measured peaks (allocated; reserved where given).
        peak: ``max`` over ranks or the ``last`` rank's.
        skip: why it is not predicted ("" when it is).
        framework: pipesim's framework profile of the run.
        boundaries: each virtual stage's first layer as Megatron splits them (None: one stage).
        expressed: the run as ``sim import`` reads and expresses it (:func:`sim.runs.express.
            express`): where given, its configuration is the one predicted (``model``,
            ``layout``, ``policy``, ``memory``, ``boundaries`` only describe it).
    """

    case: str
    source: str
    version: str
    gpu: str
    preset: str
    model: dict[str, Any] = field(default_factory=dict)
    layout: dict[str, Any] = field(default_factory=dict)
    gbs: int = 0
    mbs: int = 1
    m: int = 1
    policy: str = "none"
    memory: dict[str, Any] = field(default_factory=dict)
    measured_gib: float = 0.0
    reserved_gib: float | None = None
    peak: str = "max"
    skip: str = ""
    framework: str = "megatron-lm"
    boundaries: tuple[int, ...] | None = None
    expressed: Expressed | None = None

    @property
    def dimensions(self) -> str:
        """The parallel dimensions in use (``tp+pp+dp``)."""
        lay = self.layout
        dims = [k for k in ("tp", "pp", "cp", "ep") if lay.get(k, 1) > 1]
        if lay.get("vp", 1) > 1:
            dims.append("vp")
        if lay.get("dp", 1) > 1:
            dims.append("dp")
        return "+".join(dims) or "single"


def _expressed_runs(path: Path) -> list[Expressed | NotExpressed]:
    """Every row of ``path`` as ``sim import`` reads and expresses it (file order)."""
    return [express(run) for run in read_measured_csv(path, generated=GENERATED)]


def _with_run(case: MemoryCase, ex: Expressed | NotExpressed) -> MemoryCase:
    """``case`` predicted as ``sim import`` expresses its run (or skipped with the first
    reason it is not expressed)."""
    if case.skip:
        return case
    if isinstance(ex, NotExpressed):
        case.skip = f"not expressed: {ex.reasons[0]}"
        return case
    case.expressed = ex
    return case


def simumax_cases(path: Path = MEASURED / "simumax_b200.csv") -> list[MemoryCase]:
    """SimuMax's 43 B200 rows (module doc), each predicted as ``sim import`` reads it."""
    df = pd.read_csv(path)
    runs = _expressed_runs(path)
    out = []
    for r, ex in zip(df.itertuples(index=False), runs, strict=True):
        note = str(r.note)
        case = re.search(r"case (\S+);", note)
        name = case.group(1) if case else str(r.model)
        reserved = re.search(r"real reserved ([\d.]+) GiB", note)
        moe = None
        if r.family == "moe":
            moe = {
                "hidden": int(r.hidden),
                "experts": int(r.moe_experts),
                "top_k": int(r.moe_topk),
                "expert_ffn": int(r.moe_ffn_hidden),
                "shared_ffn": int(r.moe_shared_ffn),
                "capacity_factor": 1.0,
                "pad_to_capacity": True,
            }
        shape = {
            "layers": int(r.layers),
            "hidden": int(r.hidden),
            "heads": int(r.heads),
            "seq_len": int(r.seq_len),
            "vocab": int(r.vocab),
            "ffn_hidden": int(r.ffn_hidden),
            "kv_heads": int(r.kv_heads),
            "mla": MLA if r.attention == "mla" else None,
            "moe": moe,
            "dense_layers": int(r.moe_dense_layers) if moe else 0,
        }
        dp = int(r.dp)
        out.append(
            MemoryCase(
                case=name,
                source="simumax",
                version="Megatron-LM 23e00ed",
                gpu="B200",
                preset=PRESETS["B200"],
                model={"decoder": shape},
                layout={
                    "tp": int(r.tp),
                    "pp": int(r.pp),
                    "vp": 1,
                    "cp": int(r.cp),
                    "cp_comm": "a2a",
                    "ep": int(r.ep),
                    "dp": dp,
                    "sp": int(r.tp) > 1,
                },
                gbs=int(r.gbs),
                mbs=int(r.mbs),
                m=int(r.ga),
                policy="dist_opt",
                memory={
                    "cross_entropy": "te" if name.endswith("_cef") else "unfused",
                    "gradient_accumulation_fusion": True,
                },
                measured_gib=float(r.peak_mem_gib),
                reserved_gib=float(reserved.group(1)) if reserved else None,
                peak="max",
                expressed=ex if isinstance(ex, Expressed) else None,
            )
        )
    return out


def model_args(note: str) -> dict[str, Any]:
    """The ``MODEL_ARGS`` dict of a functional test's note ({} without one)."""
    m = re.search(r"MODEL_ARGS=(\{.*\})", note)
    if not m:
        return {}
    try:
        return json.loads(m.group(1))
    except json.JSONDecodeError:
        return {}


UNMODELLED = {
    "--hybrid-layer-pattern": "hybrid Mamba stack (not modelled)",
    "--mtp-num-layers": "multi-token prediction layers (not modelled)",
    "--use-megatron-fsdp": "Megatron-FSDP (not modelled)",
    "--pipeline-model-parallel-layout": "custom pipeline layout (not modelled)",
    "--decoder-first-pipeline-num-layers": "uneven pipeline split (not modelled)",
    "--fp8-format": "FP8 weights and activations (not modelled here)",
    "--encoder-num-layers": "T5 encoder-decoder (not modelled)",
}
"""Arguments of functional tests whose mechanisms the model does not have, and why."""


def _vocab(args: dict[str, Any], tp: int, kind: str) -> int:
    """The padded vocabulary Megatron builds (``_vocab_size_with_padding``: a multiple of
    ``make_vocab_size_divisible_by x tp``, default 128)."""
    tok = str(args.get("--tokenizer-type", ""))
    if "--vocab-size" in args:
        v = int(args["--vocab-size"])
    else:
        v = TOKENIZER_VOCAB.get(tok, 30522 if kind == "bert" else GPT2_VOCAB)
    mult = int(args.get("--make-vocab-size-divisible-by", 128)) * tp
    return -(-v // mult) * mult


def _moe(args: dict[str, Any], h: int, ffn: int) -> dict[str, Any] | None:
    if "--num-experts" not in args:
        return None
    cap = args.get("--moe-expert-capacity-factor")
    return {
        "hidden": h,
        "experts": int(args["--num-experts"]),
        "top_k": int(args.get("--moe-router-topk", 2)),
        "expert_ffn": int(args.get("--moe-ffn-hidden-size", ffn)),
        "shared_ffn": int(args.get("--moe-shared-expert-intermediate-size", 0) or 0),
        "capacity_factor": float(cap) if cap is not None else None,
        "pad_to_capacity": bool(args.get("--moe-pad-expert-input-to-capacity", False)),
        "gated": bool(args.get("--swiglu", False)),
    }


def _routing(args: dict[str, Any]) -> str:
    """Balanced routing (an assumption) with the run's token dispatcher: Megatron-Core's
    default is ``allgather`` (``TransformerConfig.moe_token_dispatcher_type``,
    ``megatron/core/transformer/transformer_config.py``, NVIDIA/Megatron-LM@d98e8a64dd)."""
    dispatcher = str(args.get("--moe-token-dispatcher-type", "allgather"))
    return "balanced+allgather" if dispatcher == "allgather" else "balanced"


def _mla(args: dict[str, Any]) -> dict[str, int]:
    """The run's MLA dimensions (``--q-lora-rank`` ...), DeepSeek's where not given."""
    keys = {"q_lora": "--q-lora-rank", "kv_lora": "--kv-lora-rank", "d_nope": "--qk-head-dim",
            "d_rope": "--qk-pos-emb-head-dim", "d_v": "--v-head-dim"}  # fmt: skip
    return {k: int(args.get(flag, MLA[k])) for k, flag in keys.items()}


def _dropout(args: dict[str, Any]) -> bool:
    """Attention or hidden dropout above 0 (Megatron-LM's defaults are 0.1 for both:
    ``megatron/training/arguments.py`` ``--attention-dropout``, ``--hidden-dropout``)."""
    return any(float(args.get(k, 0.1)) > 0 for k in ("--attention-dropout", "--hidden-dropout"))


def _dense_layers(args: dict[str, Any]) -> int:
    freq = str(args.get("--moe-layer-freq", "1"))
    m = re.match(r"\(\[0\]\*(\d+)", freq)
    return int(m.group(1)) if m else 0


def golden_attention(args: dict[str, Any], gpu: str, env: TeEnvironment) -> str:
    """``"math"`` or ``"flash"``: the attention the run kept activations for
    (:func:`sim.runs.te_environment.run_attention`, the reading ``sim import`` makes)."""
    return run_attention({k.removeprefix("--"): v for k, v in args.items()}, gpu, env)


def golden_model(
    args: dict[str, Any], kind: str, tp: int, attention: str = "flash"
) -> dict[str, Any]:
    """The functional test's model as a trace shape: a decoder (SwiGLU, MoE or MLA) or the
    generator's GPT/BERT stack (GeLU, learned positions, dropout), with ``attention``
    (:func:`golden_attention`)."""
    h, a, layers = int(args["--hidden-size"]), int(args["--num-attention-heads"]), 0
    layers = int(args["--num-layers"])
    s = int(args.get("--seq-length", args.get("--max-position-embeddings", 512)))
    ffn = int(args.get("--ffn-hidden-size", 4 * h))
    v = _vocab(args, tp, kind)
    moe = _moe(args, h, ffn)
    gated = bool(args.get("--swiglu", False))
    cp = int(args.get("--context-parallel-size", 1))
    if gated or moe or args.get("--multi-latent-attention") or (cp > 1 and kind != "bert"):
        kv = int(args.get("--num-query-groups", a)) if args.get("--group-query-attention") else a
        return {
            "decoder": {
                "layers": layers,
                "hidden": h,
                "heads": a,
                "seq_len": s,
                "vocab": v,
                "ffn_hidden": ffn,
                "kv_heads": kv,
                "attention": attention,
                "mla": _mla(args) if args.get("--multi-latent-attention") else None,
                "moe": moe,
                "dense_layers": _dense_layers(args) if moe else 0,
                "gated_mlp": gated,
                "rotary": args.get("--position-embedding-type") == "rope",
                "tied_embeddings": not args.get("--untie-embeddings-and-output-weights"),
                "dropout": _dropout(args),
            }
        }
    return {
        "gpt": {
            "kind": "bert" if kind == "bert" else "gpt",
            "layers": layers,
            "hidden": h,
            "heads": a,
            "seq_len": s,
            "vocab": v,
            "ffn_mult": max(1, round(ffn / h)),
            "attention": attention,
        }
    }


def _boundaries(args: dict[str, Any], layers: int, stages: int) -> tuple[int, ...] | None:
    """Megatron's split of the layers over the ``stages`` virtual stages, with the embedding
    and the loss counted as layers under ``--account-for-embedding-in-pipeline-split`` /
    ``--account-for-loss-in-pipeline-split`` (:func:`sim.runs.pipeline_layout.split_layout`);
    None for one stage."""
    if stages == 1:
        return None
    emb = bool(args.get("--account-for-embedding-in-pipeline-split"))
    loss = bool(args.get("--account-for-loss-in-pipeline-split"))
    layout = split_layout(layers, stages, embedding=emb, loss=loss)
    return layout_boundaries(layout, layers, 0, stages)


def _policy(args: dict[str, Any]) -> str:
    full = args.get("--recompute-granularity") == "full"
    if args.get("--use-distributed-optimizer"):
        n = int(args.get("--num-distributed-optimizer-instances", 1))
        inst = f"instances={n}:" if n > 1 else ""
        return f"dist_opt:{inst}recompute" if full else f"dist_opt:{inst}".rstrip(":")
    if full:
        return "recompute:full"
    if args.get("--recompute-granularity") == "selective":
        return "recompute:selective"
    return "none"


def _golden_case(r: Any) -> MemoryCase:
    args = model_args(str(r.note))
    table = str(r.table)
    name = table.replace("functional test ", "")
    version = "lts" if "[lts" in name else "dev"
    kind = name.split("_")[0]
    gpu = "GB200" if "GB200" in str(r.gpu) else "A100-SXM-80GB"
    base = MemoryCase(
        case=name,
        source="golden",
        version=f"Megatron-LM functional test [{version}]",
        gpu=gpu,
        preset=PRESETS[gpu],
        measured_gib=float(r.peak_mem_gib),
        peak="last",
    )
    why = next((msg for k, msg in UNMODELLED.items() if k in args), "")
    if "_distill" in name:
        why = why or "knowledge distillation (a ModelOpt teacher beside the student: not modelled)"
    if kind in ("t5", "multimodal", "hybrid", "nemotron3"):
        why = why or f"{kind} models are not modelled"
    if not args or "--num-layers" not in args:
        why = why or "no model arguments"
    if pd.isna(r.num_gpus):
        why = why or "world size not recorded"
    if why:
        base.skip = why
        return base
    tp = int(args.get("--tensor-model-parallel-size", 1))
    pp = int(args.get("--pipeline-model-parallel-size", 1))
    cp = int(args.get("--context-parallel-size", 1))
    ep = int(args.get("--expert-model-parallel-size", 1))
    gpus = int(r.num_gpus)
    dp = gpus // (tp * pp * cp)
    layers = int(args["--num-layers"])
    per_vp = args.get("--num-layers-per-virtual-pipeline-stage")
    vp = layers // (pp * int(per_vp)) if per_vp else 1
    vp = int(args.get("--num-virtual-stages-per-pipeline-rank", vp))
    mbs = int(args.get("--micro-batch-size", 1))
    gbs = int(args.get("--global-batch-size", mbs * dp))
    if dp < 1 or gbs % (mbs * dp):
        base.skip = f"batch {gbs} is not a multiple of micro-batch {mbs} x dp {dp}"
        return base
    env = golden_environment(name, GENERATED.get(str(r.source_ref).split(":", 1)[-1], ""))
    base.model = golden_model(args, kind, tp, golden_attention(args, gpu, env))
    base.layout = {
        "tp": tp,
        "pp": pp,
        "vp": vp,
        "cp": cp,
        "ep": ep,
        "etp": int(args.get("--expert-tensor-parallel-size", tp)),
        "routing": _routing(args),
        "dp": dp,
        "sp": bool(args.get("--sequence-parallel", False)) and tp > 1,
        "cp_comm": str(args.get("--cp-comm-type", "p2p")).split("+")[0],
    }
    try:
        base.boundaries = _boundaries(args, layers, pp * vp)
    except ValueError as exc:
        base.skip = f"pipeline split: {exc}"
        return base
    base.gbs, base.mbs, base.m = gbs, mbs, gbs // (mbs * dp)
    base.policy = _policy(args)
    base.memory = {"dtype": "fp16" if args.get("--fp16") else "bf16"}
    base.memory |= flag_memory_options({k.removeprefix("--"): v for k, v in args.items()})
    return base


def golden_cases(path: Path = MEASURED / "megatron_golden_a100_gb200.csv") -> list[MemoryCase]:
    """Megatron-LM's functional tests with a measured peak (module doc)."""
    df = pd.read_csv(path)
    runs = _expressed_runs(path)
    keep = df.peak_mem_gib.notna().to_numpy()
    rows = [r for r, k in zip(df.itertuples(index=False), keep, strict=True) if k]
    exs = [e for e, k in zip(runs, keep, strict=True) if k]
    return [_with_run(_golden_case(r), e) for r, e in zip(rows, exs, strict=True)]
