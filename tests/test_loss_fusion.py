"""Megatron's fused cross-entropy losses (sim.compute.loss_fusion): bytes per pass over a
hand-counted 4 x 8 logits, and the flags that select them reaching the decoder's head."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim.compute.decoder import layer_kernels
from sim.compute.decoder_shape import DecoderShape
from sim.compute.layers import cross_entropy_kernels
from sim.compute.routing import Routing
from sim.hardware.loader import load_hardware
from sim.memory.layer_work import WorkOptions, decoder_work
from sim.parallel.layout import ParallelLayout
from sim.runs.express import decoder_shape
from sim.runs.megatron_args import read_megatron
from sim.trace.decoder import decoder_trace


def _bytes(kernels):
    return [k.bytes for k in kernels]


def test_fused_losses_bytes_per_pass_on_4_tokens_by_8_logits():
    """t = 4, V = 8, bf16 (d = 2): N = 32 logits.

    native: max with the fp32 copy 32 x (2 + 4) = 192, sub/exp/sum 32 x 8 = 256, div_ 256;
    backward: fp32 softmax read, written back, bf16 gradient written: 32 x (4 + 4 + 2) = 320.
    te: online softmax reads 32 x 2 = 64 and writes 3 floats per token (48): 112; the loss
    kernel reads and overwrites the logits, 2 x 64 = 128; backward mul in place: 128.
    unfused (for scale): 192 + 128 + 256 + 256 + 128 + 256 = 1216 and 256 + 192 = 448."""
    fwd, bwd = cross_entropy_kernels(4, 8, 2, "native")
    assert (_bytes(fwd), _bytes(bwd)) == ([192, 256, 256], [320])
    fwd, bwd = cross_entropy_kernels(4, 8, 2, "te")
    assert (_bytes(fwd), _bytes(bwd)) == ([112, 128], [128])
    fwd, bwd = cross_entropy_kernels(4, 8, 2)
    assert (sum(_bytes(fwd)), sum(_bytes(bwd))) == (1216, 448)
    fwd, _ = cross_entropy_kernels(4, 8, 4, "native")  # fp32 logits: .float() is no copy
    assert _bytes(fwd)[0] == 128
    with pytest.raises(ValueError, match="cross_entropy_fusion"):
        cross_entropy_kernels(4, 8, 2, "liger")


def test_loss_fusion_flags_reach_the_decoder_head():
    """--cross-entropy-loss-fusion with --cross-entropy-fusion-impl te: the shape's
    ``cross_entropy_fusion`` is te and the head runs TE's three passes; without the impl,
    Megatron's default native."""
    flags = {"num-layers": 2, "hidden-size": 64, "num-attention-heads": 4, "seq-length": 16,
             "micro-batch-size": 1, "global-batch-size": 8, "bf16": True, "vocab-size": 256,
             "cross-entropy-loss-fusion": True}  # fmt: skip
    run = read_megatron(flags | {"cross-entropy-fusion-impl": "te"}, name="t", source="<t>",
                        num_gpus=8, gpu="B200")  # fmt: skip
    shape = decoder_shape(run.shape, 16, "flash")
    assert shape.cross_entropy_fusion == "te"
    assert DecoderShape.from_dict(shape.to_dict()).cross_entropy_fusion == "te"
    fwd, bwd, _ = layer_kernels("head", shape, 1, 2)
    assert [k.name for k in fwd if k.name.startswith("ce_")] == ["ce_online_softmax",
                                                                  "ce_loss_grad"]  # fmt: skip
    assert any(k.name == "ce_grad_mul" and k.bytes == 2 * 16 * 256 * 2 for k in bwd)
    run = read_megatron(flags, name="t", source="<t>", num_gpus=8, gpu="B200")
    assert decoder_shape(run.shape, 16, "flash").cross_entropy_fusion == "native"
    with pytest.raises(ValueError, match="cross_entropy_fusion"):
        DecoderShape(2, 64, 4, 16, 256, 256, cross_entropy_fusion="fused")


def test_one_shape_field_sets_the_heads_time_and_its_memory():
    """DecoderShape.cross_entropy_fusion = te, t = 16 tokens, V = 256, bf16: the head's
    forward runs TE's passes (online softmax 16 x 256 x 2 + 12 x 16 = 8384 bytes) and the
    memory model keeps the 16-bit logits instead of the fp32 softmax, (4 - 2) x 16 x 256 =
    8192 bytes less stash than the unfused shape's head; nothing under ``memory:``."""
    plain = DecoderShape(2, 64, 4, 16, 256, 256)
    te = replace(plain, cross_entropy_fusion="te")
    fwd, _, _ = layer_kernels("head", te, 1, 2)
    assert [k.bytes for k in fwd if k.name == "ce_online_softmax"] == [8384]
    gpu = load_hardware("dgx-h100").gpus[0].compute
    lay = ParallelLayout(pp=1, dp_replicate=1)
    works = []
    for shape in (plain, te):
        trace = decoder_trace(shape, name="m", microbatch_size=1, gpu=gpu)
        head = [x.name for x in trace.layers].index("head")
        works.append((trace.layers[head].act_bytes, decoder_work(trace, lay, Routing(),
                                                                  WorkOptions())[head]))  # fmt: skip
    (act, unfused), (_, fused) = works
    assert unfused.stash_bytes is None
    assert fused.stash_bytes == act - 8192
