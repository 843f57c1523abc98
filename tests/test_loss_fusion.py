"""Megatron's fused cross-entropy losses (sim.compute.loss_fusion): bytes per pass over a
hand-counted 4 x 8 logits, the flags that select them reaching the decoder's head, the GPT
trace timing the loss it records, and the host ops each loss issues."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim.compute.decoder import layer_kernels
from sim.compute.decoder_shape import DecoderShape
from sim.compute.layers import cross_entropy_kernels
from sim.compute.megatron_ops import head_ops
from sim.compute.routing import Routing
from sim.hardware.gpu_compute import ComputeSpec
from sim.hardware.loader import load_hardware
from sim.memory.layer_work import WorkOptions, decoder_work
from sim.parallel.layout import ParallelLayout
from sim.parallel.shard import shard_trace
from sim.runs.decoder_express import decoder_shape
from sim.runs.megatron_args import read_megatron
from sim.trace.decoder import decoder_trace
from sim.trace.generator import transformer_trace
from sim.trace.schema import Trace


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


TINY = ComputeSpec("tiny", 1e15, 1e14, 1e12, 100, 0.5, 0.5, hbm_efficiency=1.0,
                   kernel_overhead_s=1e-6)  # fmt: skip
"""A GPU whose memory-bound kernel takes 1 us + bytes / 1e12 B/s."""


def _gpt(fusion: str) -> Trace:
    return transformer_trace("gpt", name="g", layers=1, hidden=8, heads=2, seq_len=4, vocab=8,
                             microbatch_size=1, dtype="bf16", gpu=TINY,
                             cross_entropy_fusion=fusion)  # fmt: skip


def test_gpt_trace_times_the_fused_loss_it_records():
    """GPT trace, b = 1, s = 4, V = 8, bf16, on TINY: the head with TE's loss against the
    unfused one differs by the loss's passes only.

    One rank (N = 32): forward 64 + 48 + 128 = 240 bytes in 2 kernels against 1216 in 6
    (test above): -976 B and -4 kernels; backward (input) 128 in 1 against 256 + 192 in 2.
    Two tensor ranks (V/2 = 4, N = 16): forward 32 + 48 + 64 = 144 in 2 against
    16 x (6 + 4 + 8 + 8 + 4 + 8) = 608 in 6; backward 64 against 128 + 96 = 224."""
    te, plain = _gpt("te").layers[-1], _gpt("unfused").layers[-1]
    us = 1e-6
    assert te.fwd_s - plain.fwd_s == pytest.approx(-976e-12 - 4 * us, abs=1e-15)
    assert te.bwd_input_s - plain.bwd_input_s == pytest.approx(-320e-12 - us, abs=1e-15)
    assert te.bwd_weight_s == pytest.approx(plain.bwd_weight_s, abs=1e-15)
    te2, plain2 = (shard_trace(_gpt(f), 2, False, TINY).trace.layers[-1] for f in ("te", "unfused"))
    assert te2.fwd_s - plain2.fwd_s == pytest.approx(-464e-12 - 4 * us, abs=1e-15)
    assert te2.bwd_input_s - plain2.bwd_input_s == pytest.approx(-160e-12 - us, abs=1e-15)


def test_fused_losses_issue_fewer_host_ops_on_both_paths():
    """Counted from the code (sim.compute.loss_fusion.LOSS_OPS' lines): Megatron-LM's unfused
    loss issues forward 2 (cast, max) + 3 all-reduces + 8 + 6 + 7 = 26 ops and backward
    5 + 3 + 2 + 1 (the engine's cast) = 11; native three compiled calls + 2 all-reduces = 5 and
    one compiled call; TE as_strided + 3 zeros + clamp + view + 2 launches + detach = 9 and
    tensor + equal + clone + launch = 4. So a head with native issues 21 + 10 fewer ops per
    micro-batch, with TE 17 + 7 fewer, on the GPT trace and on the decoder trace alike."""
    plain, native, te = (head_ops("gpt", f) for f in ("unfused", "native", "te"))
    assert (plain[0] - native[0], plain[1] - native[1]) == (21, 10)
    assert (plain[0] - te[0], plain[1] - te[1]) == (17, 7)
    dec = DecoderShape(1, 8, 2, 4, 8, 32, cross_entropy_fusion="te")
    head = decoder_trace(dec, name="d", microbatch_size=1, gpu=TINY).layers[-1]
    gpt = _gpt("te").layers[-1]
    assert (head.fwd_ops, head.bwd_ops) == (gpt.fwd_ops, gpt.bwd_ops) == te
    with pytest.raises(ValueError, match="cross_entropy_fusion"):
        head_ops("gpt", "liger")


def test_the_losss_collectives_follow_its_fusion_and_count_their_host_ops_once():
    """GPT trace, b = 1, s = 4 (4 tokens), two tensor ranks, no sequence parallelism.

    Forward collectives of the head: unfused three all-reduces of 4 fp32 (16 B each;
    Megatron-LM cross_entropy.py 130-150), native two of 16 and 32 B (the max; the target
    logits concatenated with the sums, fused_cross_entropy.py 42, 94, 112), TE one all-gather
    of 3 floats per token from each of 2 ranks, 4 x 3 x 4 x 2 = 96 B (TE cross_entropy.py
    78-82). The all-reduces are already among the head's own ops at one rank (head_ops:
    34, 13 forward), so the sharded head adds none of them; TE's all-gather adds its buffer's
    zeros and its call: 17 + 2 = 19. Backward: the output layer's input all-reduce, +1 each:
    20 + 1, 10 + 1, 13 + 1."""
    heads = {f: shard_trace(_gpt(f), 2, False, TINY) for f in ("unfused", "native", "te")}
    fwd = {f: [(op.kind, op.nbytes) for op in sh.comm[-1].fwd] for f, sh in heads.items()}
    assert fwd == {
        "unfused": [("allreduce", 16.0)] * 3,
        "native": [("allreduce", 16.0), ("allreduce", 32.0)],
        "te": [("all_gather", 96.0)],
    }
    ops = {f: (sh.trace.layers[-1].fwd_ops, sh.trace.layers[-1].bwd_ops) for f, sh in heads.items()}
    assert ops == {"unfused": (34, 21), "native": (13, 11), "te": (19, 14)}
