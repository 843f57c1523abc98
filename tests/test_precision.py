"""Low precision as a dimension (issue 26 item 1): one test per mechanism, each a closed form or
a hand-computed case: GEMM rates per format, cast-kernel bytes, the layers each recipe keeps in
16 bits, weight copies, the FP8 parameter all-gather, the sweep axis and its refusals."""

from __future__ import annotations

import math

import pytest

from sim.compute.cast_bytes import (
    cast_bytes_per_element,
    param_gather_bytes_per_param,
    weight_copy_bytes_per_param,
)
from sim.compute.decoder import DecoderShape, layer_kernels
from sim.compute.kernels import gemm, kernel_time_s, phase_time, wave_factor
from sim.compute.low_precision_act import quantized_input_savings
from sim.compute.precision import TE, TORCHAO, get_recipe
from sim.compute.precision_rules import LayerRules, LowPrecision
from sim.compute.quantize import quantize_layer
from sim.config import parse_experiment
from sim.errors import InputError
from sim.hardware.gpu_compute import LowPrecisionRate
from sim.hardware.loader import load_hardware
from sim.memory.plan import StagePlan
from sim.memory.precision import precision_plan
from sim.parallel.decoder_shard import shard_decoder
from sim.parallel.layout import ParallelLayout
from sim.parallel.low_params import low_precision_params
from sim.plan.point_row import point_row
from sim.plan.sweep import expand
from sim.point.experiment import prepare
from sim.report.outputs import results_frame
from sim.trace.decoder import decoder_trace
from sim.trace.native import write_trace

H100 = load_hardware("dgx-h100").gpus[0].compute
B200 = load_hardware("dgx-b200").gpus[0].compute
HOPPER_FP8 = H100.low_rate("fp8")
BLACKWELL_FP8 = B200.low_rate("fp8")
SMALL = DecoderShape(
    layers=4, hidden=256, heads=4, seq_len=512, vocab=1024, ffn_hidden=512, kv_heads=2
)


def recipe(name: str, library: str = TE):
    found = get_recipe(name, library)
    assert found is not None
    return found


def test_fp8_gemm_on_h100_runs_at_datasheet_peak_times_efficiency():
    # 1056 output tiles of 128 x 128 = 8 full waves on 132 SMs: wave factor 1, compute bound
    m, n, k = 128 * 132, 1024, 8192
    assert wave_factor(m, n, 1, H100.sm_count) == 1.0
    kern = gemm("up", m, n, k, 2)
    fp8 = quantize_layer(([kern], [], []), recipe("fp8-delayed"), HOPPER_FP8)[0][0]
    assert fp8.precision == "fp8"
    assert fp8.bytes == (m * k + k * n) * 1 + m * n * 2  # FP8 operands, bf16 output
    want = H100.kernel_overhead_s + 2 * m * n * k / (1978.9e12 * 0.707)
    assert kernel_time_s(fp8, H100, "bf16") == pytest.approx(want, rel=1e-12)
    bf16 = H100.kernel_overhead_s + 2 * m * n * k / (989.4e12 * 0.801)
    assert kernel_time_s(kern, H100, "bf16") == pytest.approx(bf16, rel=1e-12)


def test_a_gpu_without_the_format_refuses_it():
    with pytest.raises(ValueError, match="no mxfp8 GEMMs"):
        H100.matmul_rate("mxfp8")
    assert B200.matmul_rate("nvfp4") == pytest.approx(9000e12 * 0.579)


@pytest.mark.parametrize(
    ("name", "library", "non_tn", "usages", "want"),
    [
        ("fp8-delayed", TE, False, 2, 2 + 1 + 1),  # cast-transpose: row and transposed copy
        ("fp8-delayed", TE, True, 2, 2 + 1),  # Blackwell: one copy serves both layouts
        ("fp8-tensorwise", TE, False, 2, 2 + 2 + 2),  # amax pass, then cast-transpose
        ("fp8-blockwise", TE, True, 2, 2 + 2 * (1 + 4 / 128)),  # fp32 scale per 1x128
        ("mxfp8", TE, True, 2, 2 + 2 * (1 + 1 / 32)),  # E8M0 per 32, row and column
        ("nvfp4", TE, True, 2, 2 + 2 + 2 * (0.5 + 1 / 16)),  # amax, E4M3 per 16
        ("fp8-rowwise", TORCHAO, False, 2, 2 * 2 + 2 * 1),  # one cast per usage
        ("fp8-rowwise", TORCHAO, False, 1, 2 + 1),
        ("fp8-tensorwise", TORCHAO, True, 2, 2 * (2 + 2) + 2 * 1),  # amax + cast per usage
        ("fp8-tensorwise", TORCHAO, False, 1, 2 + 2 + 1),
    ],
)
def test_cast_kernel_bytes_per_element(name, library, non_tn, usages, want):
    got = cast_bytes_per_element(recipe(name, library), usages, non_tn)
    assert got == pytest.approx(want, rel=1e-12)


def test_blockwise_casts_of_a_dense_block_hand_counted():
    # fp8-blockwise fuses nothing into the norm: one cast per distinct linear input (forward)
    # and per output gradient (input-gradient phase), 4.0625 B per element each
    b, t, h, f, kv = 1, 512, 256, 512, 128
    kernels = layer_kernels("block", SMALL, b, 2)
    fwd, bwd_in, bwd_w = quantize_layer(kernels, recipe("fp8-blockwise"), BLACKWELL_FP8)
    per = 2 + 2 * (1 + 4 / 128)
    casts = {k.name: k.bytes for k in fwd if k.name.startswith("quantize_")}
    assert casts == pytest.approx(
        {
            "quantize_qkv": t * h * per,
            "quantize_proj": t * h * per,
            "quantize_fc1": t * h * per,  # gate and up share their input: one cast
            "quantize_down": t * f * per,
        }
    )
    grads = {k.name: k.bytes for k in bwd_in if k.name.startswith("quantize_")}
    assert grads == pytest.approx(
        {
            "quantize_dgrad_qkv": t * (h + 2 * kv) * per,
            "quantize_dgrad_proj": t * h * per,
            "quantize_dgrad_fc1": t * 2 * f * per,
            "quantize_dgrad_down": t * h * per,
        }
    )
    assert all(k.precision == "fp8" for k in bwd_w)  # the weight gradients run in FP8 too
    core = [k for k in fwd if k.kind == "attn"]
    assert core and all(k.precision == "" for k in core)  # the attention core stays bf16


def test_sequence_parallel_inputs_are_cast_before_their_all_gather():
    # t = 2, sequence parallel: the QKV and FC1 inputs are quantized over the rank's r = t/2
    # tokens, the projection's and FC2's (tensor-split activations) over all t
    t, r, h, f = 512, 256, 256, 512
    kernels = layer_kernels("block", SMALL, 1, 2, tp=2, sp=True)
    fwd = quantize_layer(kernels, recipe("mxfp8"), B200.low_rate("mxfp8"))[0]
    per = 2 + 2 * (1 + 1 / 32)
    casts = {k.name: k.bytes for k in fwd if k.name.startswith("quantize_")}
    assert casts == pytest.approx(
        {
            "quantize_qkv": r * h * per,
            "quantize_proj": t * h / 2 * per,
            "quantize_fc1": r * h * per,
            "quantize_down": t * f / 2 * per,
        }
    )


def test_delayed_scaling_casts_inside_the_norm():
    # TE's FULLY_FUSED norm writes the FP8 copies instead of bf16: Blackwell writes 1 B, not 2
    r, h = 512, 256
    kernels = layer_kernels("block", SMALL, 1, 2)
    fwd = quantize_layer(kernels, recipe("fp8-delayed"), BLACKWELL_FP8)[0]
    norm1 = next(k for k in fwd if k.name == "norm1")
    assert norm1.bytes == 2 * r * h * 2 + r * h * (1 - 2)
    assert not any(k.name == "quantize_qkv" for k in fwd)
    hopper = quantize_layer(kernels, recipe("fp8-delayed"), HOPPER_FP8)[0]
    assert next(k for k in hopper if k.name == "norm1").bytes == 2 * r * h * 2  # 1 + 1 B


def test_layers_each_recipe_keeps_in_bf16():
    te = LayerRules.default(recipe("fp8-tensorwise"), first_last_bf16=True, start=1, end=2)
    assert [te.block_low(i, 6) for i in range(6)] == [False, True, True, True, False, False]
    assert not te.head and not te.router
    ao = LayerRules.default(recipe("fp8-rowwise", TORCHAO))
    assert ao.head and ao.router and ao.block_low(0, 6)
    with pytest.raises(ValueError, match="not allowed with delayed scaling"):
        LayerRules.default(recipe("fp8-delayed"), first_last_bf16=True)


def test_bf16_layers_are_timed_as_without_the_recipe():
    low = LowPrecision(recipe("fp8-tensorwise"), LayerRules(bf16_start=1, bf16_end=1))
    plain = decoder_trace(SMALL, name="s", microbatch_size=1, gpu=H100)
    fp8 = decoder_trace(SMALL, name="s", microbatch_size=1, gpu=H100, precision=low)
    same = [a.fwd_s == b.fwd_s for a, b in zip(plain.layers, fp8.layers, strict=True)]
    # embedding, block.0 ... block.3, head: the first and last blocks and both ends unchanged
    assert same == [True, True, False, False, True, True]
    assert fp8.provenance["inputs"]["precision"]["bf16_start"] == 1


def test_torchao_quantizes_the_output_layer_too():
    kernels = layer_kernels("head", SMALL, 1, 2)
    low = LayerRules.default(recipe("fp8-rowwise", TORCHAO))
    fwd = quantize_layer(kernels, recipe("fp8-rowwise", TORCHAO), HOPPER_FP8, low)[0]
    assert next(k for k in fwd if k.name == "logits").precision == "fp8"
    te = quantize_layer(kernels, recipe("fp8-delayed"), HOPPER_FP8)[0]
    assert next(k for k in te if k.name == "logits").precision == ""


def test_weight_copy_bytes_per_parameter():
    assert weight_copy_bytes_per_param(recipe("fp8-delayed"), non_tn=False) == 2.0
    assert weight_copy_bytes_per_param(recipe("fp8-delayed"), non_tn=True) == 1.0
    assert weight_copy_bytes_per_param(recipe("mxfp8"), True) == pytest.approx(2 * (1 + 1 / 32))
    assert weight_copy_bytes_per_param(recipe("nvfp4"), True) == pytest.approx(2 * (0.5 + 1 / 16))
    assert weight_copy_bytes_per_param(recipe("fp8-rowwise", TORCHAO), False) == 0.0


def test_weight_copies_and_their_refresh_in_the_plan():
    plan = StagePlan(0.0, 0.0, weight_bytes=2e9, grad_bytes=2e9, optimizer_s=1e-3, dp_sharded=True)
    low = LowPrecision(recipe("fp8-delayed"))
    out = precision_plan(plan, 1e9, low, H100, dp_width=4)
    assert out.weight_bytes == 2e9 + 1e9 * 2  # row-wise + transposed FP8 copy on Hopper
    # refreshed once per step: read bf16, write both copies, at the achieved HBM rate
    assert out.optimizer_s == pytest.approx(1e-3 + 1e9 * 4 / (3.35e12 * 0.85))
    assert out.dp_gather_bytes is None and "precision" in out.notes


def test_fp8_param_gather_moves_one_byte_per_parameter():
    plan = StagePlan(0.0, 0.0, weight_bytes=2e9, grad_bytes=2e9, optimizer_s=1e-3, dp_sharded=True)
    low = LowPrecision(recipe("fp8-delayed"), param_gather=True)
    out = precision_plan(plan, 1e9, low, B200, dp_width=4)
    assert param_gather_bytes_per_param(low.recipe) == 1.0
    assert out.dp_gather_bytes == 2e9 - 1e9 * (2 - 1)  # the FP8 half moves 1 B, the rest 2 B
    assert out.weight_bytes == 2e9 + 1e9 * (1 - 2)  # Blackwell: one FP8 copy replaces bf16


def test_fp8_param_all_gather_in_the_engine(tmp_path):
    trace = tmp_path / "small"
    write_trace(decoder_trace(SMALL, name="small", microbatch_size=1, gpu=H100), trace)
    base = {
        "name": "pg",
        "hardware": "dgx-h100",
        "framework": "megatron-lm",
        "models": [{"name": "s", "trace": str(trace) + ".yaml", "global_batch": 8}],
        "training": {"dtype": "bf16", "precision": "fp8-delayed"},
        "sweep": {"stages": 1, "dp_width": 2, "memory_policy": "dist_opt"},
    }
    sizes = {}
    for gather in (False, True):
        data = {
            **base,
            "training": {**base["training"], "precision_options": {"param_gather": gather}},
        }
        file = str(tmp_path / "e.yaml")
        prep = prepare(parse_experiment(data, file=file), file)
        (point,), _ = expand(prep)
        row, log = point_row(prep, point)
        assert row.precision == "fp8-delayed" and not row.error and log is not None
        gathers = [e.nbytes for e in log.events if e.kind == "all_gather"]
        reduces = [e.nbytes for e in log.events if e.kind == "reduce_scatter"]
        sizes[gather] = (gathers[0], reduces[0])
    assert sizes[False][0] == sizes[False][1]  # bf16 parameters: the all-gather = the reduction
    grads, shard = sizes[True][1], trace_low_params(tmp_path, trace)
    assert sizes[True][0] == pytest.approx(grads - shard * (2 - 1))


def trace_low_params(tmp_path, trace) -> float:
    """Low-precision parameters of the small model's one stage (every block's linears)."""
    low = LowPrecision(recipe("fp8-delayed"))
    par = ParallelLayout(pp=1, dp_replicate=2)
    return sum(low_precision_params(k, SMALL, par, low) for k in ("block",) * SMALL.layers)


def test_tensor_parallel_inputs_are_gathered_in_fp8():
    low = LowPrecision(recipe("fp8-delayed"))
    trace = decoder_trace(SMALL, name="s", microbatch_size=1, gpu=H100, precision=low)
    par = ParallelLayout(pp=1, dp_replicate=1, tp=2, sp=True)
    shard = shard_decoder(trace, par, H100)
    block = shard.comm[1].fwd
    x = 1 * 512 * 256 * 2
    assert [op.nbytes for op in block] == [x / 2, x, x / 2, x]  # AG in FP8, RS in bf16
    assert shard.low_params[1] == pytest.approx(
        (256 * (256 + 2 * 128) + 256 * 256 + 3 * 256 * 512) / 2
    )


def test_fp8_inputs_are_gathered_again_in_fp8_in_the_backward():
    # TE re-gathers the saved (quantized) input of each column-parallel layer for its wgrad
    # (layernorm_linear.py:669-693): a block's backward 2 FP8 all-gathers more.
    low = LowPrecision(recipe("fp8-delayed"))
    trace = decoder_trace(SMALL, name="s", microbatch_size=1, gpu=H100, precision=low)
    par = ParallelLayout(pp=1, dp_replicate=1, tp=2, sp=True)
    plain, again = shard_decoder(trace, par, H100), shard_decoder(trace, par, H100, regather=True)
    x = 1 * 512 * 256 * 2
    assert again.comm[1].fwd == plain.comm[1].fwd
    assert [op.nbytes for op in again.comm[1].bwd] == [x / 2, x, x / 2, x, x / 2, x / 2]


def _exp(tmp_path, trace: str, hardware: str, **training):
    data = {
        "name": "x",
        "hardware": hardware,
        "framework": "megatron-lm",
        "models": [{"name": "s", "trace": trace, "global_batch": 4}],
        "training": {"dtype": "bf16", **training},
        "sweep": {"stages": 2, "dp_width": 1, "memory_policy": "dist_opt"},
    }
    file = str(tmp_path / "e.yaml")
    return prepare(parse_experiment(data, file=file), file)


def _small_trace(tmp_path) -> str:
    path = tmp_path / "small"
    write_trace(decoder_trace(SMALL, name="small", microbatch_size=1, gpu=H100), path)
    return str(path) + ".yaml"


@pytest.mark.parametrize(
    ("hardware", "precision"),
    [("dgx-b300", "nvfp4"), ("nvl72x1-gb300", "mxfp8"), ("dgx-h200", "fp8-tensorwise")],
)
def test_b300_and_gb300_experiments_resolve(tmp_path, hardware, precision):
    prep = _exp(tmp_path, _small_trace(tmp_path), hardware, precision=precision)
    (point,), _ = expand(prep)
    row = point_row(prep, point)[0]
    assert not row.error and row.fits and row.precision == precision
    assert row.iteration_time_s and row.iteration_time_s > 0


def test_the_sweep_axis_and_its_refusals(tmp_path):
    trace = _small_trace(tmp_path)
    prep = _exp(tmp_path, trace, "dgx-b200")
    prep.exp.sweep.precision = ["bf16", "fp8-delayed", "mxfp8"]
    points, _ = expand(prep)
    assert [p.precision for p in points] == ["", "fp8-delayed", "mxfp8"]
    rows = [point_row(prep, p)[0] for p in points]
    weights = [r.peak_weights_bytes or 0.0 for r in rows]
    assert weights[0] < weights[1] < weights[2]  # FP8 copies 1 B per weight, MXFP8 2.06 B
    assert list(results_frame(rows)).count("precision") == 1
    assert list(results_frame(rows[:1])["precision"]) == [""]  # bf16 only: no recipe
    refusals = [
        ("dgx-h100", {"precision": "mxfp8"}, "training.precision", "no rate"),
        ("dgx-h100", {"precision": "fp8-rowwise"}, "training.precision", "torchao's recipe"),
        ("dgx-h100", {"precision": "fp32"}, "training.precision", "not the training dtype"),
        ("dgx-h100", {"precision": "fp9"}, "training.precision", "unknown precision"),
    ]
    for hardware, training, field, match in refusals:
        prep = _exp(tmp_path, trace, hardware, **training)
        with pytest.raises(InputError, match=match) as exc:
            expand(prep)
        assert exc.value.field == field
    measured = _exp(tmp_path, "gnmt16", "dgx-h100", precision="fp8-delayed")
    with pytest.raises(InputError, match="generated decoder trace") as exc:
        expand(measured)
    assert exc.value.field == "models.0.trace"


def test_param_gather_needs_the_distributed_optimizer(tmp_path):
    prep = _exp(
        tmp_path, _small_trace(tmp_path), "dgx-h100", precision="fp8-delayed",
        precision_options={"param_gather": True},
    )  # fmt: skip
    prep.exp.sweep.memory_policy = "none"
    with pytest.raises(InputError, match="needs the distributed optimizer"):
        expand(prep)


def test_presets_load_with_cited_numbers():
    b300 = load_hardware("dgx-b300")
    g = b300.gpus[0].compute
    assert (b300.num_gpus, g.matmul_flops, g.low_rate("fp8").peak_flops) == (8, 2250e12, 4500e12)
    assert g.low_rate("nvfp4").peak_flops == 14000e12 and g.sm_count == 148
    assert g.low_rate("fp8").non_tn
    gb300 = load_hardware("gb300-nvl72")
    assert gb300.num_gpus == 72 and gb300.gpus[0].compute.low_rate("nvfp4").peak_flops == 15000e12
    assert len(gb300.servers) == 1  # one NVLink domain of 72 GPUs
    gh200 = load_hardware("gh200-96gb").gpus[0].compute
    assert (gh200.matmul_flops, gh200.hbm_bandwidth_Bps) == (989.4e12, 4.0e12)
    assert load_hardware("dgx-h200").gpus[0].compute.low_rate("fp8").efficiency == 0.732
    # the power cap: only the measured format slows, by the measured ratio
    capped = load_hardware({"base": "dgx-b300", "gpu": {"power_cap": 600}}).gpus[0].compute
    assert capped.low_rate("fp8").efficiency == pytest.approx(0.625 * 3087 / 3983, rel=1e-3)
    assert capped.low_rate("nvfp4").efficiency == 0.364 and capped.matmul_efficiency == 0.650
    with pytest.raises(InputError, match="no published throughput"):
        load_hardware({"base": "dgx-b300", "gpu": {"power_cap": 700}})


def test_low_precision_gemms_keep_the_bf16_phase_rate_elsewhere():
    # a phase's bf16 kernels are timed in bf16 whatever its FP8 GEMMs
    kernels = layer_kernels("block", SMALL, 1, 2)
    fwd = quantize_layer(kernels, recipe("fp8-delayed"), HOPPER_FP8)[0]
    mem = [k for k in fwd if k.kind == "mem"]
    assert phase_time(mem, H100, "bf16").matmul_s == 0.0
    assert math.isclose(
        phase_time(fwd, H100, "bf16").total_s,
        sum(kernel_time_s(k, H100, "bf16") for k in fwd),
    )


def test_low_precision_rate_is_checked():
    with pytest.raises(ValueError, match="unknown low-precision format"):
        LowPrecisionRate("fp6", 1e15, 0.5)
    with pytest.raises(ValueError, match="efficiency"):
        LowPrecisionRate("fp8", 1e15, 1.5)


def test_te_saves_linear_inputs_quantized():
    """TE keeps each linear layer's saved input in the recipe's format when its wgrad runs in it
    (linear.py:596-621): a block on one tp=2 rank with sequence parallelism keeps, per token,
    ``(h/2 + h/2 + ffn/2) x (2 - 1)`` bytes fewer under delayed-scaling FP8, less the quantized
    copy ``q/2 x 1`` the output projection saves besides the core attention's output
    (attention.py:426-444; the first and last blocks alike here: no bf16 rule); the bf16
    trace's stash is unchanged."""
    low = LowPrecision(recipe("fp8-delayed"))
    par = ParallelLayout(pp=1, dp_replicate=1, tp=2, sp=True)
    plain = decoder_trace(SMALL, name="s", microbatch_size=1, gpu=H100)
    fp8 = decoder_trace(SMALL, name="s", microbatch_size=1, gpu=H100, precision=low)
    a, b = shard_decoder(plain, par, H100), shard_decoder(fp8, par, H100)
    h, ffn, t = SMALL.hidden, SMALL.ffn_hidden, SMALL.seq_len
    q = SMALL.block.heads * SMALL.block.hd
    saved = t * (h // 2 + h // 2 + ffn // 2) * 1 - t * q // 2 * 1
    assert a.trace.layers[1].act_bytes - b.trace.layers[1].act_bytes == pytest.approx(saved)
    assert a.trace.layers[0].act_bytes == b.trace.layers[0].act_bytes  # embedding
    assert a.trace.layers[-1].act_bytes == b.trace.layers[-1].act_bytes  # output layer
    assert quantized_input_savings("block", SMALL, 1, 2, 2.0) == 0.0  # 16-bit: nothing saved
