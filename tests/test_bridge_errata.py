"""Megatron-Bridge table rows read with their release's launcher layout (sim.runs.bridge_errata):
the 26.02.01 Llama-3 70B NVFP4 and MXFP8 rows on GB300 print the FP8 row's MBS 2 (and TP 1 PP 1),
which no preset of the release (Megatron-Bridge v0.3.1) sets; a row printed as its launcher ran
it is read as printed."""

from __future__ import annotations

import pandas as pd

from sim.runs.bridge_recipes import recipe_key
from sim.runs.measured_csv import read_measured_csv

COLUMNS = ("table", "task", "model", "family", "gpu", "num_gpus", "tp", "pp", "vp", "cp", "ep",
           "gbs", "mbs", "precision", "seq_len", "framework", "tokens_per_s_per_gpu",
           "step_time_derived_s")  # fmt: skip


def _row(release: str, precision: str, pp: int, vp: float, mbs: int, tps: int) -> dict:
    vals = (f"{release} / Pre-Training Performance / Model: LLAMA3_70B", "pretrain", "LLAMA3_70B",
            "dense", "GB300", 64, 1, pp, vp, 1, None, 256, mbs, precision, 8192,
            "Megatron-Bridge/Megatron-Core (NeMo container)", tps, 256 * 8192 / (tps * 64))  # fmt: skip
    return dict(zip(COLUMNS, vals, strict=True))


def test_rows_whose_layout_no_launcher_preset_sets_are_read_as_the_launcher_ran_them(tmp_path):
    path = tmp_path / "t.csv"
    pd.DataFrame([_row("26.02.01", "NVFP4", 1, float("nan"), 2, 7002),
                  _row("26.02.01", "MXFP8", 4, float("nan"), 2, 4798),
                  _row("26.02", "NVFP4", 4, 5, 1, 6798)]).to_csv(path, index=False)  # fmt: skip
    nvfp4, mxfp8, printed = read_measured_csv(path)
    for run in (nvfp4, mxfp8, printed):
        lay = run.layout
        assert (lay.tp, lay.pp, lay.vp, lay.dp, run.microbatch_size) == (1, 4, 5, 16, 1)
    notes = [a.reason for a in nvfp4.args if a.name == "layout"]
    assert len(notes) == 1 and notes[0].startswith("table erratum: the row prints pp 1 vp 1 mbs 2")
    assert "llama3_workload_base_configs.py lines 76-82" in notes[0]
    assert any(a.name == "layout" and "vp 1 mbs 2" in a.reason for a in mxfp8.args)
    assert not any(a.name == "layout" for a in printed.args)


def test_a_preset_megatron_core_refuses_at_the_printed_layout_is_not_the_runs_recipe(tmp_path):
    # 25.11 GB300 FP8-CS 405B prints PP 8; its only preset offloads 10 layers to the CPU (with
    # Megatron-FSDP), which Megatron-Core refuses with PP > 1: the row takes the recipe of the
    # 26.02.01 row printing the same configuration
    cols = ("table", "task", "model", "family", "gpu", "num_gpus", "tp", "pp", "vp", "cp", "ep",
            "gbs", "mbs", "precision", "seq_len", "framework", "tokens_per_s_per_gpu")  # fmt: skip

    def row(release: str, precision: str, ep: float) -> dict:
        vals = (f"{release} / Pre-Training Performance / Model: LLAMA3.1_405B", "pretrain",
                "LLAMA3.1_405B", "dense", "GB300", 256, 2, 8, 4, 2, ep, 1536, 1, precision, 8192,
                "Megatron-Bridge/Megatron-Core (NeMo container)", 999)  # fmt: skip
        return dict(zip(cols, vals, strict=True))

    old, new = row("25.11", "FP8-CS", 1.0), row("26.02.01", "FP8", float("nan"))
    path = tmp_path / "t.csv"
    pd.DataFrame([old, new]).to_csv(path, index=False)
    df = pd.read_csv(path)
    preset = {"use-megatron-fsdp": True, "cpu-offloading": True, "cpu-offloading-num-layers": "10"}
    recipes = {
        recipe_key(df.iloc[0]): preset,
        (*recipe_key(df.iloc[1]), "26.02.01"): {"use-distributed-optimizer": True},
    }
    aliased, plain = read_measured_csv(path, recipes=recipes)
    for run in (aliased, plain):
        assert (run.layout.dp_shard, run.layout.dp, run.activation_offload) == (1, 8, 0.0)
        assert run.distributed_optimizer
    notes = [a.reason for a in aliased.args if a.name == "recipe" and a.status == "approximated"]
    assert len(notes) == 1 and "transformer_config.py:995-998" in notes[0]
    assert not any(a.name == "recipe" and a.status == "approximated" for a in plain.args)


def test_gpt_oss_b200_row_of_25_11_is_read_with_its_launchers_expert_parallel_64(tmp_path):
    """25.11 prints GPT-OSS 120B on 64 B200 with EP 8; the release's only B200 preset
    (Megatron-Bridge v0.2.0) is EP 64, so the row runs EP 64 with everything else as printed,
    and the 26.04.01 row printed EP 8 (its preset) stays EP 8."""
    cols = COLUMNS + ("moe_experts", "moe_topk")
    base = ("pretrain", "GPT OSS 120B", "moe", "B200", 64, 1, 1, 1, 1, 8)

    def row(release: str, gbs: int) -> dict:
        vals = (
            f"{release} / Pre-Training Performance / System: DGX-B200",
            *base,
            gbs,
            4,
            "BF16",
            4096,
            "Megatron-Bridge/Megatron-Core (NeMo container)",
            8213,
            3.99,
            128,
            4,
        )
        return dict(zip(cols, vals, strict=True))

    path = tmp_path / "t.csv"
    pd.DataFrame([row("25.11", 512), row("26.04.01", 1280)]).to_csv(path, index=False)
    fixed, printed = read_measured_csv(path)
    assert (fixed.layout.ep, fixed.layout.dp, fixed.microbatch_size) == (64, 64, 4)
    assert (printed.layout.ep, printed.layout.dp) == (8, 64)
    notes = [a.reason for a in fixed.args if a.name == "layout"]
    assert len(notes) == 1 and notes[0].startswith("table erratum: the row prints ep 8")
    assert "workload_base_configs.py lines 50-55" in notes[0]
    assert not any(a.name == "layout" for a in printed.args)


def test_qwen3_235b_b200_row_of_25_11_is_read_with_its_launchers_virtual_pipeline_4(tmp_path):
    """25.11 prints Qwen3-235B on 64 B200 with VP 2, the 25.09 row's cells; the release's only
    B200 FP8-MX preset (Megatron-Bridge v0.2.0) is PP 8 VP 4, so the row runs VP 4 with
    everything else as printed."""
    cols = COLUMNS + ("moe_experts", "moe_topk")

    def row(release: str, precision: str) -> dict:
        vals = (f"{release} / Pre-Training Performance / System: DGX-B200", "pretrain",
                "Qwen3_235B_a22B", "moe", "B200", 64, 1, 8, 2, 1, 8, 1024, 1, precision, 4096,
                "Megatron-Bridge/Megatron-Core (NeMo container)", 3269, 20.05, 128, 8)  # fmt: skip
        return dict(zip(cols, vals, strict=True))

    path = tmp_path / "t.csv"
    pd.DataFrame([row("25.11", "FP8-MX"), row("25.11", "FP8-CS")]).to_csv(path, index=False)
    fixed, other = read_measured_csv(path)
    assert (fixed.layout.pp, fixed.layout.vp, fixed.layout.ep, fixed.layout.dp) == (8, 4, 8, 8)
    assert other.layout.vp == 2
    notes = [a.reason for a in fixed.args if a.name == "layout"]
    assert len(notes) == 1 and notes[0].startswith("table erratum: the row prints vp 2")
    assert "workload_base_configs.py lines 109-120" in notes[0]
