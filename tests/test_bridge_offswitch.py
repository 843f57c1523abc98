"""sim.runs.bridge_offswitch: switches an H100 Megatron-Bridge recipe turns off override the
shared settings (hand-checked against NVIDIA-NeMo/Megatron-Bridge: v0.1.0rc3
``scripts/performance/run_script.py`` 94-95, v0.4.0 ``src/megatron/bridge/recipes/kimi/
kimi_k2.py`` 53, 199-200, v0.6.0 ``src/megatron/bridge/recipes/nemotronh/h100/
nemotron_3_super.py`` 232-233), and a recipe row's explicit off changes no Blackwell run."""

from __future__ import annotations

import pandas as pd

from sim.runs.bridge_recipes import recipe_flags
from sim.runs.measured_csv import row_run
from sim.runs.megatron_args import read_megatron

DSV3 = {"table": "25.09 / Pre-Training Performance / Model: DeepSeekV3", "task": "pretrain",
        "model": "DeepSeekV3", "family": "moe", "layers": 61, "hidden": 7168,
        "ffn_hidden": 18432, "heads": 128, "kv_heads": 128, "head_dim": 128, "vocab": 129280,
        "seq_len": 4096, "moe_experts": 256, "moe_topk": 8, "moe_ffn_hidden": 2048,
        "moe_shared_ffn": 2048, "moe_dense_layers": 3, "attention": "mla", "gpu": "H100",
        "num_gpus": 1024, "tp": 2, "pp": 8, "vp": 4, "cp": 1, "ep": 64, "gbs": 8192, "mbs": 1,
        "precision": "FP8-CS", "framework": "Megatron-Bridge/Megatron-Core",
        "config_consistent": "True"}  # fmt: skip
KIMI = DSV3 | {"table": "26.04 / Pre-Training Performance / Model: Kimi_K2", "model": "Kimi_K2",
               "heads": 64, "kv_heads": 64, "vocab": 163840, "moe_experts": 384,
               "moe_dense_layers": 1, "tp": 8, "pp": 16, "vp": 2, "precision": "BF16"}  # fmt: skip
SUPER = {"table": "26.08 / Pre-Training Performance / Model: Nemotron_3_Super",
         "task": "pretrain", "model": "Nemotron_3_Super", "family": "hybrid-moe",
         "seq_len": 4096, "gpu": "H100", "num_gpus": 64, "tp": 1, "pp": 2, "vp": 1, "cp": 1,
         "ep": 32, "gbs": 1280, "mbs": 1, "precision": "BF16",
         "framework": "Megatron-Bridge/Megatron-Core", "config_consistent": "True"}  # fmt: skip


def options(row: dict) -> dict[str, str]:
    return dict(row_run(pd.Series(row), source="t").framework_options)


def test_deepseek_v3_on_h100_reduces_gradients_after_the_backward():
    # run_script.py 94-95 (25.09, -g h100): comm_overlap.overlap_grad_reduce = False, a user
    # value CommOverlapConfig keeps; the parameter gather (DP = 1024 / 16 = 64 > 1) stays on
    run = row_run(pd.Series(DSV3), source="t")
    opts = dict(run.framework_options)
    assert "overlap_grad_reduce" not in opts and opts["overlap_param_gather"] == "true"
    assert run.distributed_optimizer
    assert any("overlap_grad_reduce=False" in a.reason for a in run.args if a.name == "recipe")
    for release in ("25.11", "26.02", "26.02.01", "26.04.01", "26.06.01", "26.08"):
        assert "overlap_grad_reduce" not in options(DSV3 | {"table": f"{release} / x"}), release
    # the shared fallback's overlap where no recipe turns it off: H200 (no preset, no -g h200)
    assert options(DSV3 | {"gpu": "H200"})["overlap_grad_reduce"] == "true"


def test_kimi_k2_on_h100_runs_muon_without_the_distributed_optimizer():
    # kimi_k2.py 53 (optimizer_type="muon"), 199-200: use_distributed_optimizer and
    # overlap_param_gather False; the BF16 precision-aware rule is Adam's only; the base's
    # ddp.overlap_grad_reduce = True holds (CommOverlapConfig skips DDP without the dist. opt.)
    # pipesim reads dist_muon as a layer-wise sharded optimizer keeping one momentum
    # (sim.runs.megatron_layout_flags.LAYER_WISE)
    run = row_run(pd.Series(KIMI), source="t")
    assert run.optimizer == "sgd_momentum"
    opts = dict(run.framework_options)
    assert "overlap_param_gather" not in opts and opts["overlap_grad_reduce"] == "true"
    assert "precision_aware_optimizer" not in dict(run.memory_options)
    h200 = row_run(pd.Series(KIMI | {"gpu": "H200"}), source="t")  # the shared fallback
    assert h200.optimizer == "adam" and dict(h200.memory_options)["precision_aware_optimizer"]


def test_nemotron_3_super_26_08_h100_bf16_overlaps_neither():
    # nemotron_3_super.py 232-233 (no CommOverlapConfig on the way): ddp values hold
    opts = options(SUPER)
    assert "overlap_grad_reduce" not in opts and "overlap_param_gather" not in opts
    # no such switch before 26.08 (the H100 preset of 26.08 is the only one: a 26.06.01 row of
    # its layout takes it, switches and all, sim.runs.bridge_hopper; another layout does not)
    earlier = options(SUPER | {"table": "26.06.01 / x", "pp": 1, "ep": 64})
    assert earlier["overlap_grad_reduce"] == "true"
    assert "overlap_grad_reduce" not in options(SUPER | {"table": "26.06.01 / x"})


def test_a_blackwell_recipe_row_without_an_off_switch_reads_as_before():
    # every switch on: the flags are those of the switches alone, as before this change;
    # one off cell adds flag: False, which Megatron's reader drops (the flag's default is off)
    row = {"overlap_grad_reduce": "True (ddp set True; DP=8)", "overlap_param_gather": "True",
           "use_distributed_optimizer": "True", "precision_aware_optimizer": "True"}  # fmt: skip
    flags = recipe_flags(row)
    assert all(v is True for v in flags.values()) and len(flags) == 4
    off = recipe_flags(row | {"overlap_param_gather": "False (ddp set False)"})
    assert off["overlap-param-gather"] is False
    args = {"num-layers": 2, "hidden-size": 256, "num-attention-heads": 4, "seq-length": 128,
            "vocab-size": 1024, "bf16": True, "global-batch-size": 64}  # fmt: skip
    dropped = {k: v for k, v in off.items() if v is not False}
    assert read_megatron(args | off, name="b", source="t", gpu="B200", num_gpus=8) == (
        read_megatron(args | dropped, name="b", source="t", gpu="B200", num_gpus=8)
    )
