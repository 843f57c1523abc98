"""Rows of Megatron-Bridge's performance tables whose layout columns are not the run's.

A table row gives the parallel layout beside the throughput; the run itself was made by the
release's performance launcher (``scripts/performance``) with its preset for the model, GPU and
precision. Where the release's launcher has no preset, and no variant, that produces the
row's layout, and the row's layout columns repeat those of a neighbouring row of the same
table, the row is read with the layout of the launcher's preset (:data:`ERRATA`), and says so
(:func:`erratum_note`). Nothing else of the row changes (its throughput, and the recipe
settings looked up by the row as printed: :mod:`sim.runs.bridge_recipes`).

A second kind of entry (:data:`RECIPE_ERRATA`) concerns the recipe settings: where the
release's launcher cannot have run the row's printed layout with the preset the recipe table
traced (Megatron-Core refuses the combination), the row takes the recipe of the same printed
configuration in the next release that prints it (:func:`recipe_row`), and says so
(:func:`recipe_note`).

Each entry names its evidence; no entry is inferred from pipesim's own predictions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from sim.runs.record import ArgNote

_LAUNCHER = (
    "NVIDIA-NeMo/Megatron-Bridge@9c9dd84 (v0.3.1, the 26.02.01 container's) scripts/performance/"
    "configs/llama/llama3_workload_base_configs.py"
)
_TABLE = (
    "NVIDIA-NeMo/Megatron-Bridge@067f987df0 docs/performance-summary-archive.md lines 397-403 "
    "(26.02.01, Llama3 70B)"
)

_OSS_LAUNCHER = (
    "NVIDIA-NeMo/Megatron-Bridge@7af9601c (v0.2.0, the 25.11 container's; unchanged in v0.2.1 and "
    "v0.2.2, which print the 25.11 table) scripts/performance/configs/gpt_oss/"
    "workload_base_configs.py"
)
_OSS_TABLE = (
    "NVIDIA-NeMo/Megatron-Bridge@067f987df0 docs/performance-summary-archive.md lines 581 and 592 "
    "(25.11, DGX-B200 and DGX-H100, GPT OSS 120B)"
)

_QWEN_LAUNCHER = (
    "NVIDIA-NeMo/Megatron-Bridge@7af9601c (v0.2.0, the 25.11 container's; unchanged in v0.2.1 and "
    "v0.2.2) scripts/performance/configs/qwen3/workload_base_configs.py"
)
_QWEN_TABLE = (
    "NVIDIA-NeMo/Megatron-Bridge@067f987df0 docs/performance-summary-archive.md lines 583 and 622 "
    "(25.11 and 25.09, DGX-B200, Qwen3_235B_a22B)"
)


@dataclass(frozen=True)
class PrintedRow:
    """A table row as printed, which an entry below matches.

    Attributes:
        release: the table's release (the ``table`` column's first part, ``26.02.01``).
        model, gpu, precision, task: the row's columns.
        table: the layout columns as printed (``{"pp": 1, "vp": 1, "mbs": 2}``; an empty
            ``vp`` is 1).
    """

    release: str
    model: str
    gpu: str
    precision: str
    task: str
    table: dict[str, int]

    def matches(self, row: pd.Series) -> bool:
        """Whether ``row`` is this entry's row, printed as :attr:`table` says."""
        release = str(row.get("table", "")).split("/", 1)[0].strip()
        same = (release, str(row.get("model")), str(row.get("gpu")),
                str(row.get("precision")), str(row.get("task")))  # fmt: skip
        if same != (self.release, self.model, self.gpu, self.precision, self.task):
            return False
        return all(_int(row.get(k), 1 if k == "vp" else 0) == v for k, v in self.table.items())


@dataclass(frozen=True)
class Erratum(PrintedRow):
    """One row's layout as the table prints it (:class:`PrintedRow`) and as its release's
    launcher ran it.

    Attributes:
        run: the ``table`` columns as the launcher set them.
        evidence: where the run's values come from and why the printed ones are not the run's.
    """

    run: dict[str, int]
    evidence: str


def _int(v: Any, empty: int) -> int:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return empty
    return empty if f != f else int(f)


ERRATA: tuple[Erratum, ...] = (
    Erratum(
        "26.02.01", "LLAMA3_70B", "GB300", "NVFP4", "pretrain",
        table={"pp": 1, "vp": 1, "mbs": 2}, run={"pp": 4, "vp": 5, "mbs": 1},
        evidence=f"{_LAUNCHER} lines 76-82 and 225-231 (LLAMA3_70B_PRETRAIN_CONFIG_GB300_NVFP4_V1"
        " and _V2, the release's only presets for it: pipeline 4, virtual 5, micro-batch 1 by "
        "WorkloadBaseConfig's default); the printed MBS 2 and TP 1 PP 1 are those of the FP8 "
        f"row below it, which runs Megatron-FSDP (FSDP 64), {_TABLE}; the 26.02 and 26.04 rows "
        "of the same configuration print PP 4 VP 5 MBS 1",
    ),
    Erratum(
        "26.02.01", "LLAMA3_70B", "GB300", "MXFP8", "pretrain",
        table={"pp": 4, "vp": 1, "mbs": 2}, run={"pp": 4, "vp": 5, "mbs": 1},
        evidence=f"{_LAUNCHER} lines 70-74 and 219-223 (LLAMA3_70B_PRETRAIN_CONFIG_GB300_FP8_MX_V1"
        " and _V2, the release's only presets for it: pipeline 4, virtual 5, micro-batch 1); "
        f"the printed MBS 2 and VP n/a are those of the FP8 row below it, {_TABLE}; the 26.02 "
        "and 26.04 rows of the same configuration print PP 4 VP 5 MBS 1",
    ),
    Erratum(
        "25.11", "GPT OSS 120B", "B200", "BF16", "pretrain",
        table={"ep": 8}, run={"ep": 64},
        evidence=f"{_OSS_LAUNCHER} lines 50-55 (GPT_OSS_120B_B200_BF16_BASE_CONFIG, the release's "
        "only preset for it: expert parallel 64, micro-batch 4, global batch 512 from the base); "
        "EP 8 is only the base preset's value (lines 22-28), which the B200 preset replaces. The "
        "same preset is EP 64 in the branch whose GB200 and GB300 presets give exactly the table's "
        "GB200 and GB300 rows, GBS 1280, MBS 1 and 2, sequence 8192 (Megatron-Bridge@4a82e165 "
        "gaod/r0.2.0_test, the same file, lines 51-56), and in v0.3.0's "
        "GPT_OSS_120B_PRETRAIN_CONFIG_B200_BF16_V1, 'V1: old cfgs' (@21b02e0c "
        "gpt_oss_workload_base_configs.py lines 71-76, commit 5dd02f53). The printed EP 8, MBS 4 "
        "and GA 2 repeat the DGX-H100 row beneath it, whose GA 2 does not follow from its own "
        "columns (512 / (4 x 16) = 8), and the table's first draft (@35b5ecb7 docs/performance-"
        f"summary.md line 80) has these cells as placeholders, '{{8}} | {{2}}'; {_OSS_TABLE}",
    ),
    Erratum(
        "25.11", "Qwen3_235B_a22B", "B200", "FP8-MX", "pretrain",
        table={"vp": 2}, run={"vp": 4},
        evidence=f"{_QWEN_LAUNCHER} lines 109-120 (QWEN3_235B_A22B_B200_FP8_CS_BASE_CONFIG, which "
        "FP8_MX is, the release's only preset for it: pipeline 8, virtual 4, expert parallel 8, "
        "global batch 1024, moe_a2a_overlap=True); the printed TP 1 PP 8 CP 1 VP 2 EP 8 GA 128 "
        "are the 25.09 DGX-B200 token-drop row's, cell for cell, and the table's first draft "
        "(@35b5ecb7 docs/performance-summary.md line 82) is that 25.09 row whole, its 4104 (4275) "
        "tokens/s included, of which a later commit (@c5dd4b6b line 82) replaced only the "
        "throughput. VP 2 was the preset's value (without A2A overlap) only before 8aed9a22 "
        f"(2025-11-21, r0.2.0), two weeks before the tag; {_QWEN_TABLE}",
    ),
)  # fmt: skip
"""The rows read with their launcher's layout (module doc)."""


_V020 = (
    "NVIDIA-NeMo/Megatron-Bridge@7af9601 (v0.2.0, the 25.11 container's) scripts/performance/"
    "configs/llama31/workload_base_configs.py lines 36-43 (LLAMA31_405B_GB300_FP8_CS_BASE_CONFIG:"
    " TP 2, use_megatron_fsdp=True, cpu_offloading_num_layers=10) and utils/helpers.py "
    "set_recompute_overrides / set_user_overrides (no launcher argument turns the offloading or "
    "Megatron-FSDP off)"
)


@dataclass(frozen=True)
class RecipeErratum(PrintedRow):
    """One row (:class:`PrintedRow`) whose recipe settings are read from another row's recipe.

    Attributes:
        recipe_of: the cells the recipe is looked up by instead (``table`` names the release).
        evidence: why the row's own release's preset cannot be its run, and why this recipe.
    """

    recipe_of: dict[str, Any]
    evidence: str


RECIPE_ERRATA: tuple[RecipeErratum, ...] = (
    RecipeErratum(
        "25.11", "LLAMA3.1_405B", "GB300", "FP8-CS", "pretrain",
        table={"tp": 2, "pp": 8, "vp": 4, "cp": 2},
        recipe_of={"precision": "FP8", "ep": float("nan"),
                   "table": "26.02.01 / Pre-Training Performance / Model: LLAMA3.1_405B"},
        evidence=f"the release's only preset for it, {_V020}, offloads activations to the CPU, "
        "which Megatron-Core refuses with pipeline parallelism (NVIDIA/Megatron-LM@0d8e071, "
        "Megatron-Bridge v0.2.0's 3rdparty/Megatron-LM, megatron/core/transformer/"
        "transformer_config.py:995-998, 'no support for Pipeline parallelism with CPU "
        "offloading'), so the printed PP 8 did not run it; the 26.02.01 table prints the same "
        "configuration (TP 2 PP 8 VP 4 CP 2, 256 GPUs, GBS 1536), traced without FSDP or "
        "offloading (measurements/megatron-bridge/recipes.csv)",
    ),
)  # fmt: skip
"""The rows read with another row's recipe (module doc)."""


def recipe_erratum_for(row: pd.Series) -> RecipeErratum | None:
    """The recipe erratum of ``row`` (None: the row's own recipe)."""
    return next((e for e in RECIPE_ERRATA if e.matches(row)), None)


def _with_cells(row: pd.Series, cells: dict[str, Any]) -> pd.Series:
    """A copy of ``row`` with ``cells`` set."""
    out = row.copy()
    for k, v in cells.items():
        out[k] = v
    return out


def recipe_row(row: pd.Series, erratum: RecipeErratum) -> pd.Series:
    """``row`` with the cells its recipe is looked up by (:attr:`RecipeErratum.recipe_of`)."""
    return _with_cells(row, erratum.recipe_of)


def recipe_note(erratum: RecipeErratum) -> ArgNote:
    """What the simulation changes of the row's own recipe (``Expressed.approximations``)."""
    release = str(erratum.recipe_of.get("table", "")).split(" / ")[0]
    return ArgNote("recipe", erratum.release, "approximated",
                   f"recipe erratum: read with the recipe of the {release} row of the same "
                   f"configuration ({erratum.evidence})")  # fmt: skip


def erratum_for(row: pd.Series) -> Erratum | None:
    """The erratum of ``row`` (None: the row is read as printed)."""
    return next((e for e in ERRATA if e.matches(row)), None)


def corrected(row: pd.Series, erratum: Erratum) -> pd.Series:
    """``row`` with the layout columns of ``erratum.run`` (the data-parallel width follows from
    the GPU count: :mod:`sim.runs.measured_csv`)."""
    return _with_cells(row, erratum.run)


def erratum_note(erratum: Erratum) -> ArgNote:
    """What the simulation changes of the printed row (``Expressed.approximations``)."""
    printed = " ".join(f"{k} {v}" for k, v in erratum.table.items())
    ran = " ".join(f"{k} {v}" for k, v in erratum.run.items())
    return ArgNote("layout", printed, "approximated",
                   f"table erratum: the row prints {printed}, simulated as its release's "
                   f"launcher ran it, {ran} ({erratum.evidence})")  # fmt: skip
