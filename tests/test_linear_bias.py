"""The QKV bias added by its own kernel (sim.compute.linear_bias): PyTorch < 1.12's F.linear."""

import pytest

from sim.compute.block_shape import BlockShape
from sim.compute.kernels import kernel_time_s
from sim.compute.linear_bias import check_linear_bias, qkv_bias_add
from sim.compute.transformer import block_bwd, block_fwd
from sim.hardware.gpu_compute import ComputeSpec
from sim.trace.generator import transformer_trace
from sim.trace.loader import load_trace
from sim.trace.shipped import SC21_DROPOUT_ADD, SC21_LINEAR_BIAS

A100 = ComputeSpec("A100", 312e12, 19.5e12, 2.0e12, 108, 0.86, 0.6, 0.85)


def test_bytes_are_one_read_and_one_write_of_the_output():
    # 4 tokens x 6 columns of fp16: read 48 B, write 48 B
    assert qkv_bias_add(4, 6, 2).bytes == 96.0
    assert qkv_bias_add(4, 6, 2).kind == "mem"


def test_forward_gains_the_add_after_the_qkv_gemm_split_by_tp():
    # h = 64, a = 4, s = 8, b = 2, t = 2: the rank's QKV output is 16 tokens x 3*64/2 columns
    shape = BlockShape(64, 4, 8, 256, unfused_qkv_bias=True)
    names = [k.name for k in block_fwd(shape, 2, 2, tp=2)]
    assert names[names.index("qkv") + 1] == "qkv_bias_add"
    add = next(k for k in block_fwd(shape, 2, 2, tp=2) if k.name == "qkv_bias_add")
    assert add.bytes == 2 * 16 * 96 * 2
    plain = BlockShape(64, 4, 8, 256)
    assert "qkv_bias_add" not in [k.name for k in block_fwd(plain, 2, 2)]
    # the backward is the same on both paths (module doc)
    assert [k.name for k in sum(block_bwd(shape, 2, 2), [])] == [
        k.name for k in sum(block_bwd(plain, 2, 2), [])
    ]


def test_trace_records_it_and_times_the_block_slower_by_the_kernel():
    kw = dict(name="g", layers=1, hidden=256, heads=4, seq_len=128, vocab=512,
              microbatch_size=2, dtype="fp16", gpu=A100)  # fmt: skip
    fused = transformer_trace("gpt", **kw)
    unfused = transformer_trace("gpt", linear_bias="unfused", **kw)
    assert unfused.provenance["inputs"]["linear_bias"] == "unfused"
    assert "linear_bias" not in fused.provenance["inputs"]
    extra = kernel_time_s(qkv_bias_add(256, 768, 2), A100, "fp16")
    assert unfused.layers[1].fwd_s - fused.layers[1].fwd_s == pytest.approx(extra)


def test_unknown_value_is_refused():
    with pytest.raises(ValueError, match="linear_bias"):
        check_linear_bias("epilogue")


def test_shipped_sc21_traces_run_the_2021_block():
    # the SC'21 runs' PyTorch 1.8: QKV bias unfused, TorchScript bias-dropout-add fused; the
    # shipped traces record both, as measured_sc21 builds them
    inputs = load_trace("gpt-sc21-1.7b").provenance["inputs"]
    assert (SC21_LINEAR_BIAS, SC21_DROPOUT_ADD) == ("unfused", "fused")
    assert (inputs["linear_bias"], inputs["dropout_add"]) == ("unfused", "fused")
