"""Models of today in the decoder model (issue 26 item 4): head_dim, QK-norm, sliding windows,
Mamba-2 hybrids, MTP, tied embeddings, LoRA, and the Hugging Face configs that describe them;
each mechanism against a closed form, a hand-computed small case or a published count."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim.compute.attention import score_fraction
from sim.compute.decoder import (
    DecoderShape,
    layer_kernels,
    layer_names,
    layer_params,
    trainable_params,
)
from sim.compute.lora import LoRAShape, adapter_params
from sim.compute.moe_shape import MoEShape
from sim.compute.ssm import MambaShape, mamba_fwd, ssd_bwd_flops, ssd_fwd_flops, ssd_state_bytes
from sim.errors import InputError
from sim.trace.decoder import decoder_trace
from sim.trace.hf_config import read_adapter_config, read_config

HF = Path(__file__).resolve().parents[1] / "examples" / "hf"
SCAN = ("ssd_chunk_state", "ssd_bmm_cb", "ssd_chunk_scan")


def _kernel(kernels, name):
    return next(k for k in kernels if k.name == name)


def _counts(m: DecoderShape) -> tuple[float, float]:
    total = active = 0
    for _, kind in layer_names(m):
        dense, expert = layer_params(kind, m)
        total += dense + expert
        active += dense + (m.moe.top_k * m.moe.expert_params() if expert else 0)
    return total, active


def test_qwen3_attention_has_its_own_head_dim_and_qk_norm():
    """Qwen3-30B-A3B's attention: 32 heads of 128 (4096 wide) on a 2048 hidden, 4 KV heads."""
    m = read_config(HF / "qwen3-30b-a3b-config.json", 4096)
    assert (m.head_dim, m.qk_norm, m.kv_heads) == (128, True, 4)
    b, s, d = 1, 4096, 2
    fwd, _, _ = layer_kernels("moe_block", m, b, d, rows=(1.0,) * 128)
    qkv, proj = _kernel(fwd, "qkv"), _kernel(fwd, "proj")
    assert (qkv.k, qkv.n) == (2048, (32 + 2 * 4) * 128)
    assert (proj.k, proj.n) == (4096, 2048)
    core = _kernel(fwd, "flash_attn_fwd")
    assert core.flops == 4 * b * s * s * 4096 * 0.5  # a*hd = 4096, not the hidden 2048
    norm = _kernel(fwd, "qk_norm")
    assert norm.bytes == 2 * b * s * (32 + 4) * 128 * d  # read and write Q and K
    attn = 2048 * (32 + 2 * 4) * 128 + 4096 * 2048 + 2 * 128  # projections + q/k norms
    dense, _ = layer_params("moe_block", m)
    assert dense == attn + 2 * 2048 + 2048 * 128  # + two norms + router


def test_sliding_window_attention_flops_are_the_band():
    """GPT-OSS: windowed and full layers alternate; a windowed layer's core does the band
    S*w - w^2/2 of scores, the full one S^2/2."""
    assert score_fraction(8, 8, True, 4) == 4 / 8 * (1 - 4 / 16)  # 24 of 64 scores
    assert score_fraction(8, 8, True, 0) == score_fraction(8, 8, True, 8) == 0.5
    assert score_fraction(8, 8, False, 4) == 1.0
    m = read_config(HF / "gpt-oss-120b-config.json", 4096, layers=4)
    assert [k for _, k in layer_names(m)][1:5] == [
        "swa_moe_block",
        "moe_block",
        "swa_moe_block",
        "moe_block",
    ]
    rows = (128.0,) * 128
    s, a_hd = 4096, 64 * 64
    swa = _kernel(layer_kernels("swa_moe_block", m, 1, 2, rows=rows)[0], "flash_attn_fwd")
    full = _kernel(layer_kernels("moe_block", m, 1, 2, rows=rows)[0], "flash_attn_fwd")
    assert full.flops == 4 * s * s * a_hd * 0.5
    assert swa.flops == pytest.approx(4 * a_hd * (s * 128 - 128**2 / 2))


def test_gpt_oss_biases_and_sinks_are_parameters():
    m = read_config(HF / "gpt-oss-120b-config.json", 4096)
    assert m.attn_bias and m.sinks and m.moe is not None and m.moe.bias
    h, a, kv, hd, e, f = 2880, 64, 8, 64, 128, 2880
    attn = h * (a + 2 * kv) * hd + a * hd * h + (a + 2 * kv) * hd + h + a
    router = (h + 1) * e
    dense, expert = layer_params("moe_block", m)
    assert dense == attn + 2 * h + router
    assert expert == e * (3 * h * f + 2 * f + h)


def test_ssd_scan_flops_and_state_bytes_small_case():
    """H=2 heads of P=4, N=8, G=1, chunks of Q=4 over T=8 tokens: forward
    T*H*(4PN + QP) + 2*T*G*Q*N = 8*2*(128+16) + 2*8*4*8 = 2816 FLOPs; the scan kernels sum
    to it; backward T*H*(10PN + 3QP) + 6*T*G*Q*N = 8*2*(320+48) + 6*8*4*8 = 7424; the chunk
    states 2 chunks x 2 x 4 x 8 elements in fp32 and bf16 = 768 bytes."""
    ms = MambaShape(heads=2, head_dim=4, state=8, groups=1, conv_kernel=4, chunk=4)
    assert ssd_fwd_flops(ms, 8) == 2816
    assert ssd_bwd_flops(ms, 8) == 7424
    scan = [k for k in mamba_fwd(ms, 16, 8, 1, 2) if k.name in SCAN]
    assert sum(k.flops for k in scan) == 2816
    assert ssd_state_bytes(ms, 1, 8, 2) == 2 * 2 * 4 * 8 * (4 + 2)


def test_mamba_layer_shapes_and_parameters():
    """Nemotron-H-8B's mixer: in_proj 4096 -> 2*8192 + 2*8*128 + 128; conv over
    8192 + 2*8*128 channels; out_proj 8192 -> 4096."""
    m = read_config(HF / "nemotron-h-8b-config.json", 8192)
    assert m.mamba == MambaShape(128, 64, 128, 8, 4, 128) and not m.rotary and not m.gated_mlp
    fwd = layer_kernels("mamba", m, 1, 2)[0]
    assert _kernel(fwd, "in_proj").n == 2 * 8192 + 2 * 8 * 128 + 128
    assert _kernel(fwd, "out_proj").k == 8192
    conv = _kernel(fwd, "conv1d")
    assert conv.flops == 2 * 8192 * (8192 + 2048) * 4
    h, di, cw, inw = 4096, 8192, 8192 + 2048, 2 * 8192 + 2048 + 128
    assert m.mamba.params(h) == h * inw + cw * 5 + 3 * 128 + di + di * h + h
    kinds = [k for _, k in layer_names(m)]
    assert kinds.count("mamba") == 24 and kinds.count("mlp") == 24
    assert kinds.count("attention") == 4
    assert layer_params("mlp", m)[0] == h + 2 * h * 21504  # squared ReLU: up and down


def test_hybrid_moe_pattern_reads_nemotron_3_nano():
    m = read_config(HF / "nemotron-3-nano-30b-a3b-config.json", 4096)
    kinds = [k for _, k in layer_names(m)]
    assert (kinds.count("mamba"), kinds.count("moe"), kinds.count("attention")) == (23, 23, 6)
    assert m.moe == MoEShape(
        2688, 128, 6, 1856, shared_ffn=3712, gated=False, router_expert_bias=True
    )  # its router's e_score_correction_bias


def test_mtp_depth_counts_and_params():
    """DeepSeek-V3 with its MTP module: 685 B on the model card (671 B main + 14 B MTP); the
    depth is its projection [2h, h], three norms and a MoE block, before the head."""
    m = read_config(HF / "deepseek-v3-config.json", 4096, mtp=True)
    names = [n for n, _ in layer_names(m)]
    assert m.mtp_layers == 1 and names[-2:] == ["mtp.0", "head"] and len(names) == 61 + 3
    h = 7168
    dense, expert = layer_params("mtp", m)
    block_dense, block_expert = layer_params("moe_block", m)
    assert (dense, expert) == (block_dense + 2 * h * h + 3 * h, block_expert)
    assert _counts(m)[0] == pytest.approx(685e9, rel=0.01)
    assert read_config(HF / "deepseek-v3-config.json", 4096).mtp_layers == 0  # not asked


def test_lora_trains_only_the_adapters():
    """Llama-2-7B, rank 8 on q and v: 32 x 2 x 8 x (4096 + 4096) = 4,194,304 trainable
    parameters (PEFT's print_trainable_parameters for this setting); no base weight gradient
    is computed, the input gradient still is."""
    lora = LoRAShape(8, ("q_proj", "v_proj"))
    m = read_config(HF / "llama2-7b-config.json", 4096, lora=lora)
    assert sum(trainable_params(k, m) for _, k in layer_names(m)) == 4_194_304
    assert adapter_params(lora, [("q_proj", 4096, 4096), ("o_proj", 4096, 4096)]) == 65536
    fwd, bi, bw = layer_kernels("block", m, 1, 2)
    assert {k.name for k in bw} == {
        "d_lora_q_proj_a_w",
        "d_lora_q_proj_b_w",
        "d_lora_v_proj_a_w",
        "d_lora_v_proj_b_w",
    }
    assert "d_qkv_in" in {k.name for k in bi} and "lora_q_proj_a" in {k.name for k in fwd}
    assert layer_kernels("embedding", m, 1, 2)[2] == []  # a frozen embedding: no backward
    t = decoder_trace(m, name="l", microbatch_size=1, gpu=_h100())
    assert t.layers[0].trainable_bytes == 0.0
    assert t.layers[1].trainable_bytes == 2 * 2 * 8 * 8192
    assert t.layers[1].param_bytes > t.layers[1].trainable_bytes


def _h100():
    from sim.hardware.loader import load_hardware

    gpu = load_hardware("dgx-h100").gpus[0].compute
    assert gpu is not None
    return gpu


def test_tied_embeddings_are_one_shared_group_and_untied_ones_are_not_tied():
    from sim.framework.registry import get_framework

    tied = read_config(HF / "tiny-qwen2-tied-config.json", 64)
    t = decoder_trace(tied, name="t", microbatch_size=1, gpu=_h100())
    assert t.layers[-1].param_bytes == 128 * 2  # the final norm only
    assert [g.layers for g in t.shared] == [(0, len(t.layers) - 1)]
    assert t.shared[0].param_bytes == 512 * 128 * 2
    untied = read_config(HF / "llama3-8b-config.json", 64, layers=2)
    u = decoder_trace(untied, name="u", microbatch_size=1, gpu=_h100())
    assert u.shared == () and u.layers[-1].param_bytes == (128256 * 4096 + 4096) * 2
    megatron = get_framework("megatron-lm")
    assert megatron.tied_embedding.value and not megatron.ties(u) and not megatron.ties(t)


@pytest.mark.parametrize(
    "config,total,active",
    [
        ("qwen3-8b", 8.19e9, None),
        ("qwen3-30b-a3b", 30.5e9, 3.3e9),
        ("qwen3-235b-a22b", 235e9, 22e9),
        ("gpt-oss-120b", 116.83e9, None),
        ("nemotron-h-8b", 8.1e9, None),
        ("nemotron-h-56b", 56e9, None),
        ("nemotron-3-nano-30b-a3b", 31.6e9, 3.6e9),
        ("kimi-k2", 1.04e12, 32e9),
    ],
)
def test_shipped_configs_have_the_published_parameter_counts(config, total, active):
    t, a = _counts(read_config(HF / f"{config}-config.json", 4096))
    assert t == pytest.approx(total, rel=0.02)
    if active is not None:
        assert a == pytest.approx(active, rel=0.03)


BAD = [
    ("mixtral-8x7b", {"num_local_experts": 0}, "num_local_experts"),
    ("deepseek-v3", {"n_routed_experts": -4}, "n_routed_experts"),
    ("deepseek-v3", {"n_routed_experts": 10**7}, "n_routed_experts"),
    ("mixtral-8x7b", {"num_experts_per_tok": 9}, "num_experts_per_tok"),
    ("deepseek-v3", {"kv_lora_rank": -512}, "kv_lora_rank"),
    ("deepseek-v3", {"q_lora_rank": -1}, "q_lora_rank"),
    ("deepseek-v3", {"moe_layer_freq": 0}, "moe_layer_freq"),
    ("deepseek-v3", {"first_k_dense_replace": -1}, "first_k_dense_replace"),
    ("qwen1.5-moe-a2.7b", {"num_experts": 0}, "num_experts"),
    ("qwen3-30b-a3b", {"decoder_sparse_step": 0}, "decoder_sparse_step"),
    ("qwen3-30b-a3b", {"head_dim": 0}, "head_dim"),
    ("gpt-oss-120b", {"layer_types": ["sliding", "full"]}, "layer_types"),
    ("nemotron-h-8b", {"hybrid_override_pattern": "M-M"}, "hybrid_override_pattern"),
    ("nemotron-h-8b", {"n_groups": 7}, "n_groups"),
]


@pytest.mark.parametrize("config,change,field", BAD, ids=[f"{c}-{f}" for c, _, f in BAD])
def test_bad_configs_name_the_field(tmp_path, config, change, field):
    data = {**json.loads((HF / f"{config}-config.json").read_text()), **change}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError) as exc:
        read_config(path, 4096)
    assert exc.value.field == field and field in str(exc.value)


def test_adapter_config_reads_peft_fields(tmp_path):
    path = tmp_path / "adapter_config.json"
    path.write_text(json.dumps({"peft_type": "LORA", "r": 16, "target_modules": "all-linear"}))
    assert read_adapter_config(path).rank == 16
    assert len(read_adapter_config(path).targets) == 7
    path.write_text(json.dumps({"peft_type": "LORA", "r": 0, "target_modules": ["q_proj"]}))
    with pytest.raises(InputError) as exc:
        read_adapter_config(path)
    assert exc.value.field == "r"


# ------------------------------------------------ item 7: kernels as micro-benchmarks measured them


def _b200():
    from sim.hardware.loader import load_hardware

    gpu = load_hardware("dgx-b200").gpus[0].compute
    assert gpu is not None
    return gpu


def test_b200_attention_runs_at_simumax_measured_causal_efficiency():
    """SimuMax's B200 table counts causal kernels at non-causal FLOPs: 64 heads of 128 at
    4096 tokens, factors 0.872 forward / 0.729 backward, are 0.436 / 0.3645 of peak in
    pipesim's causal convention; Ulysses' kernel (s queries, a/cp heads) and a rank's s/cp
    queries against s keys over a heads are the same lookup."""
    from sim.compute.attention import attention_bwd, attention_fwd
    from sim.compute.kernels import kernel_time_s
    from sim.compute.measured import attention_efficiency

    gpu = _b200()
    fwd = attention_fwd("flash", 1, 4096, 64 * 128, 64, 2, causal=True, dropout=False)[0]
    bwd = attention_bwd("flash", 1, 4096, 64 * 128, 64, 2, causal=True, dropout=False)[0]
    assert attention_efficiency(fwd, gpu, "bf16") == pytest.approx(0.436)
    assert attention_efficiency(bwd, gpu, "bf16") == pytest.approx(0.3645)
    t = kernel_time_s(fwd, gpu, "bf16")
    assert t == pytest.approx(gpu.kernel_overhead_s + fwd.flops / (2250e12 * 0.436))
    # 32K tokens over cp 4 ranks, 32 heads: the rank's 8192 queries x 32768 keys look up 8 heads
    cp = attention_fwd("flash", 1, 8192, 32 * 128, 32, 2, causal=True, dropout=False, kv=32768)
    assert attention_efficiency(cp[0], gpu, "bf16") == pytest.approx(1.202 / 2)
    from sim.hardware.loader import load_hardware

    a100 = load_hardware("dgx-a100-80gb").gpus[0].compute  # no table: the flat efficiency
    assert a100 is not None and attention_efficiency(fwd, a100, "bf16") is None


def test_h100_attention_follows_flashattention2_by_length():
    """FlashAttention-2 on H100, causal, head dim 128 at 16k: forward 335 TFLOPS, forward +
    backward 328, so backward 2.5 / (3.5/328 - 1/335) TFLOPS; 4k: forward 319."""
    from sim.compute.attention import attention_bwd, attention_fwd
    from sim.compute.measured import attention_efficiency

    gpu = _h100()
    peak = gpu.peak_flops("bf16")
    f16 = attention_fwd("flash", 1, 16384, 16 * 128, 16, 2, causal=True, dropout=False)[0]
    b16 = attention_bwd("flash", 1, 16384, 16 * 128, 16, 2, causal=True, dropout=False)[0]
    f4 = attention_fwd("flash", 4, 4096, 16 * 128, 16, 2, causal=True, dropout=False)[0]
    assert attention_efficiency(f16, gpu, "bf16") == pytest.approx(335e12 / peak)
    assert attention_efficiency(b16, gpu, "bf16") == pytest.approx(
        2.5 / (3.5 / 328 - 1 / 335) * 1e12 / peak
    )
    assert attention_efficiency(f4, gpu, "bf16") == pytest.approx(319e12 / peak)
    assert attention_efficiency(f4, gpu, "fp32") is None


def test_b200_grouped_expert_gemms_run_at_their_measured_efficiency_by_rows():
    """DeepSeek-V3's experts at 128 rows each: forward 0.208, weight gradient 0.077 of 2250
    TFLOPS on SimuMax's node, whose dense GEMMs run at 0.4878 of it (SimuMax's TE grouped GEMM);
    between measured rows, linear in log2 M. On a B200 whose dense GEMMs run at 0.642 (the
    dgx-b200 preset, TE's GEMM benchmark) each is that fraction times 0.642 / 0.4878
    (sim.compute.measured, "grouped GEMMs relative to the dense rate")."""
    from sim.compute.kernels import kernel_time_s
    from sim.compute.measured import grouped_gemm_efficiency
    from sim.compute.moe import grouped

    gpu = _b200()
    rel = 0.642 / 0.4878
    assert gpu.matmul_efficiency == pytest.approx(0.642)
    up = grouped("expert_up[128]", 128, 4096, 7168, 2, 32, "fwd")
    wgrad = grouped("d_expert_up_w[128]", 7168, 4096, 128, 2, 32, "wgrad")
    dgrad = grouped("d_expert_up_in[128]", 128, 7168, 4096, 2, 32, "dgrad")
    assert grouped_gemm_efficiency(up, gpu, "bf16") == pytest.approx(0.208 * rel)
    assert grouped_gemm_efficiency(wgrad, gpu, "bf16") == pytest.approx(0.077 * rel)
    assert grouped_gemm_efficiency(dgrad, gpu, "bf16") == pytest.approx(0.226 * rel)
    mid = grouped("expert_up[181]", 181, 4096, 7168, 2, 32, "fwd")  # log2 halfway 128..256
    assert grouped_gemm_efficiency(mid, gpu, "bf16") == pytest.approx(
        (0.208 + (0.271 - 0.208) * 0.5) * rel, rel=1e-2
    )
    t = kernel_time_s(up, gpu, "bf16")
    assert t == pytest.approx(gpu.kernel_overhead_s + up.flops / (2250e12 * 0.208 * rel))
    assert grouped_gemm_efficiency(up, _h100(), "bf16") is None  # the roofline there


def test_grouped_gemms_on_simumax_node_run_at_the_table_as_measured():
    """On SimuMax's own node (the simumax-b200 overlay: dense GEMMs at 0.488 of 2250 TFLOPS)
    the grouped GEMM is the table's 0.208 times 0.488 / 0.4878: the measurement itself."""
    from sim.compute.measured import grouped_gemm_efficiency
    from sim.compute.moe import grouped
    from sim.hardware.loader import load_hardware
    from sim.hardware.overlay import with_overlays

    gpu = load_hardware(with_overlays("dgx-b200", "simumax-b200", None)).gpus[0].compute
    assert gpu is not None and gpu.matmul_efficiency == pytest.approx(0.488)
    up = grouped("expert_up[128]", 128, 4096, 7168, 2, 32, "fwd")
    assert grouped_gemm_efficiency(up, gpu, "bf16") == pytest.approx(0.208 * 0.488 / 0.4878)


def test_b200_token_permutation_time_is_simumax_measured_rate():
    """TE's fused permute of t tokens into P rows of h bf16: (t + 3P)*h*2 bytes at
    0.5008 x 8000 GiB/s plus two 30 us launches."""
    from sim.compute.kernels import kernel_time_s
    from sim.compute.moe import moe_fwd
    from sim.compute.moe_shape import MoEShape

    gpu = _b200()
    moe = MoEShape(7168, 256, 8, 2048, capacity_factor=1.0, pad_to_capacity=True)
    fwd = moe_fwd(moe, 4096, 4096, (1024.0,) * 32, 2)
    perm = _kernel(fwd, "permute")
    rate = 0.5008 * 8000 * 2**30
    want = (4096 + 3 * 4096 * 8) * 7168 * 2 / rate + 60e-6 + gpu.kernel_overhead_s
    assert kernel_time_s(perm, gpu, "bf16") == pytest.approx(want)
    assert "token_count_sync" not in {k.name for k in fwd}  # padded: no host sync


def test_dropless_moe_syncs_token_counts_on_the_host():
    """Megatron's alltoall dispatcher: a dropless layer all-gathers its E int64 counts over the
    EP group and waits for them on the host (one launch gap); a padded one does neither."""
    from sim.compute.moe import moe_fwd
    from sim.parallel.decoder_shard import shard_decoder
    from sim.parallel.layout import ParallelLayout

    moe = MoEShape(256, 8, 2, 512)
    assert "token_count_sync" in {k.name for k in moe_fwd(moe, 64, 64, (16.0,) * 8, 2)}
    m = DecoderShape(2, 256, 4, 64, 1000, 512, moe=moe)
    trace = decoder_trace(m, name="m", microbatch_size=1, gpu=_h100())
    fwd, _ = shard_decoder(trace, ParallelLayout(dp_replicate=4, ep=4), _h100()).group[1]
    assert (fwd[0].kind, fwd[0].nbytes) == ("all_gather", 8 * 8 * 4)


def _one_point(tmp_path, shape, name: str):
    """The row of one single-GPU point of ``shape`` (dgx-h100, Adam, bf16, no parallelism)."""
    from sim.config import parse_experiment
    from sim.plan.point_row import point_row
    from sim.plan.sweep import expand
    from sim.point.experiment import prepare
    from sim.trace.native import write_trace

    trace = decoder_trace(shape, name=name, microbatch_size=1, gpu=_h100())
    csv, _ = write_trace(trace, tmp_path / name)
    data = {
        "name": name,
        "hardware": "dgx-h100",
        "models": [{"name": "m", "trace": str(csv), "global_batch": 1}],
        "training": {"optimizer": "adam", "dtype": "bf16"},
        "sweep": {"microbatch_size": 1, "memory_policy": "none", "stages": 1},
    }
    file = str(tmp_path / f"{name}.yaml")
    prep = prepare(parse_experiment(data, file=file), file)
    points, _ = expand(prep)
    return point_row(prep, points[0])[0]


def test_lora_memory_has_gradients_and_optimizer_state_of_the_adapters_only(tmp_path):
    """A 2-layer Llama-3-8B with rank-16 adapters on q and v: 2 x 2 x 16 x (4096 + 1024)
    trainable parameters, 2 bytes of gradient and 12 of Adam state each (fp32 master, m, v);
    the weights stay whole."""
    base = read_config(HF / "llama3-8b-config.json", 256, layers=2)
    lora = read_config(HF / "llama3-8b-config.json", 256, layers=2, lora=LoRAShape(16))
    full, adapted = _one_point(tmp_path, base, "full"), _one_point(tmp_path, lora, "lora")
    trainable = 2 * 16 * ((4096 + 4096) + (4096 + 1024))
    assert adapted.peak_gradients_bytes == pytest.approx(2 * trainable)
    assert adapted.peak_optimizer_bytes == pytest.approx(12 * trainable)
    assert adapted.peak_weights_bytes > full.peak_weights_bytes  # base + adapters
    assert adapted.iteration_time_s < full.iteration_time_s  # no weight-gradient GEMMs


def test_hybrid_mtp_depth_is_attention_and_the_moe_layer():
    """Nemotron 3's MTP depths are '*E' (Megatron-LM's Super release test: hybrid pattern
    "...E/*E/*E"): an MTP depth of a hybrid MoE model holds the MoE layer's experts and runs
    its expert GEMMs; a dense hybrid's depth keeps the dense MLP."""
    m = read_config(HF / "nemotron-3-nano-30b-a3b-config.json", 4096)
    m = DecoderShape.from_dict(m.to_dict() | {"mtp_layers": 1})
    assert layer_params("mtp", m)[1] == layer_params("moe", m)[1] == 128 * 2 * 2688 * 1856
    fwd = layer_kernels("mtp", m, 1, 2, rows=(1.0,) * 128)[0]
    assert any(k.name.startswith("expert_up") for k in fwd)
    assert any(k.name == "flash_attn_fwd" for k in fwd)
    h8 = read_config(HF / "nemotron-h-8b-config.json", 4096)
    h8 = DecoderShape.from_dict(h8.to_dict() | {"mtp_layers": 1})
    assert layer_params("mtp", h8)[1] == 0
    assert {"up", "down"} <= {k.name for k in layer_kernels("mtp", h8, 1, 2)[0]}
