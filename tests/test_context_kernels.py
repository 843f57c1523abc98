"""The copies and merges Transformer Engine's context parallelism adds to an attention layer
(sim/parallel/context_kernels.py; TE v2.11 context_parallel.py), hand-counted."""

from __future__ import annotations

from sim.parallel.context import AttentionDims
from sim.parallel.context_kernels import context_kernels

# t = 16 tokens on the rank, 4 query heads of 8 (Q, O 32 wide), one KV head (K, V 8 wide), bf16
DIMS = AttentionDims(q=32, k=8, v=8, o=32, heads=4)
T, D = 16, 2
QB, KB, VB, OB = (T * w * D for w in (32, 8, 8, 32))  # 1024, 256, 256, 1024 bytes


def test_ulysses_copies_every_tensor_twice_on_each_side():
    # flash_attn_a2a_communicate (sbhd): movedim(-3, 0).contiguous() before the all-to-all and
    # index_select after it for Q, K, V (dO); index_select and movedim().contiguous() around O's
    # (dQ, dK, dV's); each copy reads and writes its tensor
    fwd, bwd = context_kernels(DIMS, T, 4, D, "a2a")
    assert len(fwd) == len(bwd) == 8
    assert sum(k.bytes for k in fwd) == 2 * 2 * (QB + KB + VB + OB) == 10240
    assert sum(k.bytes for k in bwd) == sum(k.bytes for k in fwd)


def test_ring_attention_merges_per_step():
    # cp = 3: forward packs K, V (2 x 512), initialises out from step 0 (2 x 1024), then per later
    # step corrects the fp32 log-sum-exps (3 x 16 x 4 heads x 4 B) and merges 3/4 of out
    # (3 x 1024 x 0.75); backward copies K, V into the ring buffer (2 x 512), copies step 0's
    # dQ, dK, dV (2 x 1536) and adds 3/4 of them at each later step (3 x 1536 x 0.75)
    fwd, bwd = context_kernels(DIMS, T, 3, D, "p2p")
    lse = 3 * T * 4 * 4
    assert sum(k.bytes for k in fwd) == 2 * 512 + 2 * 1024 + 2 * (lse + 3 * 1024 * 0.75)
    assert sum(k.bytes for k in bwd) == 2 * 512 + 2 * 1536 + 2 * 3 * 1536 * 0.75
    assert (len(fwd), len(bwd)) == (2 + 2 * 2, 4 + 2 * 3)
    assert context_kernels(DIMS, T, 1, D, "p2p") == ([], [])


def test_all_gather_reorders_the_gathered_chunks():
    # cp = 2 (4 chunks): forward index_selects the gathered K, V (2 x 2 x 512) and copies the two
    # output halves (read and write 2 x 1024); backward zeroes dK, dV (2 x 512), reorders K, V
    # again (2 x 2 x 512), copies dQ's halves (2 x 1024), adds the chunks' dK, dV over (1 + 4)/4
    # of the keys (3 x 2 x 512 x 5/4) and reorders dK, dV back (2 x 2 x 512)
    fwd, bwd = context_kernels(DIMS, T, 2, D, "all_gather")
    assert sum(k.bytes for k in fwd) == 2 * 2 * 512 + 2 * 1024
    assert sum(k.bytes for k in bwd) == (
        2 * 512 + 2 * 2 * 512 + 2 * 1024 + 3 * 2 * 512 * 5 / 4 + 2 * 2 * 512
    )
