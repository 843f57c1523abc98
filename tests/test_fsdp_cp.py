"""torchtitan's FSDP shards over ``dp_shard x cp`` (``resolve_fsdp_mesh``, torchtitan@b5bcd76
``torchtitan/distributed/fsdp.py`` 32-62): with context parallelism at ``dp_shard = 1`` too
(sim.framework.torchtitan.Torchtitan.runs_fsdp, sim.memory.fsdp, sim.engine.fsdp).

A tiny Llama-like decoder (2 blocks, h = 64, 4 heads, 2 KV heads, FFN 128, vocabulary 256,
untied) on GPUs joined pairwise by their own links, so a collective's links name its ranks.
"""

from __future__ import annotations

from dataclasses import replace

from helpers import chain_topology

from sim.compute.decoder import DecoderShape
from sim.config import parse_experiment
from sim.events import EventKind
from sim.framework import get_framework
from sim.hardware.loader import load_hardware
from sim.parallel.layout import ParallelLayout
from sim.point.config import PointConfig
from sim.point.simulate import evaluate, resolve
from sim.trace.decoder import decoder_trace

H, A, KV, F, V = 64, 4, 2, 128, 256
SHAPE = DecoderShape(layers=2, hidden=H, heads=A, seq_len=32, vocab=V, ffn_hidden=F, kv_heads=KV)
BLOCK = H * (H + 2 * (H // A * KV)) + H * H + 3 * H * F + 2 * H  # 36992: QKV, O, MLP, norms
EMBED, HEAD = V * H, V * H + H  # 16384; 16448 with the final norm
UNITS = (EMBED, BLOCK, BLOCK, HEAD)  # fully_shard units in forward order


def _run(w: int, cp: int, options: dict | None = None):
    h100 = load_hardware("dgx-h100").gpus[0].compute
    topo = chain_topology(w * cp, bandwidth_Bps=1e9, memory_bytes=1e12)
    topo = replace(topo, gpus=tuple(replace(g, compute=h100) for g in topo.gpus))
    exp = parse_experiment(
        {
            "name": "x",
            "hardware": "dgx-h100",
            "models": [{"name": "tiny", "trace": "tiny"}],
            "training": {"global_batch": w, "dtype": "bf16", "optimizer_step": False},
            "options": {"partition": "uniform", **(options or {})},
            "framework": "torchtitan",
        }
    )
    point = PointConfig(
        model="tiny",
        schedule="gpipe",
        stages=1,
        dp_width=w,
        dp_shard=1,
        context_parallel=cp,
        microbatch_size=1,
        microbatches=1,
        memory_policy="none",
        global_batch=w,
        framework="torchtitan",
    )
    trace = decoder_trace(SHAPE, name="tiny", microbatch_size=1, gpu=h100)
    res = resolve(exp, point, topo, trace)
    return res, evaluate(res)[1]


def _collectives(log, kind, gpu):
    return [
        (e.name.split()[-1], e.nbytes, e.links)
        for e in log.events
        if e.kind == kind and e.device == gpu and e.iteration == 0
    ]


def test_context_parallel_ranks_shard_at_dp_shard_one():
    # dp_shard 1, cp 2, one replica: the two context ranks (gpu0, gpu1) are the shard group.
    # States: 16 B per parameter over 2 ranks (fp32 parameter and gradient 4 B each, Adam
    # 8 B). Forward: each unit all-gathered in bf16 (2 B x its parameters over gpu0<->gpu1),
    # again before its backward except [norm, output] (kept: reshard False); after its
    # backward its fp32 gradients (4 B) reduce-scattered over the same pair; no all-reduce.
    res, log = _run(w=1, cp=2)
    plan = res.sim_input.plans[0][0]
    total = sum(UNITS)  # 106816 parameters
    assert plan.fsdp.shard == 2 and [u.params for u in plan.fsdp.units] == list(UNITS)
    assert (plan.weight_bytes, plan.grad_bytes, plan.optimizer_bytes) == (
        total * 4 / 2,
        total * 4 / 2,
        total * 8 / 2,
    )
    pair = ("gpu0->gpu1", "gpu1->gpu0")
    assert _collectives(log, EventKind.ALL_GATHER, "gpu0") == [
        ("0F0u0", EMBED * 2, pair),
        ("0F0u1", BLOCK * 2, pair),
        ("0F0u2", BLOCK * 2, pair),
        ("0F0u3", HEAD * 2, pair),
        ("0B0u2", BLOCK * 2, pair),
        ("0B0u1", BLOCK * 2, pair),
        ("0B0u0", EMBED * 2, pair),
    ]
    assert _collectives(log, EventKind.REDUCE_SCATTER, "gpu1") == [
        ("0B0u3", HEAD * 4, pair),
        ("0B0u2", BLOCK * 4, pair),
        ("0B0u1", BLOCK * 4, pair),
        ("0B0u0", EMBED * 4, pair),
    ]
    assert _collectives(log, EventKind.ALLREDUCE, "gpu0") == []
    # torchtitan shards over cp whatever option data_parallel (before e1847f439 too);
    # other frameworks shard only over dp_shard > 1.
    lay = ParallelLayout(cp=2)
    assert get_framework("torchtitan[data_parallel=ddp]").runs_fsdp(lay)
    assert not get_framework("megatron-lm").runs_fsdp(lay)


def test_context_parallel_shards_replicate_over_dp_replicate():
    # dp_shard 1, cp 2, two replicas (4 GPUs, context rank innermost): shard groups {0, 1},
    # {2, 3}; each unit's fp32 gradient shard (4 B x params / 2) all-reduced over the
    # replicate pairs {0, 2}, {1, 3} (HSDP).
    res, log = _run(w=2, cp=2)
    assert res.sim_input.plans[0][0].fsdp.shard == 2
    assert [x[2] for x in _collectives(log, EventKind.REDUCE_SCATTER, "gpu3")] == [
        ("gpu2->gpu3", "gpu3->gpu2")
    ] * 4
    assert _collectives(log, EventKind.ALLREDUCE, "gpu1") == [
        (u, n * 4 / 2, ("gpu1->gpu3", "gpu3->gpu1"))
        for u, n in (("0B0u3", HEAD), ("0B0u2", BLOCK), ("0B0u1", BLOCK), ("0B0u0", EMBED))
    ]
