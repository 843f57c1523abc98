"""sim.runs.bridge_hopper: an H100 Bridge row takes its release's H100 preset (hand-checked
against NVIDIA-NeMo/Megatron-Bridge v0.5.1 ``scripts/performance/configs/llama/
llama3_workload_base_configs.py`` 190-195 and 473-477, ``utils/overrides.py`` 150-153,
``configs/llama/llama3_llm_pretrain.py`` 239-249)."""

from __future__ import annotations

import pandas as pd
import pytest

from sim.runs.bridge_fallback import FALLBACK_NOTE
from sim.runs.bridge_hopper import SHIPPED, hopper_entry
from sim.runs.express import Expressed, express
from sim.runs.measured_csv import row_run
from sim.runs.predict import Predictor
from tests.bridge_rows import SUPER_H100_26_08

LLAMA8B = {"table": "26.06.01 / Pre-Training Performance / Model: LLAMA3_8B", "task": "pretrain",
           "model": "LLAMA3_8B", "family": "dense", "layers": 32, "hidden": 4096,
           "ffn_hidden": 14336, "heads": 32, "kv_heads": 8, "head_dim": 128, "vocab": 128256,
           "seq_len": 8192, "attention": "gqa", "gpu": "H100", "num_gpus": 8, "tp": 1, "pp": 1,
           "vp": 1, "cp": 1, "ep": 1, "gbs": 128, "mbs": 1, "precision": "FP8-CS",
           "framework": "Megatron-Bridge/Megatron-Core", "config_consistent": "True"}  # fmt: skip
LLAMA70B = LLAMA8B | {"table": "26.06.01 / Pre-Training Performance / Model: LLAMA3_70B",
                      "model": "LLAMA3_70B", "layers": 80, "hidden": 8192, "ffn_hidden": 28672,
                      "heads": 64, "num_gpus": 64, "tp": 4, "pp": 8, "vp": 5,
                      "gbs": 256}  # fmt: skip


def recipe_note(run) -> str:
    return next(a.reason for a in run.args if a.name == "recipe")


def test_llama3_8b_fp8cs_h100_gets_full_block_recompute_of_5_layers():
    # preset LLAMA3_8B_PRETRAIN_CONFIG_H100_FP8_CS_V1: recompute_num_layers=5, which
    # _set_recompute_overrides turns into granularity full, method block, 5 layers
    entry = hopper_entry(LLAMA8B, "26.06.01")
    assert entry is not None
    assert (entry.flags["recompute-granularity"], entry.flags["recompute-method"],
            entry.flags["recompute-num-layers"]) == ("full", "block", "5")  # fmt: skip
    run = row_run(pd.Series(LLAMA8B), source="t")
    assert run.recompute == "full:block:5"
    assert "LLAMA3_8B_PRETRAIN_CONFIG_H100_FP8_CS_V1" in recipe_note(run)
    ex = express(run)  # with the distributed optimizer: the first 5 layers of the stage
    assert isinstance(ex, Expressed) and ex.point["memory_policy"] == "dist_opt:recompute:full:5"
    bf16 = row_run(pd.Series(LLAMA8B | {"precision": "BF16", "cp": 2}), source="t")
    assert bf16.recompute == "none"  # the BF16 preset (CP 2) sets no recompute


def test_llama3_70b_h100_gets_tp_overlap():
    # the H100 function sets the userbuffers TP overlap; TP 4 with sequence parallelism;
    # DP = 64 / (4 * 8) = 2 > 1, PP 8 > 1, VP 5 > 1: param gather with the optimizer step
    entry = hopper_entry(LLAMA70B, "26.06.01")
    assert entry is not None and entry.flags["tp-comm-overlap"] is True
    assert entry.flags["overlap-param-gather-with-optimizer-step"] is True
    assert "recompute-granularity" not in entry.flags
    run = row_run(pd.Series(LLAMA70B), source="t")
    assert ("tp_comm_overlap", "true") in run.framework_options


def test_other_layout_or_h200_keeps_the_shared_fallback():
    for other in ({"cp": 2}, {"gpu": "H200"}, {"tp": 2}):
        row = LLAMA8B | other
        assert hopper_entry(row, "26.06.01") is None
        assert recipe_note(row_run(pd.Series(row), source="t")) == FALLBACK_NOTE


def test_a_release_without_the_preset_takes_the_latest_and_says_so():
    entry = hopper_entry(LLAMA8B | {"table": "26.10 / x"}, "26.10")
    assert entry is not None and "26.08's used" in entry.note  # v0.6.0's flat recipe
    assert "v0.6.0:src/megatron/bridge/perf_recipes/llama/h100/llama3.py:72" in entry.note
    assert entry.flags["recompute-num-layers"] == "5"  # llama3.py:87-89 (as 26.06.01's preset)


def test_25_09_fp8_runs_megatron_fsdp():
    # v0.1.0rc3 llama3_8b_llm_pretrain.yaml perf_matrix h100 fp8_cs: use_megatron_fsdp true
    row = LLAMA8B | {"table": "25.09 / x", "precision": "FP8 (precision column absent)"}
    entry = hopper_entry(row, "25.09")
    assert entry is not None and entry.flags.get("use-megatron-fsdp") is True
    assert "recompute-granularity" not in entry.flags


def test_another_gpu_count_takes_the_preset_with_dp_and_gbs_following():
    # v0.5.1 overrides.py:524-543: the preset runs at any -ng; GBS int(GBS / 64 * N);
    # DP = N / (TP 4 * PP 8 * CP 1); param gather with the optimizer step only where DP > 1
    at128 = hopper_entry(LLAMA70B | {"num_gpus": 128, "gbs": 512}, "26.06.01")
    assert at128 is not None and "read at 128 GPUs, the preset's own 64" in at128.note
    assert "_FP8_CS_V2" in at128.note and "GBS 256 scales to 512" in at128.note  # 256 / 64 * 128
    assert "v0.5.1:scripts/performance/utils/overrides.py:524-543" in at128.note
    assert at128.flags["overlap-param-gather-with-optimizer-step"] is True  # DP 4
    at32 = hopper_entry(LLAMA70B | {"num_gpus": 32, "gbs": 64}, "26.06.01")
    assert at32 is not None and "_FP8_CS_V1" in at32.note  # V1's GBS 128 / 64 * 32 = 64
    assert at32.flags["overlap-param-gather-with-optimizer-step"] is False  # DP 32 / 32 = 1
    assert at32.flags["tp-comm-overlap"] is True  # the preset's own settings stay
    assert hopper_entry(LLAMA70B | {"num_gpus": 48}, "26.06.01") is None  # 48 % 32 != 0
    exact = hopper_entry(LLAMA8B, "26.06.01")  # the exact count says nothing of a count
    assert exact is not None and "read at" not in exact.note


def test_26_08_at_another_count_takes_the_launchers_default_flat_recipe():
    # v0.6.0 utils.py:66-87: Llama 3 8B H100's default is the 8-GPU recipe (not the 64-GPU
    # one, whose GBS scales alike: 1024 * 8 / 32 = 256); Llama 3.1 405B's the largest (1024)
    row = LLAMA8B | {"precision": "BF16", "cp": 2, "num_gpus": 16, "gbs": 256}
    entry = hopper_entry(row, "26.08")
    assert entry is not None and "llama3_8b_pretrain_8gpu_h100_bf16_config" in entry.note
    assert "GBS 128 scales to 256" in entry.note  # 128 * DP 8 / DP 4
    big = LLAMA70B | {"model": "LLAMA3.1_405B", "precision": "BF16", "num_gpus": 256,
                      "tp": 8, "pp": 8, "cp": 2, "vp": 8, "gbs": 384}  # fmt: skip
    entry = hopper_entry(big, "26.08")
    assert entry is not None and "llama31_405b_pretrain_1024gpu_h100_bf16_config" in entry.note
    assert "GBS 1536 scales to 384" in entry.note  # 1536 * DP 2 / DP 8


def test_25_09_keys_presets_by_gpu_count():
    # v0.1.0rc3 utils/common.py:25-30: perf_matrix.h100.num_gpus_16 absent for Llama 3 8B,
    # so no preset runs (helpers.py:140-144); later releases' 8-GPU presets are not taken
    row = LLAMA8B | {"table": "25.09 / x", "precision": "FP8", "num_gpus": 16, "gbs": 256}
    assert hopper_entry(row, "25.09") is None
    assert hopper_entry(row | {"table": "26.06.01 / x"}, "26.06.01") is not None


SUPER = SUPER_H100_26_08


def test_nemotron_3_super_26_08_reads_its_library_recipe_and_fits_an_h100():
    # v0.6.0 perf_recipes/nemotronh/h100/nemotronh.py:73 starts from the library recipe,
    # recipes/nemotronh/h100/nemotron_3_super.py:217-226 (selective recompute of layernorm,
    # moe_act, moe, core_attn; precision-aware Adam: bf16 grads, fp16 master, bf16 moments)
    run = row_run(pd.Series(SUPER), source="t")
    assert run.recompute == "selective:layernorm+moe_act+moe+core_attn"
    mem = dict(run.memory_options)
    assert (mem["main_params_dtype"], mem["exp_avg_dtype"], mem["exp_avg_sq_dtype"],
            mem["main_grads_dtype"]) == ("fp16", "bf16", "bf16", "bf16")  # fmt: skip
    # hand count of a pipeline stage (44 layers: 20 Mamba, 20 MoE, 4 attention, embedding;
    # sim.runs.model_shapes' Nemotron 3 Super): each MoE layer keeps 512 / EP 32 = 16 latent
    # experts (1024 x 2688 up and down) whole (expert DP = 64 / (PP 2 x EP 32) = 1), the
    # rest is sharded over DP 32 by the distributed optimizer
    h = 4096
    mamba = h * 18560 + 10240 * 5 + 3 * 128 + 8192 + 8192 * h + h  # in_proj, conv, A D dt, norms
    attn = h * (4096 + 512) + 4096 * h + h
    moe_dense = 2 * h * 5376 + 2 * h * 1024 + h * 512 + h  # shared expert, latent, router, norm
    expert = 20 * 16 * 2 * 1024 * 2688
    dense = 20 * mamba + 4 * attn + 20 * moe_dense + 131072 * h
    # the peak is stage 1: the same layers, the head (V h and the final norm) for the
    # embedding, and the recipe's MTP (lines 98-102: two depths of one shared layer, held
    # once): eh_proj 2 h^2, three norms, an attention and a MoE layer
    expert += 16 * 2 * 1024 * 2688
    dense += h + 2 * h * h + 3 * h + attn + moe_dense
    # and the MTP stage's own word embedding (V h; hybrid_model.py@d98e8a64 l.239-240 builds
    # LanguageModelEmbedding where pre_process or mtp_process)
    dense += 131072 * h
    p = Predictor().predict(express(run))
    assert p.row is not None and p.fits
    assert p.row.peak_weights_bytes == pytest.approx(2 * (dense + expert), rel=1e-3)
    # 6 bytes a parameter (2 + 2 + 2), not the fp32 moments' 10 (2-byte remainder + 4 + 4)
    assert p.row.peak_optimizer_bytes == pytest.approx(6 * (expert + dense / 32), rel=1e-3)
    assert p.peak_bytes < 80e9  # NVIDIA ran the preset on 80 GB H100s


QWEN30B = {"table": "26.08 / Pre-Training Performance / Model: Qwen3_30B_a3B",
           "task": "pretrain", "model": "Qwen3_30B_a3B", "gpu": "H100", "num_gpus": 16,
           "tp": 1, "pp": 1, "vp": 1, "cp": 1, "ep": 16, "gbs": 1024, "mbs": 1,
           "precision": "BF16"}  # fmt: skip


def test_qwen3_30b_a3b_26_08_bf16_reads_its_library_recipe():
    # v0.6.0 perf_recipes/qwen/h100/qwen3_moe.py:30-32, 37 start from the library's 16-GPU
    # function, recipes/qwen/h100/qwen3_moe.py:146-225: TP 1 PP 1 CP 1 EP 16 ETP 1, MBS 1
    # (:169-178); no recompute (:163-165 undo the 8-GPU function's full/uniform/1, :92-94);
    # HybridEP flex dispatch (:205-206); TE graphs of the router (:213-214); the perf file
    # adds EP overlap without delayed wgrad (:40-41)
    entry = hopper_entry(QWEN30B, "26.08")
    assert entry is not None and "qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config" in entry.note
    assert "recipes/qwen/h100/qwen3_moe.py" in entry.note
    table = pd.read_csv(SHIPPED, dtype=str, keep_default_na=False)
    own = table[table.preset == "qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config"].iloc[0]
    assert (own.tp, own.pp, own.vp, own.cp, own.ep, own.etp, own.mbs) == (
        "1", "1", "1", "1", "16", "1", "1")  # fmt: skip
    assert own.recompute_granularity == "" and "recompute-granularity" not in entry.flags
    f = entry.flags
    assert (f["moe-token-dispatcher-type"], f["moe-flex-dispatcher-backend"]) == (
        "flex",
        "hybridep",
    )
    assert f["cuda-graph-scope"] == "moe_router,moe_preprocess"
    assert f["overlap-moe-expert-parallel-comm"] is True and f["delay-wgrad-compute"] is False
    assert f["use-precision-aware-optimizer"] is True and f["exp-avg-dtype"] == "float32"


def test_deepseek_v3_26_08_fp8sc_takes_the_layout_helpers_pp8_vp2_entry():
    # v0.6.0 recipes/deepseek/h100/deepseek_v3.py:65-75: (8, 2) -> embedding + 4 decoders,
    # 14 stages of 4, then 1 decoder + MTP + loss (61 decoders, mtp_num_layers 1, :123)
    row = QWEN30B | {"table": "26.08 / x", "model": "DeepSeekV3", "num_gpus": 1024,
                     "tp": 2, "pp": 8, "vp": 2, "ep": 64, "gbs": 16384, "precision": "FP8-SC"}  # fmt: skip
    entry = hopper_entry(row, "26.08")
    assert entry is not None and "fp8sc" in entry.note
    assert entry.flags["pipeline-model-parallel-layout"] == "|".join(
        ["Etttt"] + ["tttt"] * 14 + ["tmL"]
    )


def test_deepseek_v3_26_08_fp8cs_64gpu_reads_its_library_dispatcher_and_optimizer():
    # the perf function (v0.6.0 perf_recipes/deepseek/h100/deepseek_v3.py:192-194) starts from
    # deepseek_v3_pretrain_config, bound through perf_recipes/deepseek/common.py:24 and
    # recipes/deepseek/deepseek_v3.py:26-27 to recipes/deepseek/h100/deepseek_v3.py:91, which
    # sets HybridEP (:145) and flex dispatch on an H100 (apply_flex_dispatcher_backend,
    # training/flex_dispatcher_backend.py:53-80), and the precision-aware optimizer with fp32
    # master weights and bf16 gradients and moments (:206-210); the perf function sets neither
    row = QWEN30B | {"table": "26.08 / x", "model": "DeepSeekV3", "num_gpus": 64, "tp": 2,
                     "pp": 8, "vp": 4, "ep": 64, "gbs": 1024, "precision": "FP8-CS"}  # fmt: skip
    entry = hopper_entry(row, "26.08")
    assert entry is not None and "deepseek_v3_pretrain_64gpu_h100_fp8cs_config" in entry.note
    f = entry.flags
    assert (f["moe-token-dispatcher-type"], f["moe-flex-dispatcher-backend"]) == (
        "flex",
        "hybridep",
    )
    assert f["use-precision-aware-optimizer"] is True  # an FP8 row: the launcher's rule is BF16's
    assert (f["main-params-dtype"], f["main-grads-dtype"], f["exp-avg-dtype"],
            f["exp-avg-sq-dtype"]) == ("float32", "bfloat16", "bfloat16", "bfloat16")  # fmt: skip


def test_26_08_library_router_fusion_and_muon_reach_their_rows():
    # Nemotron 3 Nano: the library's moe_router_fusion = False (recipes/nemotronh/h100/
    # nemotron_3_nano.py:163 at v0.6.0) is not overridden by the perf function: the eager router.
    # Kimi K2: _apply_kimi_k2_optimizer(cfg, "muon") (recipes/kimi/h100/kimi_k2.py:200) takes
    # the muon branch (:66-75, dist_muon), so the launcher's BF16 Adam rule does not turn the
    # precision-aware optimizer on (run_script.py:149-151)
    nano = QWEN30B | {"table": "26.08 / x", "model": "Nemotron_3_Nano", "ep": 8}
    entry = hopper_entry(nano, "26.08")
    assert entry is not None and entry.flags["no-moe-router-fusion"] is True
    assert entry.flags["moe-flex-dispatcher-backend"] == "hybridep"
    table = pd.read_csv(SHIPPED, dtype=str, keep_default_na=False)
    kimi = table[table.preset == "kimi_k2_pretrain_1024gpu_h100_bf16_config"].iloc[0]
    assert kimi.precision_aware_optimizer == "False"
