"""Rows of the measured-data CSV layout from machines and frameworks the shipped rows do not
cover (H100/H200, 80 GB A100 spellings, NeMo, AutoModel, torchtitan), built from the test
sample ``tests/data/runs/measured_sample.csv`` with one cell changed: what each is read as,
worked out from the sources the readers cite."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from sim.runs.express import Expressed, NotExpressed, express, gpu_preset, hardware_for
from sim.runs.measured_csv import read_measured_csv

SAMPLE = Path(__file__).resolve().parent / "data" / "runs" / "measured_sample.csv"


def bridge_row(tmp_path: Path, **cells):
    """The sample's Megatron-Bridge row (Qwen3-like, GB300, MXFP8, 8 GPUs, tp 1) with ``cells``."""
    df = pd.read_csv(SAMPLE).iloc[[1]].copy()
    for k, v in cells.items():
        df[k] = v
    path = tmp_path / "rows.csv"
    df.to_csv(path, index=False)
    return read_measured_csv(path)[0]


def test_bridge_row_without_a_recipe_entry_runs_with_the_shared_settings(tmp_path):
    run = bridge_row(tmp_path, gpu="H100", precision="FP8-CS")
    ex = express(run)
    assert isinstance(ex, Expressed) and ex.hardware == "dgx-h100"
    assert any("no recipe-table entry" in a for a in ex.approximations)
    # _pretrain_common: distributed optimizer; _perf_precision: fp8 current scaling with
    # fp8_param_gather; no recompute set by the shared code
    assert run.distributed_optimizer and run.param_gather and run.recompute == "none"
    assert run.precision == "fp8-tensorwise"


def test_formats_a_gpu_lacks_are_refused_and_hopper_labels_mapped(tmp_path):
    why = express(bridge_row(tmp_path, gpu="H100"))  # MXFP8: Hopper has FP8 only
    assert isinstance(why, NotExpressed)
    assert any("no mxfp8 GEMMs" in r for r in why.reasons)
    assert isinstance(express(bridge_row(tmp_path, gpu="B200")), Expressed)
    assert bridge_row(tmp_path, gpu="H100", precision="FP8-DS").precision == "fp8-delayed"
    sc = bridge_row(tmp_path, gpu="H100", precision="FP8-SC")  # subchannel: blocks, bf16 gather
    assert sc.precision == "fp8-blockwise" and not sc.param_gather
    alt = "FP8 alt granularity (MX 32x32 on GB200/B200; 128x128 w / 1x128 act blockwise on H100)"
    assert bridge_row(tmp_path, gpu="H200", precision=alt).precision == "fp8-blockwise"
    assert bridge_row(tmp_path, gpu="B200", precision=alt).precision == "fp8-mxfp8"


def test_a100_80gb_spellings_and_hopper_names():
    for name in ("A100-SXM4-80GB", "A100 80GB", "A100-80GB", "A100-SXM-80GB"):
        assert gpu_preset(name) == "dgx-a100-80gb", name
    assert gpu_preset("A100") == gpu_preset("A100-SXM4-40GB") == "dgx-a100-40gb"
    assert gpu_preset("H100-SXM5-80GB") == gpu_preset("DGX-H100") == "dgx-h100"
    assert gpu_preset("H200 141GB") == "dgx-h200"
    assert gpu_preset("GH200") == "gh200-96gb"  # one Grace Hopper superchip, not an H200 server
    assert hardware_for("GH200", 1)[0] == "gh200-96gb" and hardware_for("GH200", 8)[0] is None
    assert hardware_for("H100 PCIe", 8)[0] is None and "PCIe" in hardware_for("H100 PCIe", 8)[1]


def test_framework_names(tmp_path):
    nemo = bridge_row(tmp_path, gpu="H100", precision="BF16", framework="NeMo 25.04")
    ex = express(nemo)
    assert isinstance(ex, Expressed)
    assert any("NeMo 2.0" in a for a in ex.approximations)
    auto = express(bridge_row(tmp_path, gpu="H100", precision="BF16", framework="NeMo AutoModel"))
    assert isinstance(auto, NotExpressed)
    assert any("nemo-automodel" in r for r in auto.reasons)
    mds = megatron_row(tmp_path, framework="Megatron-DeepSpeed")
    assert mds.framework == "megatron-deepspeed" and isinstance(express(mds), Expressed)
    zero = express(megatron_row(tmp_path, framework="DeepSpeed ZeRO"))
    assert isinstance(zero, NotExpressed) and any("ZeRO stage" in r for r in zero.reasons)


def test_torchtitan_row_is_read_as_its_job_config(tmp_path):
    # 16 GPUs, tp 2, fsdp 4: dp 8 = 4 shards x 2 replicas (HSDP); gbs 32 = mbs 2 x dp 8 x 2
    run = bridge_row(tmp_path, framework="torchtitan", gpu="H100", precision="BF16",
                     num_gpus=16, tp=2, dp=8, fsdp=4, mbs=2, gbs=32)  # fmt: skip
    assert run.framework == "torchtitan"
    lay = run.layout
    assert (lay.tp, lay.dp_shard, lay.dp_replicate, lay.dp) == (2, 4, 2, 8)
    assert run.microbatch_size == 2 and run.microbatches == 2
    assert run.shape.ffn_hidden == 6144 and run.shape.kv_heads == 4  # the shape columns
    ex = express(run)
    assert isinstance(ex, Expressed) and ex.framework.startswith("torchtitan")
    piped = bridge_row(tmp_path, framework="torchtitan", gpu="H100", precision="BF16", pp=2,
                       dp=4, schedule="Interleaved 1F1B")  # fmt: skip
    assert piped.schedule == "interleaved_1f1b" and piped.layout.vp == 2
    moe = express(bridge_row(tmp_path, framework="torchtitan", gpu="H100", precision="BF16",
                             moe_experts=8, moe_topk=2))  # fmt: skip
    assert isinstance(moe, NotExpressed) and any("MoE" in r for r in moe.reasons)
    compiled = express(bridge_row(tmp_path, framework="torchtitan (torch.compile)", gpu="H100",
                                  precision="BF16"))  # fmt: skip
    # a compiled run is expressed as eager, the approximation stated (an upper bound)
    assert isinstance(compiled, Expressed)
    assert any(a.startswith("compile.enable") and "eager" in a for a in compiled.approximations)


def test_model_settings_of_a_base_recipe_are_kept_without_a_recipe_entry(tmp_path):
    # Llama 3.1 405B counts embedding and loss as pipeline layers: 6 layers + 2 over 8 stages
    run = bridge_row(tmp_path, model="LLAMA3.1_405B", layers=6, pp=8, dp=1, gbs=16, gpu="H100",
                     precision="BF16")  # fmt: skip
    assert run.pipeline_layout == "E|t|t|t|t|t|t|L"
    plain = bridge_row(tmp_path, model="LLAMA3_70B", layers=6, pp=8, dp=1, gbs=16, gpu="H100",
                       precision="BF16")  # fmt: skip
    assert not plain.pipeline_layout


def megatron_row(tmp_path: Path, **cells):
    """The sample's Megatron-LM row (Llama-like, B200, BF16, no recompute) with ``cells``."""
    df = pd.read_csv(SAMPLE).iloc[[0]].copy()
    for k, v in cells.items():
        df[k] = v
    path = tmp_path / "mrows.csv"
    df.to_csv(path, index=False)
    return read_measured_csv(path)[0]


def test_megatron_rows_read_fp8_and_recompute_as_megatron_defaults(tmp_path):
    # a bare FP8: Megatron-Core's default recipe (delayed); Bridge's tables mean current scaling
    assert megatron_row(tmp_path, gpu="H100", precision="FP8").precision == "fp8-delayed"
    assert bridge_row(tmp_path, gpu="H100", precision="FP8").precision == "fp8-tensorwise"
    # "selective": Megatron's default modules; a bare "full": every layer, stated
    assert megatron_row(tmp_path, recompute="selective").recompute == "selective"
    full = megatron_row(tmp_path, recompute="full")
    assert full.recompute == "full"
    ex = express(full)
    assert isinstance(ex, Expressed) and any("bare 'full'" in a for a in ex.approximations)


def test_torchtitan_selective_checkpointing_maps_to_pipesim_policies(tmp_path):
    # per-op SAC: pipesim's recompute:sac under FSDP2 (dp 8 shards)
    op = bridge_row(tmp_path, framework="torchtitan", gpu="H100", precision="BF16",
                    recompute="selective op")  # fmt: skip
    assert op.recompute == "sac"
    ex = express(op)
    assert isinstance(ex, Expressed) and ex.point["memory_policy"] == "recompute:sac"
    # layer SAC, torchtitan's default every 2nd layer: 4 layers, 1 stage -> 2 layers recomputed
    layer = express(bridge_row(tmp_path, framework="torchtitan", gpu="H100", precision="BF16",
                               recompute="selective layer"))  # fmt: skip
    assert isinstance(layer, Expressed) and layer.point["memory_policy"] == "recompute:full:2"
    assert any("every 2th layer" in a for a in layer.approximations)
