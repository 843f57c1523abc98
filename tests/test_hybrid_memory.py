"""What a hybrid (Mamba + attention + MoE) stack keeps for its backward under a low-precision
recipe, as Megatron-Core and Transformer Engine keep it (issue 27: the Nemotron 3 Super MXFP8
rows on B300 and B200 that pipesim said did not fit). Hand-computed on a small shape: b = 1,
s = 128 tokens on one rank (t = r = 128), h = 256, 4 heads of 64 (q = 256), FFN 512, Mamba
d_i = 8 x 32 = 256, 8 experts of width 128 (top-2: n = 256 rows), shared 256, latent 64."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim.compute.decoder import DecoderShape
from sim.compute.low_precision_act import keeps_original, quantized_input_savings
from sim.compute.moe_shape import MoEShape
from sim.compute.precision import get_recipe
from sim.compute.precision_rules import LowPrecision
from sim.compute.recompute_modules import module_parts
from sim.compute.routing import Routing
from sim.compute.ssm import MambaShape, mamba_act_bytes
from sim.hardware.loader import load_hardware
from sim.memory.layer_work import WorkOptions, decoder_work
from sim.parallel.decoder_shard import shard_decoder
from sim.parallel.layout import ParallelLayout
from sim.trace.decoder import decoder_trace

H100 = load_hardware("dgx-h100").gpus[0].compute
HYBRID = DecoderShape(4, 256, 4, 128, 1024, 512, kv_heads=2, pattern="MEM*", mtp_layers=1,
                      mamba=MambaShape(8, 32, 16, 1, 4, 64),
                      moe=MoEShape(256, 8, 2, 128, shared_ffn=256, gated=False, latent=64))  # fmt: skip
T, H, DI, N = 128, 256, 256, 256
ROWS = (N / 8,) * 8


def test_hybrid_layers_save_their_linear_inputs_quantized():
    """hybrid_layer_specs.py: TE linears in every hybrid layer (1 B per element here, against
    2; a recipe other than delayed scaling): Mamba in_proj's normed input r h and out_proj's
    input t d_i; attention qkv r h (proj keeps the core's output as it is); MLP fc1 r h and fc2
    t f; MoE: the experts' fc1 input at the latent width n l, fc2 input n f_e, the shared fc2
    input t f_s and fc2_latent_proj's input r l, less the quantized copy fc1_latent_proj keeps
    of the norm output (r h; the shared fc1 keeps the router's as it is)."""
    save = lambda kind, **kw: quantized_input_savings(kind, HYBRID, 1, 2, 1.0, rows=ROWS, **kw)  # noqa: E731
    assert save("mamba") == T * H + T * DI == 65536
    assert save("attention") == T * H == 32768
    assert save("mlp") == T * H + T * 512 == 98304
    moe = N * 64 + N * 128 + T * 256 + T * 64 - T * H
    assert save("moe") == moe == 57344
    # latent projections kept in 16 bits (Nemotron 3 Super's NVFP4 quantization config):
    # they save their inputs as they are, nothing replaced and no copy added
    assert save("moe", keep16=("latent_down", "latent_up")) == moe - T * 64 + T * H == 81920
    assert save("mtp") == 0.0  # MTP depths are left in 16 bits


def test_proj_and_shared_fc1_save_the_16_bit_tensor_unless_delayed_scaling():
    """Megatron-LM !3465 (attention.py:426-444, shared_experts.py:147-161): with a recipe other
    than delayed scaling linear_proj saves the core attention's output and the shared expert's
    fc1 the router's input as they are (set_save_original_input); under delayed scaling each
    saves a quantized copy besides: t q and t h more (1 B each here)."""
    save = lambda kind, original: quantized_input_savings(  # noqa: E731
        kind, HYBRID, 1, 2, 1.0, rows=ROWS, original=original
    )
    assert save("attention", True) - save("attention", False) == T * 256
    assert save("moe", True) - save("moe", False) == T * H
    assert not keeps_original("fp8-delayed")
    assert keeps_original("mxfp8") and keeps_original("fp8-tensorwise") and keeps_original("nvfp4")


def test_fused_norm_hybrid_layers_have_no_layernorm_recompute():
    """transformer_layer.py:475-477: `layernorm` recomputes a norm that is not an IdentityOp;
    the Mamba, attention and MLP layers fuse theirs into their first linear, the MoE layer's
    pre_mlp_layernorm (a TENorm) is recomputed: r h d."""
    names = lambda kind: {n: b for n, b, _ in module_parts(kind, HYBRID, 1, 2, rows=ROWS)}  # noqa: E731
    for kind in ("mamba", "attention", "mlp"):
        assert "layernorm" not in names(kind)
    assert names("moe")["layernorm"] == T * H * 2


def test_moe_act_recompute_drops_the_quantized_fc2_input():
    """experts.py:269-276: with FP8, moe_act recompute makes linear_fc2 save its original input,
    which the recompute discards: the stash loses the quantized copy it held, n f_e x 1 B under
    per-tensor FP8, not the 16-bit n f_e x 2."""
    par = ParallelLayout(pp=1, dp_replicate=1)
    low = LowPrecision(get_recipe("fp8-delayed"))
    plain = decoder_trace(HYBRID, name="h", microbatch_size=1, gpu=H100)
    fp8 = decoder_trace(HYBRID, name="h", microbatch_size=1, gpu=H100, precision=low)

    def moe_act(trace) -> float:
        layer = next(x for x in shard_decoder(trace, par, H100).trace.layers if x.name == "moe.1")
        return dict((n, b) for n, b, _ in layer.recompute_parts)["moe_act"]

    assert moe_act(plain) == pytest.approx(N * 128 * 2)
    assert moe_act(fp8) == pytest.approx(N * 128 * 1)


def test_mtp_loss_keeps_16_bit_logits_under_te_cross_entropy():
    """multi_token_prediction.py:1012-1027: each MTP depth's loss goes through
    compute_language_model_loss, so TE's cross entropy keeps its 16-bit logits (2 t V) instead
    of the fp32 softmax (4 t V) the trace's MTP stash counts."""
    trace = decoder_trace(HYBRID, name="h", microbatch_size=1, gpu=H100)
    te_shape = replace(HYBRID, cross_entropy_fusion="te")
    te_trace = decoder_trace(te_shape, name="h", microbatch_size=1, gpu=H100)
    lay = ParallelLayout(pp=1, dp_replicate=1)
    mtp = [i for i, x in enumerate(trace.layers) if x.name.startswith("mtp")]
    assert mtp
    te = decoder_work(te_trace, lay, Routing(), WorkOptions())
    plain = decoder_work(trace, lay, Routing(), WorkOptions())
    for i in mtp:
        act = trace.layers[i].act_bytes
        assert te[i].stash_bytes == act - (4 - 2) * T * 1024
        assert plain[i].stash_bytes is None


def test_mamba_keeps_what_the_split_conv_scan_and_the_gated_norm_save():
    """ssd_combined.py:888-889 saves zxbcdt (t x (2 d_i + 2 G N + H)) and out_x (t d_i); the
    conv output and dt / dA_cumsum are recomputed; the gated RMSNorm saves its input (t d_i)
    and fp32 rstd (4 t G), out_proj its input (t d_i); in_proj's LayerNormLinear the norm input
    and its output (2 r h): 2 (2 t h + t (2 d_i + 2 G N + H) + 3 t d_i) + 4 t G bytes."""
    ms = HYBRID.mamba
    assert ms is not None
    iw = 2 * DI + 2 * ms.groups * ms.state + ms.heads
    want = 2 * (2 * T * H + T * iw + 3 * T * DI) + 4 * T * ms.groups
    assert mamba_act_bytes(ms, H, T, 1, 2) == want == 469504


def test_fused_group_mlp_offload_drops_the_fused_experts_saved_tensors():
    """Megatron's fine-grained offload of fused_group_mlp (experts.py 785-822): the fused
    grouped MLP's fc1 input n w d, activation input n up_e d and output n f_e d leave the GPU,
    no kernel re-runs; with moe_act (recomputed inside the fused op) its output is not counted
    twice. HYBRID's MoE layer: n = 256 rows, w = latent 64, plain f_e = up_e = 128, d = 2:
    256 * 2 * (64 + 128 + 128) = 163,840 B."""
    from sim.memory.stash import _modules
    from sim.trace.schema import LayerProfile

    parts = {n: (b, k) for n, b, k in module_parts("moe", HYBRID, 1, 2, rows=ROWS)}
    assert parts["fused_group_mlp"] == (163840.0, ())
    moe_act = parts["moe_act"][0]
    layer = LayerProfile(name="l", fwd_s=1.0, bwd_s=2.0, act_bytes=1e9, param_bytes=0.0, out_bytes=0.0,
                         recompute_parts=(("moe_act", moe_act, 0.1),
                                          ("fused_group_mlp", parts["fused_group_mlp"][0], 0.0)))  # fmt: skip
    both = _modules(layer, frozenset({"moe_act", "fused_group_mlp"}))
    assert both == (163840.0, 0.1)
