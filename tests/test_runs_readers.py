"""The measured-run readers (sim.runs) on the sample files of tests/data/runs/ (written from the
frameworks' own logging and argument-parsing code: tests/data/runs/README.md), with the values
worked out by hand from those files."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sim.errors import InputError
from sim.runs.argv import parse_command
from sim.runs.express import Expressed, NotExpressed, express, gpu_preset, hardware_for
from sim.runs.megatron_args import read_megatron
from sim.runs.readers import detect, read_hf_config, read_runs
from sim.runs.vtrain import padded_vocab
from sim.runs.warmup import WarmupError, steady_time

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "runs"
MiB, GiB = 2.0**20, 2.0**30
GOLDEN = DATA / "golden" / "gpt" / "gpt3_tiny_tp2_pp2" / "golden_values_dev_dgx_a100.json"


MEGATRON_70B = DATA / "megatron_llama3_70b_64xh100.sh"


def one(path: Path | str, **kw):
    runs = read_runs(path, **kw)
    assert len(runs) == 1
    return runs[0]


def status(run, name: str) -> str:
    return next(a.status for a in run.args if a.name == name)


def test_warmup_rule_drops_the_first_two_steps_and_takes_the_median():
    assert steady_time({1: 9.0, 2: 5.0, 3: 1.0, 4: 3.0, 5: 2.0})[0] == 2.0
    # a log interval of 10: the value at 10 is the mean of steps 1-10, so it is warm-up
    assert steady_time({10: 9.0, 20: 1.0, 30: 2.0, 40: 3.0})[0] == 2.0
    value, rule = steady_time({1: 4.0, 2: 2.0})  # too few: every step after the first
    assert value == 2.0 and "every step after the first" in rule
    with pytest.raises(WarmupError):
        steady_time({1: 4.0})


def test_command_line_split():
    c = parse_command(
        "A=1 python -m torch.distributed.run --nproc_per_node=4 x.py --tp 2 --bf16 --lr -1e-3"
    )
    assert c.env == {"A": "1"} and c.launcher == "run" and c.script == "x.py"
    assert c.launcher_flags == {"nproc-per-node": "4"}
    assert c.flags == {"tp": "2", "bf16": True, "lr": "-1e-3"}


def test_megatron_log():
    run = one(DATA / "megatron_llama_tp2_pp2.log", gpu="A100-SXM-80GB")
    lay = run.layout
    assert (lay.tp, lay.pp, lay.dp, lay.cp, lay.sp) == (2, 2, 2, 1, True)
    assert (run.microbatch_size, run.global_batch, run.seq_len, run.microbatches) == (
        2,
        32,
        2048,
        8,
    )
    s = run.shape
    assert (s.arch, s.layers, s.hidden, s.heads, s.kv_heads, s.ffn_hidden) == (
        "decoder", 8, 2048, 16, 4, 5632)  # fmt: skip
    assert s.vocab == 32000 and not s.tied_embeddings  # 32000 is a multiple of 128 x tp
    assert run.distributed_optimizer and run.precision == "bf16" and run.recompute == "none"
    m = run.measured
    # steps 3-10: 1201.0 1199.5 1203.3 1198.7 1202.1 1200.4 1199.9 1201.6 -> (1200.4 + 1201.0) / 2
    assert m.iteration_time_s == pytest.approx(1.2007)
    assert m.peak_allocated_bytes == 18432.75 * MiB  # rank 0 after 2 iterations
    assert m.peak_reserved_bytes == 20480.0 * MiB
    # forward-backward max over ranks, steps 3-10 -> (1149.0 + 1150.0) / 2
    assert dict(m.categories)["forward-backward"] == pytest.approx(1.1495)
    assert status(run, "lr") == "ignored" and status(run, "data-path") == "ignored"
    assert isinstance(express(run), Expressed)


def test_golden_values():
    run = one(GOLDEN)
    assert run.gpu == "A100-SXM-80GB" and run.num_gpus == 8
    assert run.measured.iteration_time_s == pytest.approx((0.2307 + 0.2310) / 2)
    assert run.measured.peak_allocated_bytes == 2.25e9
    s = run.shape
    assert (s.arch, s.ffn_hidden, s.tied_embeddings) == ("gpt", 2048, True)
    assert s.vocab == 50432  # GPT-2's 50257 padded to a multiple of 128 x tp = 256
    assert any("GPT2BPETokenizer" in n for n in run.notes)
    assert status(run, "deterministic-mode") == "mapped"  # sim.framework.deterministic
    assert status(run, "save") == "ignored"
    ex = express(run)
    assert isinstance(ex, Expressed)
    assert ex.point["memory_policy"] == "none" and ex.shape["attention"] == "math"


def test_torchtitan_toml_and_log():
    run = one(DATA / "torchtitan_llama3_8b.toml", gpu="H100", num_gpus=8)
    assert run.shape.ffn_hidden == 14336 and run.shape.kv_heads == 8
    assert (run.layout.dp_shard, run.layout.dp, run.zero_stage) == (8, 8, 3)
    assert (run.global_batch, run.recompute) == (16, "full")
    assert status(run, "optimizer.lr") == "ignored"
    assert status(run, "compile.enable") == "mapped"  # off: the eager model, nothing approximated
    log = one(DATA / "torchtitan_llama3_8b.log")
    assert log.gpu.startswith("NVIDIA H100")
    # 2 x 8192 tokens per rank per step / tps; the middle tps of steps 3-10 are 5120 and 5120
    assert log.measured.iteration_time_s == pytest.approx(16384 / 5120)
    assert log.measured.peak_reserved_bytes == pytest.approx(55.50 * GiB)
    ex = express(log)
    assert isinstance(ex, Expressed) and ex.point["memory_policy"] == "recompute:full"
    assert ex.point["dp_shard"] == 8  # FSDP2 over the 8 ranks (sim.memory.fsdp)
    assert ex.point["dp_width"] == 8 and ex.framework == "torchtitan"


def test_torchtitan_optimizer_implementation_is_the_profile_option(tmp_path):
    # [optimizer] implementation: "fused" (torchtitan's default) adds no option, "foreach" one
    text = (DATA / "torchtitan_llama3_8b.toml").read_text()
    for impl, options in (("fused", ()), ("foreach", (("optimizer_implementation", "foreach"),))):
        path = tmp_path / f"titan_{impl}.toml"
        path.write_text(
            text.replace('name = "AdamW"', f'name = "AdamW"\nimplementation = "{impl}"')
        )
        run = one(path, gpu="H100", num_gpus=8)
        assert status(run, "optimizer.implementation") == "mapped"
        assert run.framework_options == options


def test_torchtitan_log_of_a_94_gib_h100_runs_on_the_hbm2e_preset(tmp_path):
    # torchtitan's published H100 runs used 96 GB HBM2e parts (torchtitan benchmarks doc); such
    # an H100 reports 94 GiB (arXiv:2604.11391), the 80 GB HBM3 one 79.6 GiB (81559 MiB)
    text = (DATA / "torchtitan_llama3_8b.log").read_text()
    for gib, preset in (("94.50", "grand-teton-h100-96gb"), ("79.10", "dgx-h100")):
        path = tmp_path / f"titan_{gib}.log"
        path.write_text(
            re.sub(
                r"capacity: (.*?) with [0-9.]+GiB", rf"capacity: NVIDIA H100 with {gib}GiB", text
            )
        )
        assert gpu_preset(one(path).gpu) == preset
    assert hardware_for("NVIDIA H100", 16)[0] == "2x-dgx-h100"
    assert hardware_for("H100 96GB", 16)[0] == "2x-grand-teton-h100-96gb"
    assert gpu_preset("H100-HBM2e") == gpu_preset("H100-SXM5-96GB") == "grand-teton-h100-96gb"
    assert gpu_preset("NVIDIA H100 NVL") is None  # 94 GB HBM3 PCIe card: refused (NOT_SXM)


def test_torchtitan_kernels_and_per_op_sac_from_its_config(tmp_path):
    # a December 2024 config (model.norm_type, removed 2025-04) runs torchtitan's fp32 RMSNorm
    # ops and repeat_kv; every llama3 its complex fp32 RoPE; selective 'op' is per-op SAC
    text = (DATA / "torchtitan_llama3_8b.toml").read_text()
    old = text.replace('mode = "full"', 'mode = "selective"\nselective_ac_option = "op"')
    path = tmp_path / "titan_2412.toml"
    path.write_text(old.replace("[model]", '[model]\nnorm_type = "rmsnorm"'))
    ex = express(one(path, gpu="H100", num_gpus=8))
    assert isinstance(ex, Expressed) and ex.point["memory_policy"] == "recompute:sac"
    assert (ex.shape.rope_complex, ex.shape.norm_fp32, ex.shape.kv_repeat) == (True, True, True)
    ex = express(one(DATA / "torchtitan_llama3_8b.toml", gpu="H100", num_gpus=8))
    assert (ex.shape.rope_complex, ex.shape.norm_fp32, ex.shape.kv_repeat) == (True, False, False)


def test_deepspeed_log_with_launch_command():
    hf = read_hf_config(ROOT / "examples" / "hf" / "llama3-8b-config.json")
    cmd = (DATA / "deepspeed_launch.sh").read_text()
    run = one(DATA / "deepspeed_zero3.log", command=cmd, hf_config=hf, seq_len=4096, gpu="H100")
    assert (run.layout.dp, run.microbatch_size, run.global_batch) == (16, 2, 64)
    assert run.zero_stage == 3 and run.precision == "bf16"
    # 64 samples / CurrSamplesPerSec, steps 3-8: middle values 64/20.0 and 64/20.0
    assert run.measured.iteration_time_s == pytest.approx(3.2)
    assert run.measured.peak_allocated_bytes == pytest.approx(41.07 * GiB)
    ex = express(run)
    assert isinstance(ex, Expressed) and ex.hardware == "2x-dgx-h100"
    assert ex.point["memory_policy"] == "zero3"


def test_megatron_command_maps_and_refuses():
    run = one(DATA / "megatron_llama3_70b_64xh100.sh", gpu="H100")
    lay = run.layout
    assert (lay.tp, lay.pp, lay.vp, lay.dp, run.num_gpus) == (8, 4, 4, 2, 64)
    assert run.shape.vocab == 129024  # 128256 up to a multiple of 128 x 8
    assert run.recompute == "full" and run.schedule == "interleaved_1f1b"
    assert not run.unmapped()  # the overlap flags are options of the megatron-lm profile
    assert status(run, "overlap-grad-reduce") == "mapped"
    assert run.framework_options == (
        ("overlap_grad_reduce", "true"),
        ("overlap_param_gather", "true"),
        ("log_interval", "1"),  # the host work of a log every iteration
    )
    assert status(run, "torchrun master-port") == "ignored"
    assert status(run, "disable-bias-linear") == "approximated"
    ex = express(run)
    assert isinstance(ex, Expressed)
    assert ex.framework == (
        "megatron-lm[overlap_grad_reduce=true,overlap_param_gather=true,log_interval=1]"
    )
    offload = read_megatron(
        parse_command(MEGATRON_70B.read_text()).flags | {"optimizer-cpu-offload": True},
        name="o", source="t", gpu="H100",
    )  # fmt: skip
    assert {a.name for a in offload.unmapped()} == {"optimizer-cpu-offload"}
    assert isinstance(express(offload), NotExpressed)


def test_conditional_flag_depends_on_layout():
    base = {"num-layers": 2, "hidden-size": 64, "num-attention-heads": 4, "seq-length": 128,
            "vocab-size": 1000, "overlap-grad-reduce": True}  # fmt: skip
    alone = read_megatron(base, name="a", source="t", num_gpus=1)
    assert status(alone, "overlap-grad-reduce") == "ignored"  # dp = 1: nothing to overlap
    four = read_megatron(base, name="a", source="t", num_gpus=4)
    assert status(four, "overlap-grad-reduce") == "mapped"  # a framework option
    assert four.framework_options == (("overlap_grad_reduce", "true"),)
    unknown = read_megatron(base | {"made-up-flag": 3}, name="a", source="t", num_gpus=1)
    assert status(unknown, "made-up-flag") == "unmapped"
    lenient = read_megatron(base | {"made-up-flag": 3}, name="a", source="t", strict=False)
    assert status(lenient, "made-up-flag") == "ignored"


def test_megatron_fsdp_gradient_dtypes_are_options():
    """``--megatron-fsdp-main-grads-dtype`` / ``--megatron-fsdp-grad-comm-dtype`` become the
    megatron-lm profile's options under ``--use-megatron-fsdp`` (Megatron-FSDP's gradient
    dtype is not ``--bf16``'s fp32 gradient buffer); without it they shard nothing."""
    base = {"num-layers": 2, "hidden-size": 64, "num-attention-heads": 4, "seq-length": 128,
            "vocab-size": 1000, "bf16": True, "megatron-fsdp-main-grads-dtype": "fp32",
            "megatron-fsdp-grad-comm-dtype": "torch.bfloat16"}  # fmt: skip
    fsdp = read_megatron(base | {"use-megatron-fsdp": True}, name="a", source="t", num_gpus=4)
    assert fsdp.layout.dp_shard == 4
    assert status(fsdp, "megatron-fsdp-main-grads-dtype") == "mapped"
    assert dict(fsdp.framework_options) == {
        "megatron_fsdp_main_grads_dtype": "fp32", "megatron_fsdp_grad_comm_dtype": "bf16"
    }  # fmt: skip
    assert all(a.name != "megatron-fsdp-main-params-dtype" for a in fsdp.args)  # not given
    bf16 = {"use-megatron-fsdp": True, "megatron-fsdp-main-params-dtype": "bf16"}
    no_main = read_megatron(base | bf16, name="a", source="t", num_gpus=4)
    assert status(no_main, "megatron-fsdp-main-params-dtype") == "approximated"
    ddp = read_megatron(base, name="a", source="t", num_gpus=4)
    assert status(ddp, "megatron-fsdp-main-grads-dtype") == "ignored"
    assert ddp.framework_options == ()


def test_bridge_configs():
    mix = one(DATA / "bridge_mixtral_8x7b.yaml", gpu="B200", num_gpus=32)
    assert (mix.shape.moe_experts, mix.shape.moe_topk, mix.shape.kv_heads) == (8, 2, 8)
    assert (mix.layout.ep, mix.layout.pp, mix.layout.dp) == (8, 4, 8)
    ex = express(mix)
    assert isinstance(ex, Expressed) and ex.hardware == "4x-dgx-b200"
    assert ex.point["memory_policy"] == "dist_opt:recompute"
    qwen = express(one(DATA / "bridge_qwen3_30b_a3b.yaml", gpu="B200", num_gpus=8))
    assert isinstance(qwen, Expressed)  # head_dim 128 x 32 heads != 2048, QK-norm: the decoder's
    assert (qwen.shape.head_dim, qwen.shape.qk_norm) == (128, True)
    assert qwen.shape.block.hd == 128


def test_measured_and_vtrain_csv():
    rows = read_runs(DATA / "measured_sample.csv")
    assert rows[0].measured.peak_allocated_bytes == 40.5 * GiB
    assert isinstance(express(rows[0]), Expressed)
    # MXFP8 on GB300 and Qwen3's head_dim are expressed (issue 26); without a recipe table the
    # Bridge row runs with the settings every recipe shares (sim.runs.bridge_fallback)
    ex = express(rows[1])
    assert isinstance(ex, Expressed)
    assert any("no recipe-table entry" in a for a in ex.approximations)
    assert rows[1].measured.iteration_time_s == 1.2  # step_time_derived_s
    vt = read_runs(DATA / "vtrain_sample.csv")
    assert [r.measured.iteration_time_s for r in vt] == [0.2505, 0.12025]
    assert vt[0].layout.tp == 2 and vt[1].microbatches == 1


def test_vtrain_vocabulary_is_padded_as_megatron_deepspeed_pads_it():
    # 50257 up to a multiple of 128 t: t 2 -> 256 x 197 = 50432 (256 x 196 = 50176 < 50257)
    vt = read_runs(DATA / "vtrain_sample.csv")
    assert vt[0].layout.tp == 2 and vt[0].shape.vocab == 50432
    # t 8 -> 1024 x 50 = 51200, 6400 rows per rank (unpadded: 6282.1)
    assert padded_vocab(50257, 8) == 51200 and padded_vocab(50304, 1) == 50304


def test_presets_by_gpu_name():
    assert gpu_preset("B200 (8 GPUs, 1 node)") == "dgx-b200"
    assert gpu_preset("A100-SXM-80GB") == "dgx-a100-80gb"
    assert gpu_preset("GB300") == "gb300-nvl72" and gpu_preset("B300") == "dgx-b300"
    assert hardware_for("GB200", 144) == ("nvl72x2-gb200", "")
    assert hardware_for("GB300", 256) == ("nvl72x4-gb300", "")
    assert hardware_for("H100", 64) == ("8x-dgx-h100", "")


def test_detect_formats():
    assert detect(GOLDEN) == "golden"
    assert detect(DATA / "deepspeed_zero3.json") == "deepspeed-config"
    assert detect(DATA / "torchtitan_llama3_8b.log") == "torchtitan-log"
    assert detect(DATA / "megatron_llama3_70b_64xh100.sh") == "command"


def test_bad_inputs_name_the_file_and_field(tmp_path):
    bad = tmp_path / "golden_values_dev_dgx_a100.json"
    bad.write_text(json.dumps({"lm loss": {}}))
    with pytest.raises(InputError, match="iteration-time") as exc:
        read_runs(bad)
    assert str(bad) in str(exc.value)
    log = tmp_path / "m.log"
    log.write_text(" iteration        3/      10 | elapsed time per iteration (ms): 5.0 |\n")
    with pytest.raises(InputError, match="no arguments block"):
        read_runs(log)
    csv = tmp_path / "v.csv"
    csv.write_text((DATA / "vtrain_sample.csv").read_text().replace("250.5", "-1"))
    with pytest.raises(InputError, match="iteration_time_ms"):
        read_runs(csv)
    toml = tmp_path / "t.toml"
    toml.write_text("[training\n")
    with pytest.raises(InputError, match="not TOML"):
        read_runs(toml)
    with pytest.raises(InputError, match="not found"):
        read_runs(tmp_path / "missing.log")


def test_megatron_model_flags_map_to_the_decoder_generator():
    """Megatron ties the output layer to the embedding unless
    ``--untie-embeddings-and-output-weights`` (megatron/training/arguments.py); a GeLU MoE GPT
    with tied embeddings, a leading dense GeLU layer, ``--kv-channels``, ``--qk-layernorm`` and
    ``--mtp-num-layers`` is the decoder generator's shape with those fields."""
    flags = {"num-layers": 4, "hidden-size": 64, "num-attention-heads": 4, "seq-length": 128,
             "vocab-size": 1024, "num-experts": 4, "moe-layer-freq": "([0]*1+[1]*3)",
             "kv-channels": 32, "qk-layernorm": True, "mtp-num-layers": 1,
             "position-embedding-type": "rope", "global-batch-size": 4, "micro-batch-size": 1}  # fmt: skip
    run = read_megatron(flags, name="moe", source="t", gpu="A100-SXM-80GB", num_gpus=1)
    ex = express(run)
    assert isinstance(ex, Expressed) and ex.generator == "decoder"
    s = ex.shape
    assert (s.tied_embeddings, s.gated_mlp, s.head_dim, s.qk_norm, s.mtp_layers) == (
        True, False, 32, True, 1)  # fmt: skip
    assert (s.dense_layers, s.moe.experts, s.moe.gated) == (1, 4, False)
    more = {"untie-embeddings-and-output-weights": True, "swiglu": True}
    untied = express(read_megatron(flags | more, name="u", source="t", gpu="B200", num_gpus=1))
    assert isinstance(untied, Expressed)
    assert (untied.shape.tied_embeddings, untied.shape.gated_mlp) == (False, True)


def test_precision_aware_optimizer_flags_become_memory_fields():
    flags = {"num-layers": 2, "hidden-size": 64, "num-attention-heads": 4, "seq-length": 128,
             "vocab-size": 1024, "swiglu": True, "untie-embeddings-and-output-weights": True,
             "bf16": True, "use-distributed-optimizer": True, "global-batch-size": 8,
             "use-precision-aware-optimizer": True, "main-grads-dtype": "bf16",
             "exp-avg-dtype": "bf16", "exp-avg-sq-dtype": "bf16"}  # fmt: skip
    run = read_megatron(flags, name="p", source="t", gpu="B200", num_gpus=8)
    assert status(run, "exp-avg-dtype") == "mapped"
    ex = express(run)
    assert isinstance(ex, Expressed)
    assert dict(ex.memory) == {"precision_aware_optimizer": True, "main_grads_dtype": "bf16",
                               "exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"}  # fmt: skip
    alone = {k: v for k, v in flags.items() if k != "use-precision-aware-optimizer"}
    refused = read_megatron(alone, name="p", source="t", gpu="B200", num_gpus=8)
    assert status(refused, "exp-avg-dtype") == "unmapped"  # Megatron asserts fp32 without it
    assert isinstance(express(refused), NotExpressed)


def test_pipeline_layout_becomes_stage_boundaries():
    """Megatron's layout: entry v*p + r is chunk v of rank r, layers in order, one trace layer
    per letter (pipeline_parallel_layer_layout.py); the boundaries count the letters before."""
    from sim.runs.pipeline_layout import layout_boundaries, parse_layout

    assert parse_layout("Et*3|(tt|)*6mL") == ["Ettt"] + ["tt"] * 6 + ["mL"]
    assert layout_boundaries("Et*3|(tt|)*6mL", 15, 1, 8) == (0, 4, 6, 8, 10, 12, 14, 16)
    with pytest.raises(ValueError, match="8 stages, not"):
        layout_boundaries("Et*3|(tt|)*6mL", 15, 1, 4)
    with pytest.raises(ValueError, match="15 decoder and 0 MTP"):
        layout_boundaries("Et*3|(tt|)*6mL", 15, 0, 8)
    flags = {"num-layers": 15, "hidden-size": 64, "num-attention-heads": 4, "seq-length": 128,
             "vocab-size": 1024, "swiglu": True, "untie-embeddings-and-output-weights": True,
             "mtp-num-layers": 1, "pipeline-model-parallel-size": 4, "global-batch-size": 8,
             "pipeline-model-parallel-layout": "Et*3|(tt|)*6mL"}  # fmt: skip
    run = read_megatron(flags, name="l", source="t", gpu="B200", num_gpus=4)
    assert run.layout.vp == 2 and status(run, "pipeline-model-parallel-layout") == "mapped"
    ex = express(run)
    assert isinstance(ex, Expressed) and ex.boundaries == (0, 4, 6, 8, 10, 12, 14, 16)


def test_sliding_windows_sinks_and_a_gelu_gpt_with_cp_are_expressed():
    flags = parse_command(MEGATRON_70B.read_text()).flags | {
        "window-size": "128 0", "window-attn-skip-freq": "4", "softmax-type": "learnable",
        "add-qkv-bias": True,
    }  # fmt: skip
    run = read_megatron(flags, name="w", source="t", gpu="H100")
    ex = express(run)
    assert isinstance(ex, Expressed)
    shape = ex.shape  # three windowed layers, then a full one (window_attn_skip_freq 4)
    assert (shape.window, shape.window_pattern, shape.sinks, shape.attn_bias) == (
        128,
        "SSSF",
        True,
        True,
    )
    assert all(a.status == "mapped" for a in run.args if a.name in flags and "window" in a.name)
    gpt = {k: v for k, v in flags.items() if k not in ("swiglu", "normalization")} | {
        "context-parallel-size": 2, "position-embedding-type": "learned_absolute",
    }  # fmt: skip
    gpt.pop("window-size"), gpt.pop("window-attn-skip-freq")
    gpt_run = read_megatron(gpt, name="g", source="t", gpu="H100")
    ex = express(gpt_run)  # GeLU, GQA, untied, cp 2: the decoder generator, ungated
    assert isinstance(ex, Expressed) and ex.generator == "decoder"
    assert (ex.shape.gated_mlp, ex.shape.rotary, ex.shape.window) == (False, False, 0)


def test_embedding_and_loss_counted_in_the_split_become_a_layout():
    """Megatron's get_num_layers_to_build: with --account-for-embedding/loss-in-pipeline-split
    the (L + 2) layers split evenly, the first and last virtual stage one decoder layer fewer
    (a 6-layer GPT over 4 x 2 virtual stages: the embedding and the loss alone)."""
    from sim.runs.pipeline_layout import split_layout

    assert split_layout(6, 8, embedding=True, loss=True) == "E|t|t|t|t|t|t|L"
    assert split_layout(5, 2, embedding=True, loss=False) == "Ett|tttL"
    with pytest.raises(ValueError, match="do not split evenly"):
        split_layout(5, 4, embedding=True, loss=True)
    flags = {"num-layers": 6, "hidden-size": 64, "num-attention-heads": 4, "seq-length": 128,
             "vocab-size": 1024, "swiglu": True, "untie-embeddings-and-output-weights": True,
             "pipeline-model-parallel-size": 4, "num-virtual-stages-per-pipeline-rank": 2,
             "global-batch-size": 8, "account-for-embedding-in-pipeline-split": True,
             "account-for-loss-in-pipeline-split": True}  # fmt: skip
    run = read_megatron(flags, name="s", source="t", gpu="B200", num_gpus=4)
    assert run.pipeline_layout == "E|t|t|t|t|t|t|L"
    ex = express(run)
    assert isinstance(ex, Expressed) and ex.boundaries == (0, 1, 2, 3, 4, 5, 6, 7)


def test_gradient_buffer_in_bf16_halves_the_gradients():
    """``--grad-reduce-in-bf16`` (and Megatron-Bridge's ``grad_reduce_in_fp32 = False``, which
    its performance recipes set) keeps Megatron-Core's gradient buffer in bf16: 2 bytes per
    parameter instead of the fp32 ``main_grad``'s 4."""
    from sim.runs.bridge import bridge_flags
    from sim.runs.bridge_recipes import recipe_flags
    from sim.runs.predict import Predictor

    flags = {"num-layers": 2, "hidden-size": 256, "num-attention-heads": 4, "seq-length": 128,
             "vocab-size": 1024, "swiglu": True, "untie-embeddings-and-output-weights": True,
             "bf16": True, "use-distributed-optimizer": True, "global-batch-size": 8}  # fmt: skip
    fp32 = express(read_megatron(flags, name="p", source="t", gpu="B200", num_gpus=8))
    run = read_megatron(flags | {"grad-reduce-in-bf16": True}, name="p", source="t", gpu="B200",
                        num_gpus=8)  # fmt: skip
    assert status(run, "grad-reduce-in-bf16") == "mapped"
    bf16 = express(run)
    assert isinstance(fp32, Expressed) and isinstance(bf16, Expressed)
    assert dict(bf16.memory) == {"grad_reduce_in_bf16": True} and not dict(fp32.memory)
    p = Predictor()
    g32, g16 = (p.predict(e).row.peak_gradients_bytes for e in (fp32, bf16))
    assert g16 == pytest.approx(g32 / 2)
    assert recipe_flags({"grad_reduce_in_fp32": "False"})["grad-reduce-in-bf16"] is True
    assert "grad-reduce-in-bf16" not in recipe_flags({"grad_reduce_in_fp32": "True"})
    got, _ = bridge_flags({"ddp": {"grad_reduce_in_fp32": False}})
    assert got["grad-reduce-in-bf16"] is True


def test_bridge_runs_with_expandable_segments_by_release():
    """PYTORCH_CUDA_ALLOC_CONF as Megatron-Bridge's performance scripts set it per release
    (sim.runs.bridge_env): every run from v0.5.0, a recipe's own env_vars, the per-model rules
    of v0.3/v0.4 (Llama 3.1 405B FP8 on GB200 yes, on B200 no), in v0.1.0rc3 only Llama 3.1
    405B on GB200 in FP8 current scaling (setup_experiment.py 116-118)."""
    from sim.runs.bridge_env import expandable_segments
    from sim.runs.bridge_recipes import recipe_flags

    cli = "-m llama -mr llama31_405b -g {} -c fp8_mx -ng 256 --task pretrain"
    assert expandable_segments(
        {"settings_from": "v0.4.1 @ f9b6", "launcher_cli": cli.format("gb200")}
    )
    assert not expandable_segments(
        {"settings_from": "v0.4.1 @ f9b6", "launcher_cli": cli.format("b200")}
    )
    assert expandable_segments(
        {"settings_from": "v0.5.0 @ fcbb", "launcher_cli": cli.format("b200")}
    )
    assert not expandable_segments({"settings_from": "v0.1.0rc3 @ bf71", "launcher_cli": ""})
    yaml = "--config_file x.yaml -m llama31 -s 405b -c fp8 -fr {} -g {} -a x -p y -ng 128"
    rc3 = {"settings_from": "v0.1.0rc3 @ bf71"}
    assert expandable_segments(rc3 | {"launcher_cli": yaml.format("cs", "gb200")})
    assert not expandable_segments(rc3 | {"launcher_cli": yaml.format("mx", "gb200")})
    assert not expandable_segments(rc3 | {"launcher_cli": yaml.format("cs", "b200")})
    env = "NCCL_NVLS_ENABLE=0;PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    assert expandable_segments({"settings_from": "main @ 067f", "env_vars": env})
    flags = recipe_flags({"settings_from": "v0.5.0 @ fcbb"})
    assert flags["pytorch-cuda-alloc-conf"] == "expandable_segments:True"


def test_bridge_rows_of_an_earlier_release_get_that_release_s_settings(tmp_path):
    """A recipe-table row whose notes say an earlier release's launcher set some settings
    differently (per-module CUDA graphs, no EP all-to-all overlap) gives a measured row of that
    release those settings, and every other release the row's own (sim.runs.bridge_recipes)."""
    import pandas as pd

    from sim.runs.bridge_recipes import KEY, read_recipes, recipe_for

    key = dict.fromkeys(KEY, "1") | {"model": "M", "gpu": "GB200", "task": "pretrain"}
    notes = ("Earlier releases differ: 26.04 (v0.4.0): cuda_graph_impl=transformer_engine; "
             "cuda_graph_scope=moe_router,moe_preprocess; moe_a2a_overlap=False (default)")  # fmt: skip
    row = key | {"cuda_graph_impl": "full_iteration", "cuda_graph_scope": "",
                 "moe_a2a_overlap": "True", "notes": notes}  # fmt: skip
    path = tmp_path / "recipes.csv"
    pd.DataFrame([row]).to_csv(path, index=False)
    recipes = read_recipes(path)
    old = recipe_for(recipes, key | {"table": "26.04 / Pre-Training Performance / Model: M"})
    new = recipe_for(recipes, key | {"table": "26.08 / Pre-Training Performance / Model: M"})
    assert old is not None and new is not None
    assert old["cuda-graph-impl"] == "transformer_engine"
    assert old["cuda-graph-scope"] == "moe_router,moe_preprocess"
    assert not old.get("overlap-moe-expert-parallel-comm")  # off (recipe_flags: flag: False)
    assert new["cuda-graph-impl"] == "full_iteration"
    assert new["overlap-moe-expert-parallel-comm"] is True
