"""One host op per tensor-parallel collective on the decoder path, as on the GPT and T5 paths
(sim.parallel.megatron.with_comm_ops): Transformer Engine's linear layers issue one
torch.distributed call per all-gather, reduce-scatter or all-reduce, none on one rank
(NVIDIA/TransformerEngine@d0067d0d pytorch/module/linear.py 407-412, 569-577)."""

from __future__ import annotations

import pytest

from sim.compute.decoder_shape import DecoderShape
from sim.hardware.gpu_compute import ComputeSpec
from sim.parallel.decoder_shard import shard_decoder
from sim.parallel.layout import ParallelLayout
from sim.trace.decoder import decoder_trace

TINY = ComputeSpec("tiny", 1e15, 1e14, 1e12, 100, 0.5, 0.5)


@pytest.mark.parametrize(
    ("sp", "regather", "block", "head"),
    [
        # sp: AG + RS around the attention and the MLP each way (regather: +1 AG backward per
        # column-parallel layer); the head AG forward, RS backward; the embedding's RS
        # forward; the unfused loss's all-reduces 0 (its own count holds them)
        (True, False, (4, 4), (1, 1)),
        (True, True, (4, 6), (1, 2)),
        # no sp: one all-reduce per half each way; the head's input all-reduce backward
        (False, False, (2, 2), (0, 1)),
    ],
)
def test_a_decoder_rank_adds_one_host_op_per_tensor_parallel_collective(sp, regather, block, head):
    """A dense 2-layer decoder on 2 tensor ranks against its one-GPU trace: each layer's
    (forward, backward) ops grow by its collectives' count, hand-counted from Megatron's
    block (Shoeybi et al. §3; Korthikanti et al. §4.2.2)."""
    m = DecoderShape(2, 64, 4, 16, 128, 128)
    one = decoder_trace(m, name="d", microbatch_size=1, gpu=TINY)
    par = ParallelLayout(tp=2, sp=sp)
    rank = shard_decoder(one, par, TINY, regather=regather).trace
    grow = {
        x.name: (y.fwd_ops - x.fwd_ops, y.bwd_ops - x.bwd_ops)
        for x, y in zip(one.layers, rank.layers, strict=True)
    }
    assert grow == {"embedding": (1, 0), "block.0": block, "block.1": block, "head": head}
