"""Measured per-GPU peaks as pipesim configurations (for ``bench_memory.py``).

Each row of ``../shared/data/measured/*.csv`` with a ``peak_mem_gib`` becomes a
:class:`MemoryCase`: the run as ``sim import`` reads and expresses it (:mod:`sim.runs`: its
readers, :func:`sim.runs.express.express`; one reading, so this benchmark and
``bench_measured_data.py`` predict the same configuration), the measured peak and which rank
it is; or it is kept with the reason it is not predicted (``skip``). Nothing here is fitted.

* SimuMax's B200 rows (``simumax_b200.csv``): Megatron-LM 23e00ed with TE 2.11 on one 8xB200
  node, as SimuMax's launchers run it (:func:`sim.runs.measured_csv._launcher_flags`: no
  dropout, MoE capacity factor 1 with padding, TE's fused cross entropy for ``_cef`` cases).
  The measured figure is the maximum over the ranks (``peak="max"``).
* Megatron-LM's functional tests (``megatron_golden_a100_gb200.csv``): each case's
  ``MODEL_ARGS`` in the note; ``mem-max-allocated-bytes`` is logged by the last rank
  (``megatron/training/training.py`` ``training_log`` writes TensorBoard from the rank that
  owns the writer: ``global_vars.py`` ``_set_tensorboard_writer`` on ``rank == world_size -
  1``), so ``peak="last"``. It is ``torch.cuda.memory_stats()["allocated_bytes.all.peak"]``
  (``training.py`` ``training_log``, never reset: the peak since the process started) at each
  logged step, and the row keeps the maximum over the steps. The image that generated each
  file's golden values (``golden_generation.csv``, :data:`GENERATED`) decides the attention
  backend TE picked under ``--deterministic-mode`` (:mod:`sim.runs.te_environment`). This
  benchmark leaves out the kinds in :data:`UNMODELLED` and :func:`_skip`.
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
from sim.runs.te_environment import run_attention

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


def _describe(case: MemoryCase, ex: Expressed | NotExpressed) -> MemoryCase:
    """``case`` predicted as ``sim import`` expresses its run, its descriptive fields (layout,
    policy, memory, boundaries) taken from that; or skipped with the first reason it is not
    expressed."""
    if case.skip:
        return case
    if isinstance(ex, NotExpressed):
        case.skip = f"not expressed: {ex.reasons[0]}"
        return case
    p = ex.point
    case.expressed, case.model = ex, {ex.generator: ex.model}
    case.layout = {
        "tp": p["tensor_parallel"], "pp": p["stages"], "vp": p["virtual_stages"],
        "cp": p["context_parallel"], "ep": p["expert_parallel"], "dp": p["dp_width"],
        "sp": p["sequence_parallel"],
    }  # fmt: skip
    case.gbs, case.mbs, case.m = p["global_batch"], p["microbatch_size"], p["microbatches"]
    case.policy, case.memory = str(p["memory_policy"]), dict(ex.memory)
    case.framework, case.boundaries = ex.framework, ex.boundaries
    return case


def simumax_cases(path: Path = MEASURED / "simumax_b200.csv") -> list[MemoryCase]:
    """SimuMax's 43 B200 rows (module doc), each predicted as ``sim import`` reads it."""
    df = pd.read_csv(path)
    out = []
    for r, ex in zip(df.itertuples(index=False), _expressed_runs(path), strict=True):
        note = str(r.note)
        case = re.search(r"case (\S+);", note)
        reserved = re.search(r"real reserved ([\d.]+) GiB", note)
        base = MemoryCase(
            case=case.group(1) if case else str(r.model),
            source="simumax",
            version="Megatron-LM 23e00ed",
            gpu="B200",
            preset=PRESETS["B200"],
            measured_gib=float(r.peak_mem_gib),
            reserved_gib=float(reserved.group(1)) if reserved else None,
            peak="max",
        )
        out.append(_describe(base, ex))
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
    "--fine-grained-activation-offloading": (
        "fine-grained activation offloading (--offload-modules' activations move to the host: "
        "not modelled; predicted +100 % without it)"
    ),
}
"""Arguments of functional tests this benchmark leaves out, and why. T5, hybrid Mamba stacks
(``--hybrid-layer-pattern``), MTP, FP8, uneven and custom pipeline splits are predicted as
``sim import`` expresses them (:func:`sim.runs.express.express`; where it does not, the row
says why)."""

GRAPHED_PP = (
    "TE CUDA graphs under pipeline parallelism: every (layer, microbatch) is captured with its "
    "own static inputs (Megatron-LM megatron/core/transformer/cuda_graphs.py@d98e8a64dd "
    "2596-2603, 2327-2345), not modelled (predicted -11 %; the PP 1 case is +0.2 %)"
)

COPIED_GOLDEN = {
    "hybrid_mr_mcore_te_tp1_pp1_cp1_dgx_a100_1N8G [lts_dgx_a100]",
    "hybrid_mr_mcore_te_tp2_pp1_cp1_dgx_a100_1N8G [lts_dgx_a100]",
}
"""Functional tests whose golden values are not a measurement of their configuration: the TP 1
and TP 2 ``golden_values_lts_dgx_a100.json`` are byte-identical (Megatron-LM@d98e8a64dd, both
generated at e3ec174fc2) and log ``mem-allocated-bytes`` 0.49 GiB, below the TP 1 model's own
bf16 weights (0.75 GiB)."""


def golden_attention(args: dict[str, Any], gpu: str, env: TeEnvironment) -> str:
    """``"math"`` or ``"flash"``: the attention the run kept activations for
    (:func:`sim.runs.te_environment.run_attention`, the reading ``sim import`` makes)."""
    return run_attention({k.removeprefix("--"): v for k, v in args.items()}, gpu, env)


def _skip(name: str, kind: str, args: dict[str, Any], r: Any) -> str:
    """Why this benchmark leaves a functional test out ("" when it does not)."""
    why = next((msg for k, msg in UNMODELLED.items() if k in args), "")
    if "_distill" in name:
        why = why or "knowledge distillation (a ModelOpt teacher beside the student: not modelled)"
    if kind == "multimodal":
        why = why or "multimodal models are not modelled"
    graphs = str(args.get("--cuda-graph-impl", "none")) != "none"
    if graphs and int(args.get("--pipeline-model-parallel-size", 1)) > 1:
        why = why or GRAPHED_PP
    if name in COPIED_GOLDEN:
        why = why or "golden values copied from another case (COPIED_GOLDEN)"
    if not args:
        why = why or "no model arguments"
    if pd.isna(r.num_gpus):
        why = why or "world size not recorded"
    return why


def _golden_case(r: Any) -> MemoryCase:
    args = model_args(str(r.note))
    name = str(r.table).replace("functional test ", "")
    version = "lts" if "[lts" in name else "dev"
    gpu = "GB200" if "GB200" in str(r.gpu) else "A100-SXM-80GB"
    return MemoryCase(
        case=name,
        source="golden",
        version=f"Megatron-LM functional test [{version}]",
        gpu=gpu,
        preset=PRESETS[gpu],
        measured_gib=float(r.peak_mem_gib),
        peak="last",
        skip=_skip(name, name.split("_")[0], args, r),
    )


def golden_cases(path: Path = MEASURED / "megatron_golden_a100_gb200.csv") -> list[MemoryCase]:
    """Megatron-LM's functional tests with a measured peak (module doc), each predicted as
    ``sim import`` reads it."""
    df = pd.read_csv(path)
    runs = _expressed_runs(path)
    keep = df.peak_mem_gib.notna().to_numpy()
    rows = [r for r, k in zip(df.itertuples(index=False), keep, strict=True) if k]
    exs = [e for e, k in zip(runs, keep, strict=True) if k]
    return [_describe(_golden_case(r), e) for r, e in zip(rows, exs, strict=True)]
