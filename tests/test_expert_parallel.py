"""Expert and context parallelism: all-to-all bytes per pair and time on the topology, expert
rows per rank, expert weights' share of memory, ring attention's exchange (sim/parallel/expert.py,
context.py, decoder_shard.py; sim/comm/alltoall.py, groups.py)."""

from __future__ import annotations

import pytest

from sim.comm import nccl
from sim.comm.alltoall import (
    alltoall_time_s,
    even_pairs,
    link_load_time_s,
    link_loads,
    table_time_s,
)
from sim.compute.decoder import DecoderShape
from sim.compute.moe_shape import PROB_BYTES, MoEShape
from sim.compute.routing import Routing
from sim.compute.ssm import MambaShape
from sim.engine.groups import group_members, op_cost
from sim.hardware.loader import load_hardware
from sim.parallel.context import AttentionDims, context_comm
from sim.parallel.decoder_shard import shard_decoder
from sim.parallel.expert import expert_plan
from sim.parallel.layout import ParallelLayout
from sim.parallel.ops import GroupOp
from sim.trace.decoder import decoder_trace

H100 = load_hardware("dgx-h100")
NVS_NCCL = 18 * 20.6e9  # NCCL's rate per H100 to the NVSwitch (preset: 18 x 20.6 GB/s)
MOE = MoEShape(4096, 8, 2, 14336)


def test_dispatch_bytes_per_pair_balanced():
    # r = 4096 tokens per rank, k = 2, 8 experts on 4 ranks (2 each): every rank sends each other
    # rank r*k*2/8 = 2048 rows of h*d bytes plus their fp32 probabilities
    plan = expert_plan(MOE, Routing(), 4096, 4, 1, 2)
    rows = 4096 * 2 * 2 / 8
    assert plan.dispatch[0][1] == rows * (4096 * 2 + PROB_BYTES)
    assert plan.combine[1][0] == rows * 4096 * 2
    assert all(plan.dispatch[i][i] == 0 for i in range(4))
    # each rank's 2 experts compute the rows of all 4 sources: 4 * 4096 * 2 / 8 each
    assert plan.rows == ((4096.0, 4096.0),) * 4


def test_imbalanced_routing_loads_the_hot_experts_rank():
    # the hottest expert (0, on rank 0) gets 3x its share: rank 0 receives more from everyone
    plan = expert_plan(MOE, Routing("imbalance", imbalance=3.0), 1000, 4, 1, 2)
    assert plan.busiest == 0
    assert plan.dispatch[1][0] > plan.dispatch[1][2] == plan.dispatch[1][3]
    shares = Routing("imbalance", imbalance=3.0).loads(8)
    assert sum(plan.rows[0]) == pytest.approx(4 * 1000 * 2 * (shares[0] + shares[1]))


def test_balanced_alltoall_time_on_one_nvswitch():
    # nccl-tests' buffer of B bytes per rank, B/8 to each rank (itself included): each GPU's
    # uplink carries 7/8 B at NCCL's rate, plus the route's latency (GPU -> NVSwitch -> GPU)
    gpus = tuple(f"gpu{i}" for i in range(8))
    nbytes = 64e6
    t = alltoall_time_s(H100, gpus, even_pairs(8, nbytes * 7 / 8), link_load_time_s)
    assert t == pytest.approx(nbytes * 7 / 8 / NVS_NCCL + 10e-6)
    # nccl-tests' busbw = algbw * (n-1)/n equals the per-GPU rate
    assert nbytes / (t - 10e-6) * 7 / 8 == pytest.approx(NVS_NCCL)


def test_alltoall_as_nccl_sends_takes_nccls_protocol_latency_and_ll_rate():
    # H100s run NCCL: each pair is a send, Simple above 16 KiB (latency: one ring step of
    # Simple on NVLink, NCCL tuning.cc), LL at or below it (a third of the rate)
    gpus = tuple(f"gpu{i}" for i in range(8))
    simple = (
        nccl.BASE_LAT_US[(nccl.RING, nccl.SIMPLE)]
        + nccl.HW_LAT_US[nccl.NVLINK][(nccl.RING, nccl.SIMPLE)]
    )
    ll = nccl.BASE_LAT_US[(nccl.RING, nccl.LL)] + nccl.HW_LAT_US[nccl.NVLINK][(nccl.RING, nccl.LL)]
    big = alltoall_time_s(H100, gpus, even_pairs(8, 7 * 1e6))  # 1 MB per pair
    assert big == pytest.approx(7e6 / NVS_NCCL + simple * 1e-6)
    small = alltoall_time_s(H100, gpus, even_pairs(8, 7 * 8192))  # 8 KiB per pair: LL
    assert small == pytest.approx(3 * 7 * 8192 / NVS_NCCL + ll * 1e-6)


def test_alltoall_counts_every_link_not_an_average():
    # one hot receiver: everyone sends 8 MB to gpu0, nothing else moves: gpu0's downlink
    # carries 7 x 8 MB while the others' downlinks idle
    gpus = tuple(f"gpu{i}" for i in range(8))
    pairs = tuple(tuple(8e6 if (j == 0 and i != 0) else 0.0 for j in range(8)) for i in range(8))
    loads = link_loads(H100, gpus, pairs)
    assert loads["nvswitch->gpu0"] == 7 * 8e6
    assert loads["gpu3->nvswitch"] == 8e6
    t = alltoall_time_s(H100, gpus, pairs, link_load_time_s)
    assert t == pytest.approx(7 * 8e6 / NVS_NCCL + 10e-6)
    # the same bytes spread evenly take 1/7 of the drain time
    even = alltoall_time_s(H100, gpus, even_pairs(8, 8e6), link_load_time_s)
    assert even < t / 5


def test_cross_server_alltoall_funnels_through_the_nics():
    topo = load_hardware("2x-dgx-h100")
    gpus = tuple(f"gpu{i}" for i in range(16))
    nbytes = 150e6  # per rank, 10 MB to each of the 15 others
    loads = link_loads(topo, gpus, even_pairs(16, nbytes))
    # gpu0's NIC carries its traffic to the 8 GPUs of the other server; its NVSwitch uplink
    # its traffic to the 7 of its own
    nic = next(k for k in loads if k.startswith("gpu0->leaf"))
    assert loads[nic] == pytest.approx(8 * 10e6)
    assert loads["gpu0->nvswitch"] == pytest.approx(7 * 10e6)
    nic_rate = next(lk for lk in topo.links if lk.name == nic).rate_Bps(True)
    t = alltoall_time_s(topo, gpus, even_pairs(16, nbytes))
    assert t >= 8 * 10e6 / nic_rate  # the NICs, not NVLink, set the pace


def test_groups_are_consecutive_replicas():
    assert group_members(5, 4) == (4, 5, 6, 7)
    assert group_members(2, 2) == (2, 3)


def test_ring_exchange_hides_under_attention():
    gpus = ("gpu0", "gpu1", "gpu2", "gpu3")
    op = GroupOp("cp", "ring", 50e6, 3, hidden_s=1e-4)
    _, step, exposed = op_cost(H100, gpus, op)
    assert step == pytest.approx(50e6 / NVS_NCCL + 10e-6)
    assert exposed == pytest.approx(step - 1e-4)
    hidden = GroupOp("cp", "ring", 50e6, 3, hidden_s=1.0)
    assert op_cost(H100, gpus, hidden)[2] == 0.0


def test_ring_attention_sends_kv_chunks():
    dims = AttentionDims(q=4096, k=1024, v=1024, o=4096, heads=32)
    cc = context_comm(dims, 8192, 4, 2, "p2p")
    kv = 8192 * 2048 * 2
    assert cc.fwd == (("ring", kv, 3),)
    # TE's backward: KV at step 0, KV and dKV at steps 1-2, dKV alone at step 3
    assert cc.bwd == (("ring", kv, 1), ("ring", 2 * kv, 2), ("ring", kv, 1))
    ag = context_comm(dims, 8192, 4, 2, "all_gather")
    assert ag.fwd == (("all_gather", 4 * kv, 1),)
    a2a = context_comm(dims, 8192, 4, 2, "a2a")
    q, k, o = (("alltoall", 8192 * w * 2 * 3 / 4, 1) for w in (4096, 1024, 4096))
    assert a2a.fwd == (q, k, k, o)  # one all-to-all per tensor, as TE issues them
    assert a2a.bwd == (o, q, k, k)


def test_ring_backward_at_cp2_exposes_two_kv_hops_each_past_its_step():
    # cp = 2, 8192 tokens a rank, K and V 1024 wide, bf16: kv = 8192 * 2048 * 2 = 33,554,432 B.
    # TE's backward sends KV beside step 0 and dKV beside step 1 (the last, diagonal step),
    # waiting for each after its step: a hop is kv / 370.8 GB/s + 10 us = 100.49 us; with
    # 60 us of attention a step, each exposes 40.49 us, 80.98 us in all (one 2*kv hop
    # beside one step would expose 190.98 - 60 = 130.98 us).
    cc = context_comm(AttentionDims(q=4096, k=1024, v=1024, o=4096, heads=32), 8192, 2, 2, "p2p")
    kv = 8192 * 2048 * 2
    assert cc.bwd == (("ring", kv, 1), ("ring", kv, 1))
    gpus = ("gpu0", "gpu1")
    ops = [GroupOp("cp", c, nb, n, hidden_s=60e-6) for c, nb, n in cc.bwd]
    exposed = sum(op.count * op_cost(H100, gpus, op)[2] for op in ops)
    hop = kv / NVS_NCCL + 10e-6
    assert hop == pytest.approx(100.49e-6, abs=0.01e-6)
    assert exposed == pytest.approx(2 * (hop - 60e-6)) == pytest.approx(80.98e-6, abs=0.02e-6)


def test_expert_weights_split_over_ep_and_dense_weights_kept():
    m = DecoderShape(2, 4096, 32, 1024, 32000, 14336, kv_heads=8, moe=MOE)
    gpu = H100.gpus[0].compute
    trace = decoder_trace(m, name="mix2", microbatch_size=1, gpu=gpu)
    shard = shard_decoder(trace, ParallelLayout(dp_replicate=4, ep=4), gpu)
    blk, blk4 = trace.layers[1], shard.trace.layers[1]
    expert = 8 * 3 * 4096 * 14336 * 2
    assert blk.param_bytes - blk4.param_bytes == pytest.approx(expert * 3 / 4)
    assert shard.expert_bytes[1] == pytest.approx(expert / 4)
    assert shard.expert_bytes[0] == 0.0  # embedding
    # balanced routing, EP 4: each rank's 2 experts compute as many rows (4 sources x T*k/8
    # each) as the 8 experts of one GPU (T*k/8 each): the same FLOPs, in fewer, larger GEMMs
    assert blk4.flops == pytest.approx(blk.flops, rel=1e-12)
    assert blk4.fwd_s < blk.fwd_s
    fwd, bwd = shard.group[1]
    # dropless: the token counts are all-gathered (E int64 per rank) before the dispatch
    assert [op.kind for op in fwd] == ["all_gather", "alltoall", "alltoall"]
    assert fwd[0].nbytes == 8 * 8 * 4
    assert [op.kind for op in bwd] == ["alltoall", "alltoall"]


def test_tensor_parallel_moe_needs_sequence_parallelism():
    m = DecoderShape(2, 4096, 32, 1024, 32000, 14336, kv_heads=8, moe=MOE)
    gpu = H100.gpus[0].compute
    trace = decoder_trace(m, name="mix2", microbatch_size=1, gpu=gpu)
    with pytest.raises(ValueError, match="sequence_parallel"):
        shard_decoder(trace, ParallelLayout(tp=2), gpu)
    with pytest.raises(ValueError, match="divide the 8 experts"):
        shard_decoder(trace, ParallelLayout(ep=3), gpu)


def test_measured_alltoall_table_times_the_busiest_member():
    # dgx-b200 carries SimuMax's measured all-to-all (b200_bf16_ceperm.json all2all: 900 GiB/s x
    # 0.5968, 7.3039 us per peer, no fixed part at 8 ranks). Balanced, 8 ranks, 8 MiB to each
    # peer: nccl-tests' B = 56 MiB x 8/7 = 64 MiB, 56 MiB / 576.73 GB/s + 7 x 7.3039 us. A
    # member receiving 8x as much from each peer (448 MiB) sets the time: 448 MiB / 576.73 GB/s
    # + the same latency
    topo = load_hardware("dgx-b200")
    gpus = tuple(f"gpu{i}" for i in range(8))
    rate, latency = 900 * 2**30 * 0.5968, 7 * 7.3039e-6
    pairs = even_pairs(8, 56 * 2**20)
    assert table_time_s(topo, gpus, pairs) == pytest.approx(56 * 2**20 / rate + latency, rel=1e-3)
    assert alltoall_time_s(topo, gpus, pairs) == table_time_s(topo, gpus, pairs)
    hot = [list(row) for row in pairs]
    for i in range(1, 8):
        hot[i][0] *= 8
    assert table_time_s(topo, gpus, hot) == pytest.approx(448 * 2**20 / rate + latency, rel=1e-3)
    assert table_time_s(load_hardware("dgx-h100"), gpus, pairs) is None  # no table: the model


def test_hybrid_moe_layers_dispatch_and_combine_over_ep():
    """A hybrid model's ``E`` layers (Nemotron 3) route tokens like a MoE block: with EP 4 each
    sends every other rank r*k/E rows for each expert it holds there (the same bytes as
    :func:`test_dispatch_bytes_per_pair_balanced`), and its Mamba and attention layers send
    none (Megatron-Core builds an ``E`` layer as a ``MoETransformerLayer`` with the MoE spec
    and its token dispatcher: NVIDIA/Megatron-LM@d98e8a64
    ``megatron/core/models/hybrid/hybrid_layer_specs.py`` 63-66 and 226-229,
    ``hybrid_block.py`` 184-186)."""
    m = DecoderShape(3, 4096, 32, 1024, 32000, 14336, kv_heads=8, moe=MOE, pattern="ME*",
                     mamba=MambaShape(128, 64, 128, 8, 4, 128))  # fmt: skip
    gpu = H100.gpus[0].compute
    trace = decoder_trace(m, name="hyb", microbatch_size=1, gpu=gpu)
    shard = shard_decoder(trace, ParallelLayout(dp_replicate=4, ep=4), gpu)
    names = [x.name for x in trace.layers]
    group = dict(zip(names, shard.group, strict=True))
    fwd, bwd = group["moe.1"]
    assert [op.kind for op in fwd] == ["all_gather", "alltoall", "alltoall"]
    assert [op.kind for op in bwd] == ["alltoall", "alltoall"]
    rows = 1024 * 2 * 2 / 8  # r = 1024 tokens per rank
    assert fwd[1].pairs[0][1] == rows * (4096 * 2 + PROB_BYTES)
    assert group["mamba.0"] == ((), ()) and group["attention.2"] == ((), ())
