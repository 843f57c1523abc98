"""Hugging Face's BertForSequenceClassification as PatrickStar's benchmark ran it
(sim.compute.hf_bert), with hand-computed byte counts."""

from __future__ import annotations

import pytest

from sim.compute.hf_bert import (
    classifier_kernels,
    classifier_params,
    extra_bwd,
    extra_fwd,
    hf_block_kernels,
    hf_shape,
)
from sim.compute.transformer import block_bwd, block_fwd
from sim.trace.generator import preset_gpu, transformer_trace, unique_parameters

# h 4, a 2, s 4, FFN 16, b 1, 2-byte elements: T = 4 tokens, S = 1*2*4*4 = 32 scores
SHAPE = hf_shape(4, 2, 4, 16)


def _bytes(kernels) -> float:
    return sum(k.bytes for k in kernels)


def test_forward_extras_by_hand() -> None:
    # bias adds 2*T*n*d: q, k, v, dense 4 x 64, intermediate 256, output 64 = 576
    # scale and mask 2 x 2*S*d = 2 x 128; layout copies 4 x 2*T*h*d = 4 x 64
    got = {k.name: k.bytes for k in extra_fwd(SHAPE, 1, 2)}
    assert sum(v for n, v in got.items() if n.endswith("bias_add")) == 576
    assert got["scores_scale"] == got["scores_mask_add"] == 128
    assert sum(v for n, v in got.items() if n.endswith("layout_copy")) == 256
    assert _bytes(extra_fwd(SHAPE, 1, 2)) == 576 + 256 + 256


def test_backward_extras_by_hand() -> None:
    grad_in, grad_w = extra_bwd(SHAPE, 1, 2)
    # scale backward 128, four gradient copies 256, two gradient sums 2 x 3*T*h*d = 192
    assert _bytes(grad_in) == 128 + 256 + 192
    # bias gradients T*n*d: 4 x 32 + 128 + 32
    assert _bytes(grad_w) == 288


def test_layer_is_the_unfused_block_and_the_extras() -> None:
    # beyond Megatron's unfused block, the layer moves exactly the extras counted by hand above
    # (it was compared with block_fwd + extra_fwd, the sum hf_block_kernels itself returns)
    fwd, grad_in, grad_w = hf_block_kernels(SHAPE, 1, 2)
    ref_in, ref_w = block_bwd(SHAPE, 1, 2)
    assert _bytes(fwd) - _bytes(block_fwd(SHAPE, 1, 2)) == 576 + 256 + 256
    assert _bytes(grad_in) - _bytes(ref_in) == 128 + 256 + 192
    assert _bytes(grad_w) - _bytes(ref_w) == 288
    # three [h, h] projections, not one [h, 3h]; no causal mask
    assert [k.name for k in fwd if k.name in ("q", "k", "v", "qkv")] == ["q", "k", "v"]
    assert not SHAPE.causal and not SHAPE.fused_qkv


def test_classifier_head_by_hand() -> None:
    # pooler h^2 + h, classifier (h + 1) x 2 labels
    assert classifier_params(4) == 16 + 4 + 10
    fwd, grad_in, grad_w = classifier_kernels(3, 4, 2)
    assert sum(k.flops for k in fwd) == 2 * 3 * 4 * 4 + 2 * 3 * 2 * 4
    assert {k.name for k in grad_w} == {"d_classifier_w", "d_pooler_w"}


def test_trace_counts_the_models_numel() -> None:
    """PatrickStar's TFLOPS use model.numel(): embeddings (V + s + 2)h + 2h, layers, pooler and
    classifier; the trace holds exactly those parameters (no vocabulary projection)."""
    h, V, s, L = 64, 100, 32, 3
    t = transformer_trace(
        "bert", name="x", layers=L, hidden=h, heads=4, seq_len=s, vocab=V, microbatch_size=2,
        gpu=preset_gpu("dgx1-v100-16gb"), modeling="hf",
    )  # fmt: skip
    numel = (V + s + 2) * h + 2 * h + L * (12 * h * h + 13 * h) + (h * h + h) + (h + 1) * 2
    assert t.parameters == numel == unique_parameters("bert", L, h, s, V, modeling="hf")
    assert t.provenance["inputs"]["modeling"] == "hf"
    mega = transformer_trace(
        "bert", name="x", layers=L, hidden=h, heads=4, seq_len=s, vocab=V, microbatch_size=2,
        gpu=preset_gpu("dgx1-v100-16gb"),
    )  # fmt: skip
    assert "modeling" not in mega.provenance["inputs"]
    assert t.layers[1].fwd_s > mega.layers[1].fwd_s  # the unfused steps take time


@pytest.mark.parametrize("kw", [{"modeling": "fused"}, {"modeling": "hf", "efficiency": 0.5}])
def test_bad_modeling(kw: dict) -> None:
    with pytest.raises(ValueError, match="modeling"):
        transformer_trace(
            "bert", name="x", layers=1, hidden=8, heads=2, seq_len=4, vocab=10,
            microbatch_size=1, gpu=preset_gpu("dgx1-v100-16gb"), **kw,
        )  # fmt: skip


def test_patrickstar_gradient_hooks_by_hand() -> None:
    """zeros_like (2 B), grad += new (6), float() (6), sum (4), the copy into the chunk (4), once
    per step: 1e9 parameters at 1 TB/s: 1e9 * 22 / 1e12 s, whatever the micro-batches; plus the
    host's blocking read per parameter tensor."""
    from types import SimpleNamespace

    from sim.memory.chunk_step import GRAD_HOOK_BYTES, GRAD_ZERO_BYTES, grad_hooks_s

    assert (GRAD_ZERO_BYTES, GRAD_HOOK_BYTES) == (2, 6 + 6 + 4 + 4)
    from sim.hardware.host_ops import NO_HOST, HostOverhead

    def ctx(overhead: HostOverhead) -> SimpleNamespace:
        host = SimpleNamespace(overhead=overhead)
        topology = SimpleNamespace(host=lambda name: host)
        return SimpleNamespace(
            params=1e9,
            microbatches=2,
            param_tensors=100.0,
            topology=topology,
            host="cpu0",
            layers=(),
            dtype_bytes=2,
        )

    assert grad_hooks_s(ctx(NO_HOST), 1e12) == pytest.approx(0.022)  # type: ignore[arg-type]
    # 100 blocking reads, each one op issued (8 us) and the read (10 us) while the device idles
    over = HostOverhead(op_s=9.8e-6, nograd_op_s=8e-6, read_s=10e-6)
    assert grad_hooks_s(ctx(over), 1e12) == pytest.approx(0.022 + 100 * 18e-6)  # type: ignore[arg-type]
