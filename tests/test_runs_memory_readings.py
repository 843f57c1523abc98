"""What sim.runs reads for memory from a run's arguments (issue 27): the loss flags, the Bridge
recipes' loss cells, SimuMax's launcher settings, the attention backend by TE image, the usable
capacity of B200/GB200 and the GPU a peak was measured on. Hand-computed cases."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

from sim.events import EventLog, MemoryEvent
from sim.hardware.loader import load_hardware
from sim.runs.bridge_recipes import recipe_flags
from sim.runs.measured_csv import row_run
from sim.runs.megatron_args import flag_memory_options, loss_options, read_megatron
from sim.runs.predict import measured_gpu_allocated
from sim.runs.record import Measured
from sim.runs.te_environment import LATER, LTS_2401, golden_environment, run_attention

MIB, GIB = 2.0**20, 2.0**30


def test_loss_flags_map_to_the_memory_fields():
    """The loss is the shape's cross_entropy_fusion, not a memory: field; the weight-gradient
    flag is."""
    assert loss_options({}) == {}
    te = {"cross-entropy-loss-fusion": True, "cross-entropy-fusion-impl": "te"}
    assert loss_options(te) == {}
    assert loss_options({"no-gradient-accumulation-fusion": True}) == {
        "gradient_accumulation_fusion": False
    }
    both = flag_memory_options(te | {"deterministic-mode": True})
    assert both == {"cublas_workspace_config": ":4096:8"}


def test_read_megatron_carries_the_loss_into_the_shape_only():
    flags = {"--num-layers": 2, "--hidden-size": 64, "--num-attention-heads": 4,
             "--seq-length": 128, "--vocab-size": 1024, "--micro-batch-size": 1,
             "--global-batch-size": 8, "--cross-entropy-loss-fusion": True,
             "--cross-entropy-fusion-impl": "te", "--bf16": True}  # fmt: skip
    run = read_megatron(flags, name="x", source="t", num_gpus=8)
    assert "cross_entropy" not in dict(run.memory_options)
    assert "cross_entropy=te" in run.shape.features


def test_bridge_recipe_loss_cells():
    f = recipe_flags({"cross_entropy_loss_fusion": "True (default)",
                      "cross_entropy_fusion_impl": "te", "gradient_accumulation_fusion":
                      "auto (fusions.can_enable_gradient_accumulation_fusion)"})  # fmt: skip
    assert f["cross-entropy-loss-fusion"] is True and f["cross-entropy-fusion-impl"] == "te"
    assert "no-gradient-accumulation-fusion" not in f  # auto: TE is installed
    off = recipe_flags({"cross_entropy_loss_fusion": "False", "cross_entropy_fusion_impl": "te",
                        "gradient_accumulation_fusion": "False"})  # fmt: skip
    assert off["cross-entropy-loss-fusion"] is False and off["no-gradient-accumulation-fusion"]


def _simumax_row(case: str, experts: int | None) -> pd.Series:
    return pd.Series({
        "source_id": "simumax_b200_v1_2", "model": "m", "family": "moe" if experts else "dense",
        "layers": 4, "hidden": 1024, "ffn_hidden": 4096, "heads": 8, "kv_heads": 8,
        "vocab": 32000, "seq_len": 4096, "moe_experts": experts, "moe_topk": 2 if experts else None,
        "moe_ffn_hidden": 512 if experts else None, "moe_shared_ffn": 0, "moe_dense_layers": 1,
        "gpu": "B200", "num_gpus": 8, "tp": 1, "pp": 1, "cp": 1, "ep": 8 if experts else 1,
        "dp": 8, "gbs": 8, "mbs": 1, "precision": "bf16", "recompute": "none",
        "framework": "Megatron-LM", "note": f"case {case}; distributed optimizer",
        "peak_mem_gib": 10.0, "mem_kind": "max over ranks of torch.cuda.max_memory_allocated",
    })  # fmt: skip


def test_simumax_rows_get_their_launcher_settings():
    dense = row_run(_simumax_row("l4_tp1_cef", None), source="t")
    assert "cross_entropy=te" in dense.shape.features
    assert dense.shape.moe_capacity_factor is None
    moe = row_run(_simumax_row("l4_ep8", 8), source="t")
    assert not any(f.startswith("cross_entropy") for f in moe.shape.features)
    assert moe.shape.moe_capacity_factor == 1.0 and moe.shape.moe_pad_to_capacity


def test_attention_by_te_image():
    det = {"deterministic-mode": True}
    assert golden_environment("x [lts_dgx_a100]", "2025-10-21") is LTS_2401
    assert golden_environment("x [dev_dgx_a100]", "2025-10-21") is LATER
    assert run_attention(det, "A100-SXM-80GB", LTS_2401) == "math"  # TE 1.2: unfused on sm80
    assert run_attention(det, "H100", LTS_2401) == "flash"  # FusedAttention on sm90
    assert run_attention(det, "A100-SXM-80GB", LATER) == "flash"
    assert run_attention(det, "some GPU", LTS_2401) == "flash"  # unknown: fused assumed
    assert run_attention({"attention-backend": "local"}, "H100") == "math"
    assert run_attention({"transformer-impl": "local"}, "H100") == "math"


def test_te_runs_its_unfused_attention_below_sm80():
    """TE enables flash-attn and FusedAttention only at compute capability 8.0 and above (v1.2
    attention.py 2001-2016; 8b99682 dot_product_attention/utils.py 487-494): a V100 (7.0,
    NVIDIA's CUDA GPUs table, sim.hardware.gpu_spec) keeps the scores, deterministic or not, in
    either image; an A800 (8.0) chooses as an A100 does."""
    for env in (LTS_2401, LATER):
        assert run_attention({}, "V100-SXM2-32GB", env) == "math"
    assert run_attention({"deterministic-mode": True}, "A800-SXM4-80GB", LTS_2401) == "math"
    assert run_attention({}, "A800-SXM4-80GB", LTS_2401) == "flash"


@pytest.mark.parametrize(("preset", "mib"), [("dgx-b200", 182642), ("gb200-nvl72", 189471)])
def test_blackwell_usable_capacity_is_what_the_device_reports(preset, mib):
    assert load_hardware(preset).gpus[0].memory_bytes == mib * MIB


def test_the_peak_is_read_on_the_gpu_it_was_measured_on():
    assert Measured(memory_kind="max over logged steps of mem-max-allocated-bytes (rank "
                    "logging it; GiB)").peak_rank == "last"  # fmt: skip
    assert (
        Measured(memory_kind="max over ranks of torch.cuda.max_memory_allocated").peak_rank == "max"
    )
    # gpu0 (stage 0): 3 GiB weights + 4 GiB activations, then 1 GiB reserve (outside torch);
    # gpu1 (the last stage): 3 GiB weights, 1 GiB framework workspace, 2 GiB allocator slack
    ev = [MemoryEvent(0.0, "gpu0", 3 * GIB, "weights"), MemoryEvent(1.0, "gpu0", 4 * GIB,
          "activations"), MemoryEvent(0.0, "gpu0", 1 * GIB, "reserve"),
          MemoryEvent(0.0, "gpu1", 3 * GIB, "weights"), MemoryEvent(0.0, "gpu1", 1 * GIB,
          "framework"), MemoryEvent(0.0, "gpu1", 2 * GIB, "allocator")]  # fmt: skip
    log = EventLog(memory=ev, capacity_bytes={"gpu0": 80 * GIB, "gpu1": 80 * GIB})
    row = SimpleNamespace(placement="[[0, 1]]")  # sim.point.simulate.placement_json
    assert measured_gpu_allocated(row, log, "max") == 7 * GIB  # type: ignore[arg-type]
    assert measured_gpu_allocated(row, log, "last") == 4 * GIB  # type: ignore[arg-type]
    tp = SimpleNamespace(placement="[[[0, 2], [1, 3]]]")
    assert measured_gpu_allocated(tp, log, "last") == 4 * GIB  # type: ignore[arg-type]
    assert measured_gpu_allocated(row, None, "last") is None  # type: ignore[arg-type]


def test_layer_wise_muon_shards_its_state_like_the_distributed_optimizer():
    # Kimi K2's Bridge recipe: optimizer dist_muon with use_distributed_optimizer False
    # (Megatron-Bridge v0.5.0 recipes/kimi/kimi_k2.py 193-200); Megatron-Core builds it as
    # muon + LayerWiseDistributedOptimizer, each DP rank keeping its share of the state.
    f = recipe_flags({"optimizer": "dist_muon", "use_distributed_optimizer": "False"})
    assert f["optimizer"] == "dist_muon" and f["use-distributed-optimizer"] is False
    assert "optimizer" not in recipe_flags({"optimizer": "adam"})
    base = {"--num-layers": 2, "--hidden-size": 64, "--num-attention-heads": 4,
            "--seq-length": 128, "--vocab-size": 1024, "--micro-batch-size": 1,
            "--global-batch-size": 8, "--bf16": True}  # fmt: skip
    lw = read_megatron(base | {"--optimizer": "dist_muon"}, name="x", source="t", num_gpus=8)
    plain = read_megatron(base | {"--optimizer": "muon"}, name="x", source="t", num_gpus=8)
    assert lw.distributed_optimizer and not plain.distributed_optimizer
    assert lw.optimizer == plain.optimizer == "sgd_momentum"  # master + one momentum: 8 B
    note = next(a for a in lw.args if a.name.lstrip("-") == "optimizer")
    assert note.status == "approximated" and "layer-wise" in note.reason


def test_megatron_moe_experts_fuse_the_weighting_by_their_activation():
    base = {"--num-layers": 2, "--hidden-size": 64, "--num-attention-heads": 4,
            "--seq-length": 128, "--vocab-size": 1024, "--micro-batch-size": 1,
            "--global-batch-size": 8, "--bf16": True, "--num-experts": 4,
            "--expert-model-parallel-size": 2}  # fmt: skip

    def unfused(flags: dict, framework: str = "megatron-lm") -> bool:
        run = read_megatron(base | flags, name="x", source="t", num_gpus=8, framework=framework)
        return "moe_weighting=unfused" in run.shape.features

    assert unfused({"--no-bias-gelu-fusion": True})  # GeLU experts: no fused form
    assert not unfused({"--swiglu": True})
    assert unfused({"--swiglu": True, "--no-bias-swiglu-fusion": True})
    assert unfused({"--squared-relu": True})
    assert not unfused({"--squared-relu": True, "--use-fused-weighted-squared-relu": True})
    assert not unfused({}, framework="megatron-bridge")  # the perf recipes set the fusions


def test_bridge_25_09_rows_reduce_gradients_in_bf16():
    """Every 25.09 launcher YAML sets ConfigContainer.mixed_precision.grad_reduce_in_fp32: false
    (Megatron-Bridge v0.1.0rc3 scripts/performance/configs/*/*_llm_pretrain.yaml), and
    runtime_config_update copies the mixed-precision fields onto the DDP config
    (training/config.py 1116-1120, mixed_precision.py 110-133) over the recipe's ddp value True:
    the shipped recipe table reads False for all 21 rows of 25.09, so each runs a 16-bit
    gradient buffer (--grad-reduce-in-bf16)."""
    table = pd.read_csv("measurements/megatron-bridge/recipes.csv").to_dict("records")
    rows = [r for r in table if str(r["settings_from"]).startswith("v0.1.0rc3")]
    assert len(rows) == 21
    assert all(recipe_flags(r).get("grad-reduce-in-bf16") for r in rows)
