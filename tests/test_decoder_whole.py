"""Decoder parameters every tensor rank keeps whole (:mod:`sim.parallel.decoder_whole`): hand
counts of the norms, QK-norms, router, MLA down projections and row-parallel bias that
Megatron-Core and torchtitan do not split over ``t``."""

from __future__ import annotations

from sim.compute.decoder import DecoderShape
from sim.compute.mla import MLAShape
from sim.compute.moe_shape import MoEShape
from sim.hardware.loader import load_hardware
from sim.parallel.decoder_shard import shard_decoder
from sim.parallel.decoder_whole import whole_params
from sim.parallel.layout import ParallelLayout
from sim.trace.decoder import decoder_trace

H100 = load_hardware("dgx-h100").gpus[0].compute
# h = 8, 2 heads of 4, 2 KV heads, SwiGLU f = 16, V = 32, Qwen3's QK-norm
QWEN = DecoderShape(1, 8, 2, 4, vocab=32, ffn_hidden=16, head_dim=4, qk_norm=True)


def test_dense_block_keeps_its_norms_and_qk_norms_whole_on_each_tensor_rank():
    """Block: QKV 8 x (2 + 2 + 2) x 4 = 192, O 64, QK-norms 2 x 4, two norms 2 x 8, MLP
    3 x 8 x 16 = 384: 664, of which 8 + 16 = 24 whole. At t = 2 a rank holds
    (664 - 24) / 2 + 24 = 344 (x 2 B); the head 32 x 8 / 2 + its final norm 8 = 136."""
    trace = decoder_trace(QWEN, name="q", microbatch_size=1, gpu=H100)
    rank = shard_decoder(trace, ParallelLayout(tp=2), H100).trace
    by = {x.name.split(".")[0]: x.param_bytes for x in rank.layers}
    assert by["block"] == 344 * 2
    assert by["head"] == 136 * 2


def test_router_and_moe_norm_whole():
    """A MoE layer (no attention) keeps its pre-norm h and router E x h whole:
    h = 256, E = 8: 256 + 2048."""
    m = DecoderShape(2, 256, 4, 128, 1024, 512, pattern="*E",
                     moe=MoEShape(256, 8, 2, 128))  # fmt: skip
    assert whole_params("moe", m) == 256 + 8 * 256


def test_mla_keeps_its_down_projections_and_latent_norms_whole():
    """MLA h = 8, q_lora 16, kv_lora 8, d_rope 2: input norm 8, q down 8 x 16 and its norm 16,
    kv down 8 x (8 + 2) and its norm 8: 8 + 144 + 80 + 8 = 240, plus the pre-MLP norm 8."""
    m = DecoderShape(1, 8, 2, 4, vocab=32, ffn_hidden=16, mla=MLAShape(16, 8, 4, 2, 4))
    assert whole_params("attention", m) == 240
    assert whole_params("block", m) == 248


def test_mtp_mamba_head_and_embedding():
    """MTP depth: enorm, hnorm, final norm 3h plus its block's 2h (+ QK-norms 2 x 4);
    Mamba: its pre-norm h; head: the final norm h; embedding: nothing."""
    assert whole_params("mtp", QWEN) == 24 + 24
    assert whole_params("mamba", QWEN) == 8
    assert whole_params("head", QWEN) == 8
    assert whole_params("embedding", QWEN) == 0


def test_tied_head_keeps_its_final_norm_whole():
    """Tied embeddings: the head layer holds only its final norm (h = 8), whole at t = 2."""
    tied = DecoderShape(1, 8, 2, 4, vocab=32, ffn_hidden=16, head_dim=4, tied_embeddings=True)
    trace = decoder_trace(tied, name="q", microbatch_size=1, gpu=H100)
    rank = shard_decoder(trace, ParallelLayout(tp=2), H100).trace
    assert next(x for x in rank.layers if x.name.startswith("head")).param_bytes == 8 * 2
