"""The compute model (sim/compute): GEMM efficiency by shape, memory-bound kernels, attention,
micro-batch interpolation and extrapolation, device rescaling, and the Galvatron shape check."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from sim.compute.attention import attention_bwd, attention_fwd
from sim.compute.kernels import gemm, gemm_efficiency, gemm_time_s, kernel_time_s, mem, wave_factor
from sim.compute.layers import cross_entropy_kernels
from sim.compute.transformer import LLAMA2_7B, BlockShape, block_bwd, block_fwd, block_times
from sim.errors import InputError
from sim.hardware.gpu_compute import ComputeSpec, same_device
from sim.hardware.loader import list_presets, load_hardware
from sim.runs.express_model import FUSED_DROPOUT_ADD
from sim.trace.adapt import adapt_trace, device_spec, rescale_time
from sim.trace.generator import preset_trace, transformer_trace
from sim.trace.loader import load_trace
from sim.trace.native import read_trace, write_trace
from sim.trace.schema import LayerProfile, Trace


def gpu(preset: str) -> ComputeSpec:
    spec = load_hardware(preset).gpus[0].compute
    assert spec is not None
    return spec


A100 = gpu("dgx-a100-80gb")


def total_s(t: Trace) -> float:
    return sum(layer.fwd_s + layer.bwd_s for layer in t.layers)


# ---------------------------------------------------------------- presets carry sourced numbers


@pytest.mark.parametrize(
    "preset,peak,fp32,hbm,sms,eff",
    [
        ("dgx1-v100-16gb", 125e12, 15.7e12, 900e9, 80, 0.8),
        ("dgx-a100-40gb", 312e12, 19.5e12, 1555e9, 108, 0.859),  # MAMF 267.9 / 312
        ("dgx-a100-80gb", 312e12, 19.5e12, 2039e9, 108, 0.859),
        ("dgx-h100", 989.4e12, 67e12, 3.35e12, 132, 0.801),  # MAMF 792.1 / 989
        ("dgx-h200", 989.4e12, 67e12, 4.8e12, 132, 0.801),
    ],
)
def test_presets_carry_datasheet_peaks(preset, peak, fp32, hbm, sms, eff):
    s = gpu(preset)
    assert (s.matmul_flops, s.fp32_flops, s.hbm_bandwidth_Bps, s.sm_count) == (peak, fp32, hbm, sms)
    assert s.matmul_efficiency == eff


def test_a100_40gb_moves_an_elementwise_kernels_bytes_at_its_measured_scale_stream():
    """dgx-a100-40gb's HBM efficiency is its own STREAM 'scale' figure (te42kyfo/gpu-benches
    @cdcc732 README.md l.145, A100-SXM4-40GB, full occupancy: 1378 GB/s): a memory-bound kernel
    of 1.378 GB takes 1 ms at that rate, plus the preset's 5 us per kernel."""
    s = gpu("dgx-a100-40gb")
    got = kernel_time_s(mem("scale", 1.378e9), s, "fp16")
    assert got == pytest.approx(1e-3 + 5e-6, rel=1e-3)


def test_presets_have_no_placeholder_adam_rate():
    from sim.hardware.loader import list_presets

    for p in list_presets():
        topo = load_hardware(p)
        assert all(h.adam_params_per_s != 1e9 for h in topo.hosts), p
        assert "placeholder" not in topo.description, p


# ---------------------------------------------------------------- kernels


def test_wave_factor_closed_forms():
    assert wave_factor(128, 128, 1, 108) == pytest.approx(1 / 108)
    assert wave_factor(128 * 108, 128, 1, 108) == 1.0
    # 109 tiles on 108 SMs: two waves, the second almost empty
    assert wave_factor(128 * 109, 128, 1, 108) == pytest.approx(109 / 216)
    assert wave_factor(64, 128, 1, 1) == 0.5  # tile quantization: half a tile used


def test_gemm_time_by_hand():
    k = gemm("g", 128 * 12, 128 * 9, 8192, 2)  # 108 tiles: one full wave on A100
    flops = 2 * 1536 * 1152 * 8192
    assert k.bytes / (2039e9 * 0.85) < flops / (312e12 * 0.859)  # compute-bound
    assert k.flops == flops
    expect = 5e-6 + flops / (312e12 * 0.859)
    assert gemm_time_s(k, A100, "bf16") == pytest.approx(expect, rel=1e-12)
    m = mem("norm", 1e9)
    assert kernel_time_s(m, A100, "bf16") == pytest.approx(5e-6 + 1e9 / (2039e9 * 0.85))


def test_gemm_efficiency_falls_for_small_gemms():
    effs = [gemm_efficiency(n, n, n, A100, "bf16") for n in (64, 256, 1024, 4096, 16384)]
    assert effs == sorted(effs) and effs[0] < 0.01 and effs[2] < effs[4]
    assert effs[-1] == pytest.approx(0.859, rel=0.03)  # large GEMMs reach the measured MAMF
    # a skinny GEMM (one token row) is memory-bound: far below the large-GEMM efficiency
    assert gemm_efficiency(1, 4096, 4096, A100, "bf16") < 0.01


def test_fp32_uses_the_fp32_peak():
    big = gemm("g", 8192, 8192, 8192, 4)
    assert gemm_time_s(big, A100, "fp32") > 10 * gemm_time_s(
        gemm("g", 8192, 8192, 8192, 2), A100, "bf16"
    )


def test_flash_attention_by_hand_and_faster_than_math_at_long_sequences():
    b, s, h, a = 2, 4096, 2048, 16
    (k,) = attention_fwd("flash", b, s, h, a, 2, causal=True, dropout=False)
    assert k.flops == 4 * b * s * s * h / 2 and k.bytes == 4 * b * s * h * 2 + 4 * b * a * s
    t_flash = kernel_time_s(k, A100, "bf16")
    assert t_flash == pytest.approx(5e-6 + k.flops / (312e12 * 0.6))
    t_math = sum(
        kernel_time_s(x, A100, "bf16")
        for x in attention_fwd("math", b, s, h, a, 2, causal=True, dropout=True)
    )
    assert t_math > t_flash
    with pytest.raises(ValueError, match="attention"):
        BlockShape(64, 4, 16, 256, attention="sdpa")


# ---------------------------------------------------------------- micro-batch size


def test_small_microbatches_are_penalised_per_sample():
    per_sample = [block_times(LLAMA2_7B, b, A100, "bf16").total_s / b for b in (1, 2, 4, 8)]
    assert per_sample[0] > per_sample[3] * 1.02
    t = preset_trace("gpt2-1.5b", microbatch_size=1)
    t8 = preset_trace("gpt2-1.5b", microbatch_size=8)
    assert total_s(t) * 8 > total_s(t8)  # not linear any more


def test_async_schedule_no_longer_ties_across_microbatch_sizes():
    """Issue 12: with linear compute, PipeDream-2BW had the same throughput at every b."""
    from sim.config import parse_experiment
    from sim.point.config import PointConfig
    from sim.point.simulate import evaluate, resolve

    topo = load_hardware("dgx1-v100-32gb")
    base = preset_trace("gpt2-1.5b")
    exp = parse_experiment(
        {
            "name": "t",
            "hardware": "x",
            "models": [{"name": base.name, "trace": "x"}],
            "training": {"global_batch": 32},
            "options": {"partition": "uniform"},
        }
    )  # same stages for every b
    thr = {}
    for b in (1, 2, 4):
        point = PointConfig(
            model=base.name,
            schedule="pipedream_2bw",
            stages=4,
            dp_width=1,
            microbatch_size=b,
            microbatches=8,
            memory_policy="none",
            global_batch=8 * b,
        )
        res = resolve(exp, point, topo, base)
        thr[b] = evaluate(res)[0].throughput_samples_per_s
    assert thr[1] < thr[2] < thr[4] and thr[4] > 1.05 * thr[1]


def _toy(b: int, fwd: float, names=("a", "b")) -> tuple[LayerProfile, ...]:
    return tuple(
        LayerProfile(n, fwd * (i + 1), 2 * fwd * (i + 1), 10.0, 100.0 * b, 8.0 * b)
        for i, n in enumerate(names)
    )


def measured_toy(**prov) -> Trace:
    return Trace(
        "toy",
        _toy(1, 1.0),
        1,
        "bf16",
        "A100-SXM4-80GB",
        {"source": "test", **prov},
        profiles={4: _toy(4, 3.0)},
    )


def test_interpolation_between_measured_sizes_by_hand():
    t = measured_toy()
    assert t.measured_sizes == [1, 4]
    t2 = t.at_microbatch(2)  # one third of the way from b=1 to b=4
    assert t2.layers[0].fwd_s == pytest.approx(1.0 + (3.0 - 1.0) / 3)
    assert t2.layers[1].bwd_s == pytest.approx(2 * 2 * (1.0 + 2.0 / 3))
    assert t2.layers[0].act_bytes == pytest.approx(200.0)
    assert t.at_microbatch(4).layers[0].fwd_s == 3.0
    assert t.at_microbatch(8) is None
    out, notes = adapt_trace(t, 2, A100)
    assert out.layers == t2.layers and "interpolated" in notes[0]


def test_extrapolation_is_anchored_to_the_nearest_measurement_and_noted():
    shape = {
        "kind": "gpt",
        "hidden": 1024,
        "heads": 16,
        "seq_len": 1024,
        "vocab": 50257,
        "attention": "flash",
    }
    t = measured_toy(model_shape=shape)
    out, notes = adapt_trace(t, 8, A100)
    blk = BlockShape(1024, 16, 1024, 4096, causal=True, attention="flash")
    ratio = block_times(blk, 8, A100, "bf16").total_s / block_times(blk, 4, A100, "bf16").total_s
    assert out.layers[0].fwd_s == pytest.approx(3.0 * ratio)
    assert out.layers[0].act_bytes == pytest.approx(800.0)
    assert "outside the measured b=1..4" in notes[0] and "anchored to measured b=4" in notes[0]
    lin, notes = adapt_trace(measured_toy(), 8, A100)  # no shape: linear, and it says so
    assert lin.layers[0].fwd_s == pytest.approx(6.0) and "linearly" in notes[0]


def test_profiles_round_trip_and_bad_sidecar(tmp_path):
    t = measured_toy()
    write_trace(t, tmp_path / "toy")
    assert (tmp_path / "toy.b4.csv").exists()
    assert read_trace(tmp_path / "toy.yaml") == t
    side = tmp_path / "toy.yaml"
    side.write_text(side.read_text().replace("- 4", "- 0"))
    with pytest.raises(InputError, match="profiles"):
        read_trace(side)


# ---------------------------------------------------------------- device rescaling


def test_rescale_time_by_hand():
    v100, h100 = gpu("dgx1-v100-16gb"), gpu("dgx-h100")
    r_v, r_h = 125e12 * 0.8, 989.4e12 * 0.801
    # 1 ms of which 0.6 ms is matmul (flops = 0.6e-3 * r_v) and 0.4 ms memory-bound
    t = rescale_time(1e-3, 0.6e-3 * r_v, v100, h100, "fp16")
    assert t == pytest.approx(0.6e-3 * r_v / r_h + 0.4e-3 * 900e9 / 3.35e12)


@pytest.mark.parametrize("name", ["gpt2-1.5b", "gnmt16"])
def test_same_trace_runs_faster_on_faster_gpus(name):
    t = load_trace(name)
    times = []
    for preset in ("dgx1-v100-16gb", "dgx-a100-80gb", "dgx-h100"):
        out, notes = adapt_trace(t, t.microbatch_size, gpu(preset))
        times.append(total_s(out))
        if preset != "dgx1-v100-16gb":
            assert notes and any("A100" in n or "H100" in n for n in notes), notes
    assert times[0] > times[1] > times[2]


def test_pipedream_traces_record_v100_and_rescale_with_a_note():
    t = load_trace("gnmt16")
    assert t.provenance["device"] == "V100"
    assert device_spec("V100").model.startswith("V100")
    out, notes = adapt_trace(t, 64, gpu("dgx-a100-80gb"))
    assert "rescaled to A100-SXM4-80GB" in notes[-1]
    # fp32 and no FLOPs: everything scales by the fp32 achieved-rate ratio
    k = (15.7e12 * 0.8) / (19.5e12 * 0.859)
    assert total_s(out) == pytest.approx(total_s(t) * k, rel=1e-9)


def test_device_spec_is_the_first_preset_gpu_of_that_name_or_family():
    # read lazily (presets until the first match, no topology built): the same answers as
    # the first matching GPU of every preset's topology
    specs = [load_hardware(p).gpus[0].compute for p in list_presets()]
    for name in ("V100", "NVIDIA H100 80GB HBM3", "A100-SXM4-40GB", "B200", "H100-PCIe"):
        key = name.upper().removeprefix("NVIDIA").strip().replace(" ", "-")
        exact = [s for s in specs if s is not None and same_device(key, s.model)]
        family = [
            s for s in specs if s is not None and s.model.upper().split("-")[0] == key.split("-")[0]
        ]
        assert device_spec(name) == (exact or family)[0]
    assert device_spec("cpu") is None


def test_unknown_device_is_not_rescaled_but_noted():
    t = replace(measured_toy(), device="cpu")
    out, notes = adapt_trace(t, 1, A100)
    assert out.layers == t.layers and "not a known GPU" in notes[0]


def test_generated_trace_regenerates_on_the_target_gpu():
    t = preset_trace("bert-large")
    out, notes = adapt_trace(t, 2, A100)
    direct = preset_trace("bert-large", microbatch_size=2, gpu=A100)
    assert [x.fwd_s for x in out.layers] == [x.fwd_s for x in direct.layers]
    assert "regenerated" in notes[0] and "A100-SXM4-80GB" in notes[0]
    assert math.isclose(out.param_bytes, t.param_bytes)


def test_generator_flash_drops_the_s2_stash():
    kw = dict(
        name="t", layers=1, hidden=64, heads=4, seq_len=128, vocab=100, microbatch_size=2, gpu=A100
    )
    m, f = transformer_trace("gpt", **kw), transformer_trace("gpt", attention="flash", **kw)
    b, s, a = 2, 128, 4
    assert m.layers[1].act_bytes - f.layers[1].act_bytes == 5 * a * s * s * b - 4 * b * a * s
    assert f.layers[1].attn_core_act_bytes == 0


# ---------------------------------------------------------------- Galvatron shape (bench_accuracy)


def test_llama_layer_shape_within_10_points_of_galvatron():
    """Per-sample time relative to b=12 on the A100-80GB preset, each b within 10 percentage
    points of Galvatron's measured curve (the model under-predicts the small-b penalty by up
    to ~8 points: 1.04 vs 1.12 at b=1), and the penalty at b=1 is predicted at all."""
    from benchmarks.accuracy.accuracy_compute import rows

    rs = rows()
    assert [r["b"] for r in rs] == list(range(1, 13))
    for r in rs:
        assert abs(r["dgx-a100-80gb diff pp"]) <= 10.0, r
    assert rs[0]["dgx-a100-80gb rel"] > 1.02 and rs[0]["measured rel"] > 1.1


# ---------------------------------------------------------------- torch backend (CPU path)


def test_cpu_measurements_of_calibrate():
    pytest.importorskip("torch")
    import torch

    from backends.torch.calibrate.rank import cpu_adam_rate, gemm_by_shape, kernel_overhead_s

    adam = cpu_adam_rate(params=2**16, reps=2, threads=1)
    assert adam["implementation"] in ("fused", "foreach") and adam["params_per_s"] > 0
    assert adam["params_per_s"] == pytest.approx(2**16 / adam["seconds"])
    (g,) = gemm_by_shape(torch.device("cpu"), torch.float32, [(64, 32, 16)], reps=2)
    assert g["flops_per_s"] == pytest.approx(2 * 64 * 32 * 16 / g["seconds"])
    assert 0 < kernel_overhead_s(torch.device("cpu"), launches=20) < 1e-2


def test_profile_several_microbatch_sizes_into_one_trace(tmp_path):
    pytest.importorskip("torch")
    from backends.torch.profile.layers import merge_sizes, profile_model

    spec = dict(name="mini", kind="gpt", layers=1, hidden=32, heads=2, seq_len=16, vocab=64)
    traces = [profile_model(spec, microbatch_size=b, reps=1, warmup=1) for b in (2, 1)]
    t = merge_sizes(traces)
    assert t.microbatch_size == 1 and sorted(t.profiles) == [2]
    assert t.profiles[2] == traces[0].layers
    assert t.provenance["microbatch_sizes"] == [1, 2]
    assert t.provenance["model_shape"]["attention"] == "flash"
    write_trace(t, tmp_path / "mini")
    assert read_trace(tmp_path / "mini.csv") == t
    out, notes = adapt_trace(t, 4, None)  # outside: anchored to b=2 (no GPU: its own device)
    assert out.microbatch_size == 4 and "linearly" in notes[0]  # cpu-rank: no compute spec


def test_sim_run_prints_and_records_the_rescaling(tmp_path):
    import yaml
    from typer.testing import CliRunner

    from sim.cli import app

    exp = {
        "name": "x",
        "hardware": "dgx-a100-80gb",
        "models": [
            {"name": "gnmt", "trace": "gnmt16", "global_batch": 128},
            {"name": "gpt", "trace": "gpt2-1.5b", "global_batch": 8},
        ],
        "sweep": {"schedule": ["1f1b"], "stages": [4], "microbatch_size": [1, 32]},
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(exp))
    res = CliRunner().invoke(
        app, ["run", str(path), "--out", str(tmp_path / "out"), "--jobs", "1", "--no-plots"]
    )
    assert res.exit_code == 0, res.output
    assert "rescaled to A100-SXM4-80GB" in res.output and "regenerated" in res.output
    resolved = yaml.safe_load((tmp_path / "out" / "config.resolved.yaml").read_text())
    notes = resolved["compute_notes"]
    assert any("measured on V100" in n and "rescaled" in n for n in notes["gnmt"])
    assert any("on A100-SXM4-80GB (was V100-SXM2-16GB)" in n for n in notes["gpt"])


def test_sim_profile_repeated_b_writes_one_trace_with_profiles(tmp_path):
    pytest.importorskip("torch")
    from typer.testing import CliRunner

    from sim.cli import app

    res = CliRunner().invoke(
        app,
        [
            "profile",
            "--out",
            str(tmp_path / "p"),
            "--layers",
            "1",
            "--hidden",
            "32",
            "--heads",
            "2",
            "--seq-len",
            "16",
            "--vocab",
            "64",
            "--reps",
            "1",
            "--threads",
            "1",
            "-b",
            "2",
            "-b",
            "1",
        ],
    )
    assert res.exit_code == 0, res.output
    t = read_trace(tmp_path / "p.yaml")
    assert t.measured_sizes == [1, 2] and (tmp_path / "p.b2.csv").exists()
    assert "also measured b=[2]" in res.output


def test_megatron_cross_entropy_moves_38n_forward_and_14n_backward_bytes():
    """Megatron's fp32 cross-entropy over N = T x V 16-bit logits (sim.compute.layers): to fp32
    (2N + 4N), max (4N), subtract (8N), exp (8N), sum (4N), div_ (8N) = 38N; backward mul_
    (8N) and back to 16 bits (4N + 2N) = 14N. fp32 logits skip both conversions."""
    t, v = 1024, 50304
    n = t * v
    fwd, bwd = cross_entropy_kernels(t, v, 2)
    assert (sum(k.bytes for k in fwd), sum(k.bytes for k in bwd)) == (38 * n, 14 * n)
    fwd, bwd = cross_entropy_kernels(t, v, 4)
    assert (sum(k.bytes for k in fwd), sum(k.bytes for k in bwd)) == (32 * n, 8 * n)
    assert all(k.kind == "mem" for k in fwd + bwd)


def test_megatron_causal_softmax_reads_the_lower_triangle_only():
    """Megatron's scaled_upper_triang_masked_softmax: forward reads half the N = b a s^2 scores
    and writes all (1.5 N d bytes), backward reads gradient and output of the triangle and
    writes all (2 N d); without the causal mask, or with fewer queries than keys, 2 N d and
    3 N d (sim.compute.attention)."""
    b, s, h, a, d = 2, 64, 128, 4, 2
    n = b * a * s * s
    fwd = {k.name: k.bytes for k in attention_fwd("math", b, s, h, a, d, causal=True, dropout=True)}
    bwd = {k.name: k.bytes for k in attention_bwd("math", b, s, h, a, d, causal=True, dropout=True)}
    assert (fwd["softmax"], bwd["softmax_bwd"]) == (1.5 * n * d, 2 * n * d)
    assert fwd["attn_dropout"] == bwd["attn_dropout_bwd"] == (2 * d + 1) * n
    full = attention_fwd("math", b, s, h, a, d, causal=False, dropout=False)
    assert {k.name: k.bytes for k in full}["softmax"] == 2 * n * d
    ring = attention_bwd("math", b, s // 2, h, a, d, causal=True, dropout=False, kv=s)
    assert {k.name: k.bytes for k in ring}["softmax_bwd"] == 3 * (n / 2) * d


def test_megatron_softmax_falls_back_to_eager_fp32_ops_off_the_kernels_batch_rule():
    """Megatron's FusedScaleMaskSoftmax.is_kernel_available (Megatron-DeepSpeed@4822c87e
    fused_softmax.py): b * a must be a multiple of 4 and, causal, of get_batch_per_block = 4 at
    1024 keys (warp 32, one row per warp, 128 threads); 8 at 64 keys (two rows per warp). At
    b 1, a 2 the eager fp32 path moves 6 + 8 + 9 + 8 + 6 = 37 N forward and 6 + 12 + 9 + 8 + 6
    = 41 N backward bytes (N = 2 * 1024^2 scores) instead of the kernel's 1.5 N d and 2 N d."""
    b, s, h, a, d = 1, 1024, 128, 2, 2
    n = b * a * s * s
    fwd = attention_fwd("math", b, s, h, a, d, causal=True, dropout=False)
    bwd = attention_bwd("math", b, s, h, a, d, causal=True, dropout=False)
    soft_f = sum(k.bytes for k in fwd if k.name.startswith("softmax"))
    soft_b = sum(k.bytes for k in bwd if k.name.startswith("softmax"))
    assert (soft_f, soft_b) == (37 * n, 41 * n)
    assert len([k for k in fwd if k.name.startswith("softmax")]) == 5
    two = attention_fwd("math", 2, s, h, a, d, causal=True, dropout=False)
    assert [k.bytes for k in two if k.name.startswith("softmax")] == [1.5 * 2 * n * d]
    # 64 keys: 8 rows per block; b * a = 4 passes the %4 test but not the causal %8 one,
    # while without the mask sq = 64 is a multiple of 8
    causal64 = attention_fwd("math", 1, 64, 128, 4, d, causal=True, dropout=False)
    full64 = attention_fwd("math", 1, 64, 128, 4, d, causal=False, dropout=False)
    assert len([k for k in causal64 if k.name.startswith("softmax")]) == 5
    assert [k.name for k in full64 if k.name.startswith("softmax")] == ["softmax"]


def test_megatron_deepspeeds_fused_bias_dropout_add_is_one_kernel_of_3d_plus_1_bytes():
    """Megatron-DeepSpeed's TorchScript bias_dropout_add_fused_train under nvFuser
    (Megatron-DeepSpeed@f4157be transformer.py l.1363-1378, initialize.py l.318-388): per
    hidden dropout one kernel reads x and the residual and writes the sum and a 1-byte mask,
    2 + 2 + 2 + 1 = 7 B per element at fp16, against the eager dropout (2 + 2 + 1) and add
    (2 + 2 + 2): 11 B in two kernels. At b 1, s 8, h 16 (t 1): 128 elements, 896 B each; the
    backward is the same either way. Only the megatron-deepspeed runs get it from express."""
    eager = BlockShape(16, 2, 8, 64)
    fused = replace(eager, fused_dropout_add=True)
    names = [k.name for k in block_fwd(fused, 1, 2)]
    adds = [k for k in block_fwd(fused, 1, 2) if k.name.endswith("_dropout_add")]
    assert [k.bytes for k in adds] == [7 * 128, 7 * 128]
    assert not any(n.endswith(("_residual", "mlp_dropout")) for n in names)
    eager_bytes = sum(k.bytes for k in block_fwd(eager, 1, 2))
    fused_bytes = sum(k.bytes for k in block_fwd(fused, 1, 2))
    assert eager_bytes - fused_bytes == 2 * (11 - 7) * 128
    assert len(block_fwd(eager, 1, 2)) - len(block_fwd(fused, 1, 2)) == 2
    assert block_bwd(eager, 1, 2) == block_bwd(fused, 1, 2)
    assert FUSED_DROPOUT_ADD == {"megatron-deepspeed"}
    with pytest.raises(ValueError, match="dropout_add"):
        transformer_trace("gpt", name="x", layers=1, hidden=16, heads=2, seq_len=8, vocab=32,
                          microbatch_size=1, gpu_model="g", peak_flops=1e12, dropout_add="x")  # fmt: skip
