"""The allocator model's MoE tensors (issue 27): one parameter, and so one pair of Adam moments,
per local expert and GEMM, as TE's GroupedLinear registers them (``weight0`` ...
``weight{n-1}``, NVIDIA/TransformerEngine@d0067d0d ``pytorch/module/grouped_linear.py``
1738-1753); a hybrid model's MoE layer itemized as a decoder block's MoE half. Hand-counted."""

from __future__ import annotations

from sim.compute.decoder_shape import DecoderShape
from sim.compute.moe_shape import MoEShape
from sim.memory.layer_work import decoder_block_work, hybrid_moe_work
from sim.parallel.layout import ParallelLayout

H, F, E, LAT = 64, 80, 8, 32


def test_each_local_expert_weight_is_its_own_parameter():
    m = DecoderShape(2, H, 4, 128, 1024, 4 * H, moe=MoEShape(H, E, 2, F))
    lay = ParallelLayout(ep=2, dp_replicate=2)
    work = decoder_block_work("moe_block", m, 1, 2, lay, (64.0,) * 4)
    experts = [w for w in work.weights if w in ((2 * F, H), (H, F))]
    assert len(experts) == 2 * E // 2  # fc1 and fc2 of each of the 4 local experts


def test_hybrid_moe_layer_is_itemized_at_the_latent_width():
    moe = MoEShape(H, E, 2, F, gated=False, latent=LAT)
    m = DecoderShape(2, H, 4, 128, 1024, 4 * H, moe=moe, gated_mlp=False)
    t, n = 128, 64.0 * 4  # tokens of one micro-batch; rows the rank's 4 experts receive
    work = hybrid_moe_work(m, 1, 2, ParallelLayout(ep=2, dp_replicate=2), (64.0,) * 4)
    assert work.weights == ((F, LAT), (LAT, F)) * 4 + ((LAT, H), (H, LAT))
    assert work.tensors == (t * H * 2, n * LAT * 2, n * F * 2, n * F * 2)
    assert work.fwd_bytes == (t * 2 + n) * LAT * 2  # permuted rows and those received
