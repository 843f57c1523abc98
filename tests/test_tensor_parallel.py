"""Megatron tensor parallelism: communication volume, activation memory, speed, placement."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.comm.hierarchical import collective_plan
from sim.config import parse_experiment
from sim.errors import InputError
from sim.events import EventKind, Stream
from sim.hardware.loader import load_hardware
from sim.parallel.groups import tensor_groups
from sim.parallel.megatron import AG, AR, RS, korthikanti_act_bytes
from sim.parallel.shard import measured_overheads, shard_trace
from sim.plan.sweep import expand
from sim.point.config import PointConfig
from sim.point.experiment import prepare
from sim.point.simulate import evaluate, resolve
from sim.trace.generator import transformer_trace

ROOT = Path(__file__).resolve().parents[1]
H100 = load_hardware("dgx-h100").gpus[0].compute
BUS = {AR: 2.0, AG: 1.0, RS: 1.0}
"""Ring steps per (t - 1) of each collective: bytes on the wire per rank = BUS * (t-1)/t * B."""


def gpt(b=1, s=1024, h=4096, a=32, layers=4, attention="math", vocab=50304):
    return transformer_trace(
        "gpt",
        name="gpt",
        layers=layers,
        hidden=h,
        heads=a,
        seq_len=s,
        vocab=vocab,
        microbatch_size=b,
        gpu=H100,
        attention=attention,
    )


def two_gpus() -> dict:
    """Two H100s on one NVSwitch (375 GB/s per direction, 5 us per link), one host."""
    return {
        "name": "2xh100",
        "gpu": {
            "model": "H100-SXM5-80GB",
            "memory": "80 GiB",
            "peak_flops": "989.4 TFLOPS",
            "hbm_bandwidth": "3.35 TB/s",
            "sm_count": 132,
            "matmul_efficiency": 0.801,
            "attention_efficiency": 0.35,
        },
        "num_gpus": 2,
        "hosts": [{"name": "cpu0", "dram": "1 TB"}],
        "switches": ["nvswitch", "sw0"],
        "links": [
            {"a": "gpu0", "b": "nvswitch", "bandwidth": "375 GB/s", "latency": "5 us"},
            {"a": "gpu1", "b": "nvswitch", "bandwidth": "375 GB/s", "latency": "5 us"},
            {"a": "gpu0", "b": "sw0", "bandwidth": "36 GB/s", "latency": "5 us"},
            {"a": "gpu1", "b": "sw0", "bandwidth": "36 GB/s", "latency": "5 us"},
            {"a": "sw0", "b": "cpu0", "bandwidth": "36 GB/s", "latency": "5 us"},
        ],
    }


def experiment(hardware, trace="gpt-ds-40b", **sweep):
    return parse_experiment(
        {
            "name": "tp",
            "hardware": hardware,
            "models": [{"name": "m", "trace": trace, "global_batch": 8}],
            "training": {"iterations": 2},
            "sweep": sweep,
        }
    )


def point(t, sp=False, p=1, w=1, b=1, m=8, schedule="1f1b"):
    return PointConfig(
        model="m",
        schedule=schedule,
        stages=p,
        dp_width=w,
        tensor_parallel=t,
        sequence_parallel=sp,
        microbatch_size=b,
        microbatches=m,
        memory_policy="none",
        global_batch=m * b * w,
    )


# -- communication volume -------------------------------------------------------------------
@pytest.mark.parametrize("t", [2, 4, 8])
def test_block_comm_is_megatrons_two_allreduces_each_way(t):
    b, s, h, d = 2, 1024, 4096, 2
    sharded = shard_trace(gpt(b=b), t, False, H100)
    for comm in sharded.comm[1:-1]:  # the blocks
        assert [(op.kind, op.nbytes) for op in comm.fwd] == [(AR, b * s * h * d)] * 2
        assert [(op.kind, op.nbytes) for op in comm.bwd] == [(AR, b * s * h * d)] * 2


@pytest.mark.parametrize("t", [2, 4, 8])
def test_sequence_parallel_moves_the_same_bytes_as_allreduce(t):
    b, s, h, d = 1, 2048, 4096, 2
    plain = shard_trace(gpt(b=b, s=s), t, False, H100).comm[1]
    seq = shard_trace(gpt(b=b, s=s), t, True, H100).comm[1]
    assert sorted(op.kind for op in seq.fwd) == [AG, AG, RS, RS]
    assert sorted(op.kind for op in seq.bwd) == [AG, AG, RS, RS]
    assert all(op.nbytes == b * s * h * d for op in seq.fwd + seq.bwd)

    def wire(ops):
        return sum(BUS[op.kind] * (t - 1) / t * op.nbytes for op in ops)

    assert wire(seq.fwd) == pytest.approx(wire(plain.fwd)) == 2 * 2 * (t - 1) / t * b * s * h * d
    assert wire(seq.bwd) == pytest.approx(wire(plain.bwd))


def test_engine_logs_the_megatron_volume_per_microbatch():
    """One stage holding every layer: a forward's all-reduces are 2 per block, 1 for the
    embedding, 3 small ones of the cross-entropy; a backward's 2 per block and 1 of the head."""
    L, b, s, h, d = 4, 1, 1024, 4096, 2
    exp = experiment(two_gpus())
    topo = load_hardware(two_gpus())
    res = resolve(exp, point(2, b=b), topo, gpt(layers=L, b=b))
    _, log = evaluate(res)
    x = b * s * h * d
    for gpu in ("gpu0", "gpu1"):
        tp = [e for e in log.events if e.stream == Stream.TP and e.device == gpu]
        f0 = [e for e in tp if e.name.endswith(" 0F0")]
        b0 = [e for e in tp if e.name.endswith(" 0B0")]
        assert [e.kind for e in f0] == [EventKind.ALLREDUCE]
        assert f0[0].nbytes == (2 * L + 1) * x + 3 * 4 * b * s
        assert b0[0].nbytes == (2 * L + 1) * x


def test_full_recompute_reruns_the_blocks_allreduces():
    """Megatron's CheckpointFunction.backward re-runs each checkpointed block's forward, its
    two all-reduces included: before each backward, 2 per block (not the embedding's or the
    cross-entropy's: only blocks are checkpointed, sim.memory.recompute)."""
    L, b, s, h, d = 4, 1, 1024, 4096, 2
    topo = load_hardware(two_gpus())
    pt = point(2, b=b).model_copy(update={"memory_policy": "recompute:full"})
    res = resolve(experiment(two_gpus()), pt, topo, gpt(layers=L, b=b))
    _, log = evaluate(res)
    tp = [e for e in log.events if e.stream == Stream.TP and e.device == "gpu0"]
    r0 = [e for e in tp if e.name.endswith(" R0B0")]
    assert [e.kind for e in r0] == [EventKind.ALLREDUCE]
    assert r0[0].nbytes == 2 * L * b * s * h * d
    assert res.sim_input.plans[0][0].recompute_layers == tuple(range(1, L + 1))


# -- memory ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("t", "sp"), [(2, False), (4, False), (8, False), (2, True), (8, True)])
def test_block_activations_follow_korthikanti(t, sp):
    b, s, h, a = 2, 2048, 4096, 32
    sharded = shard_trace(gpt(b=b, s=s, h=h, a=a), t, sp, H100)
    block = sharded.trace.layers[1]
    # by hand: sbh(10 + 24/t + 5as/(ht)), or sbh/t (34 + 5as/h) with sequence parallelism
    sbh = s * b * h
    hand = sbh / t * (34 + 5 * a * s / h) if sp else sbh * (10 + 24 / t + 5 * a * s / (h * t))
    assert block.act_bytes == pytest.approx(hand)
    assert korthikanti_act_bytes(b, s, h, a, t, sp) == pytest.approx(hand)


def test_parameters_gradients_optimizer_split_by_t_but_the_whole_ones():
    """The split parameters / t; the position embedding (s x h), each block's two LayerNorms
    and two row-parallel biases (6h) and the final LayerNorm (2h) whole on every rank
    (sim.parallel.replicated)."""
    base, (s, h, layers) = gpt(), (1024, 4096, 4)
    whole = 2.0 * (s * h + layers * 6 * h + 2 * h)  # fp16 bytes
    for t in (2, 4):
        sharded = shard_trace(base, t, False, H100).trace
        assert sharded.param_bytes == pytest.approx((base.param_bytes - whole) / t + whole)
    exp = experiment(two_gpus())
    topo = load_hardware(two_gpus())
    plans = [resolve(exp, point(t), topo, gpt()).sim_input.plans[0][0] for t in (1, 2)]
    share = ((base.param_bytes - whole) / 2 + whole) / base.param_bytes
    for name in ("weight_bytes", "grad_bytes", "optimizer_bytes"):
        assert getattr(plans[1], name) == pytest.approx(getattr(plans[0], name) * share)


# -- speed ----------------------------------------------------------------------------------
def _iteration_s(trace, t):
    exp = experiment(two_gpus())
    res = resolve(exp, point(t), load_hardware(two_gpus()), trace)
    return evaluate(res)[0].iteration_time_s


def test_tp2_speeds_up_a_large_gemm_layer():
    big = gpt(b=4, s=2048, h=8192, a=64, layers=1)
    assert _iteration_s(big, 2) < 0.7 * _iteration_s(big, 1)


def test_tp2_slows_down_a_tiny_layer():
    tiny = gpt(b=1, s=16, h=64, a=2, layers=1, vocab=128)
    assert _iteration_s(tiny, 2) > _iteration_s(tiny, 1)


# -- placement ------------------------------------------------------------------------------
@pytest.mark.parametrize("preset", ["2x-dgx-h100", "4x-dgx-a100-80gb"])
def test_tensor_groups_never_span_servers(preset):
    topo = load_hardware(preset)
    server = {g: k for k, members in enumerate(topo.servers) for g in members}
    for t in (2, 4, 8):
        for p in (1, 2, 4, 8):
            for w in (1, 2):
                if p * w * t > topo.num_gpus:
                    continue
                groups = tensor_groups(topo, p, w, t)
                used = [g for row in groups for grp in row for g in grp]
                assert len(set(used)) == len(used) == p * w * t
                for row in groups:
                    for grp in row:
                        assert len({server[g] for g in grp}) == 1


def test_pipeline_crosses_servers_tensor_stays_inside():
    topo = load_hardware("2x-dgx-h100")
    groups = tensor_groups(topo, 2, 1, 8)
    assert groups == ((tuple(range(8)), tuple(range(8, 16))),)


def test_tensor_parallel_of_16_takes_two_servers():
    """Megatron's t = 16 on 8-GPU servers (SC'21 Figure 13): each group is two whole servers,
    replicas next, the pipeline last; its all-reduce crosses the network (hierarchical)."""
    topo = load_hardware("4x-dgx-a100-80gb")
    groups = tensor_groups(topo, 2, 1, 16)
    assert groups == ((tuple(range(16)), tuple(range(16, 32))),)
    plan = collective_plan(topo, tuple(f"gpu{g}" for g in groups[0][0]))
    assert plan.hierarchical and plan.servers == 2


def test_tensor_parallel_must_divide_server_gpus():
    prep = prepare(experiment("2x-dgx-h100", tensor_parallel=[1, 3]), "exp.yaml")
    with pytest.raises(InputError) as err:
        expand(prep)
    assert err.value.field == "sweep.tensor_parallel.1"


def test_a_model_pins_its_own_stages_width_and_tensor_size():
    """models.<i>.stages/dp_width/tensor_parallel replace the sweep's lists for that model only
    (one published configuration per model); a bad size names the model's field."""
    models = [
        {"name": "pinned", "trace": "gpt-ds-40b", "stages": 2, "dp_width": 1, "tensor_parallel": 8},
        {"name": "swept", "trace": "gpt-ds-40b"},
    ]
    data = {"name": "pin", "hardware": "2x-dgx-h100", "models": models}
    data["training"] = {"global_batch": 8}
    data["sweep"] = {"stages": [1, 2], "dp_width": [1, 2], "tensor_parallel": [1, 2]}
    points, _ = expand(prepare(parse_experiment(data), "exp.yaml"))
    pinned = {(p.stages, p.dp_width, p.tensor_parallel) for p in points if p.model == "pinned"}
    swept = {(p.stages, p.dp_width, p.tensor_parallel) for p in points if p.model == "swept"}
    assert pinned == {(2, 1, 8)}
    assert swept == {(p, w, t) for p in (1, 2) for w in (1, 2) for t in (1, 2)}
    models[0]["tensor_parallel"] = [8, 3]
    with pytest.raises(InputError) as err:
        expand(prepare(parse_experiment(data), "exp.yaml"))
    assert err.value.field == "models.0.tensor_parallel.1"


def test_trace_without_model_shape_is_a_clear_error():
    prep = prepare(experiment("dgx-h100", trace="gnmt16", tensor_parallel=[1, 2]), "exp.yaml")
    with pytest.raises(InputError) as err:
        expand(prep)
    assert err.value.field == "models.0.trace"
    assert "model_shape" in str(err.value)


def test_heads_not_divisible_is_skipped_with_reason():
    prep = prepare(experiment("dgx-h100", trace="gpt2-1.5b", tensor_parallel=[1, 2]), "exp.yaml")
    points, skipped = expand(prep)
    assert {p.tensor_parallel for p in points} == {1}
    assert any("25 heads" in reason for _, reason in skipped)


def test_tensor_parallel_one_adds_no_collective():
    exp = experiment(two_gpus())
    res = resolve(exp, point(1), load_hardware(two_gpus()), gpt())
    assert res.sim_input.tensor_groups == ()
    assert all(not c.tp_fwd and not c.tp_bwd for c in res.sim_input.costs)
    _, log = evaluate(res)
    assert not [e for e in log.events if e.stream == Stream.TP]


# -- the two-server experiment ----------------------------------------------------------------
def test_2x_dgx_h100_needs_tensor_times_pipeline():
    """A few points of experiments/2x-dgx-h100.yaml: the model fits only split over both
    servers, and a TP x PP point that fits runs."""
    from sim.config import load_experiment

    path = ROOT / "experiments" / "2x-dgx-h100.yaml"
    prep = prepare(load_experiment(path), str(path))
    trace = prep.traces["gpt-ds-40b"]
    fits = {}
    for p, t in ((8, 1), (2, 8)):
        res = resolve(prep.exp, point(t, p=p, m=64), prep.topology, trace, file=str(path))
        met, log = evaluate(res)
        fits[(p, t)] = met.fits
        if t > 1:
            tp = [e for e in log.events if e.stream == Stream.TP]
            assert {e.device for e in tp} == {f"gpu{i}" for i in range(16)}
    assert fits == {(8, 1): False, (2, 8): True}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_2x_dgx_h100_experiment_runs_end_to_end(shipped_run):
    import csv

    # `sim run experiments/2x-dgx-h100.yaml --jobs 2 --no-plots`, run once for this test and
    # tests/test_cli.py::test_every_shipped_experiment_runs (conftest.py's shipped_run)
    res = shipped_run("2x-dgx-h100.yaml")
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader((res.out / "results.csv").open()))
    assert "tensor_parallel" in rows[0]
    winner = (res.out / "winner.yaml").read_text()
    assert "tensor_parallel" in winner


@pytest.mark.parametrize("sp,per_block", [(False, 4), (True, 6)])
def test_each_tensor_parallel_module_adds_its_measured_overhead(sp, per_block):
    """A measured per-module overhead (torch DTensor's dispatch, `sim calibrate`) adds to a
    block's forward per_block x forward and to its input gradient per_block x backward: 2
    column- and 2 row-parallel linears, and 2 sequence-parallel norms with sp."""
    base = shard_trace(gpt(b=1, s=1024), 2, sp, H100).trace.layers
    over = shard_trace(gpt(b=1, s=1024), 2, sp, H100, (1e-3, 3e-3)).trace.layers
    block = 1  # layers: embedding, blocks..., head
    assert over[block].fwd_s - base[block].fwd_s == pytest.approx(per_block * 1e-3)
    assert over[block].bwd_s - base[block].bwd_s == pytest.approx(per_block * 3e-3)
    if over[block].bwd_input_s is not None:
        assert over[block].bwd_input_s - base[block].bwd_input_s == pytest.approx(per_block * 3e-3)
        assert over[block].bwd_weight_s == base[block].bwd_weight_s
    assert over[0].fwd_s - base[0].fwd_s == pytest.approx(1e-3)  # the vocabulary-split embedding


def _with_measured(trace, entries):
    from dataclasses import replace

    return replace(trace, provenance={**trace.provenance, "tensor_parallel_overhead": entries})


def _entry(t=2, sp=False, b=1, fwd=7e-3, bwd=11e-3, kind="block"):
    return {"tensor_parallel": t, "sequence_parallel": sp, "microbatch_size": b,
            f"{kind}_fwd_s": fwd, f"{kind}_bwd_s": bwd}  # fmt: skip


@pytest.mark.parametrize("sp", [False, True])
def test_a_layers_measured_overhead_replaces_the_per_module_one(sp):
    """A trace that records a layer kind's overhead at this t, sp and micro-batch size
    (`sim profile --tensor-parallel`) is charged it once per layer of that kind, forward and
    backward, in place of the per-module overhead; a kind it does not record (here the
    embedding) keeps the per-module one."""
    base = shard_trace(gpt(b=1, s=1024), 2, sp, H100).trace.layers
    entry = {**_entry(sp=sp), **_entry(sp=sp, fwd=2e-3, bwd=5e-3, kind="head")}
    trace = _with_measured(gpt(b=1, s=1024), [_entry(sp=not sp, fwd=1.0), entry])
    over = shard_trace(trace, 2, sp, H100, (1e-3, 3e-3)).trace.layers
    for i in (1, 2, 3, 4):  # the blocks
        assert over[i].fwd_s - base[i].fwd_s == pytest.approx(7e-3)
        assert over[i].bwd_s - base[i].bwd_s == pytest.approx(11e-3)
    assert over[-1].fwd_s - base[-1].fwd_s == pytest.approx(2e-3)
    assert over[-1].bwd_s - base[-1].bwd_s == pytest.approx(5e-3)
    assert over[0].fwd_s - base[0].fwd_s == pytest.approx(1e-3)


def test_a_measured_overhead_at_another_size_or_degree_is_not_used():
    """Entries for another micro-batch size or tensor-parallel degree leave the per-module
    overhead in place (4 modules per block without sequence parallelism)."""
    base = shard_trace(gpt(b=1, s=1024), 2, False, H100).trace.layers
    trace = _with_measured(gpt(b=1, s=1024), [_entry(b=2), _entry(t=4)])
    over = shard_trace(trace, 2, False, H100, (1e-3, 3e-3)).trace.layers
    assert over[1].fwd_s - base[1].fwd_s == pytest.approx(4 * 1e-3)
    assert over[1].bwd_s - base[1].bwd_s == pytest.approx(4 * 3e-3)


def test_a_measured_overhead_does_not_follow_a_trace_to_another_device():
    """The overhead was measured on the profiling machine's ranks: a trace scaled to another
    device (by peak FLOP/s) drops it, and the per-module overhead applies again."""
    trace = _with_measured(gpt(b=1, s=1024), [_entry()])
    assert measured_overheads(trace, 2, False) == {"block": (7e-3, 11e-3)}
    assert measured_overheads(trace.scaled_to_device(1.0, 2.0, "other"), 2, False) == {}


@pytest.mark.parametrize("t", [2, 8])
def test_regather_adds_an_allgather_per_column_parallel_layer_to_the_backward(t):
    # TE LayerNormLinear / Megatron ColumnParallelLinear with sequence parallelism keep a 1/t
    # shard of their input and all-gather it again for the weight gradient: a block's
    # backward has 2 all-gathers more (QKV, FC1), the output layer's 1; the forward is as is.
    b, s, h, d = 1, 2048, 4096, 2
    plain = shard_trace(gpt(b=b, s=s), t, True, H100)
    again = shard_trace(gpt(b=b, s=s), t, True, H100, regather=True)
    block, head = again.comm[1], again.comm[-1]
    assert block.fwd == plain.comm[1].fwd
    assert sorted(op.kind for op in block.bwd) == [AG] * 4 + [RS] * 2
    assert all(op.nbytes == b * s * h * d for op in block.bwd)
    assert [op.kind for op in head.bwd] == [RS, AG]
    assert shard_trace(gpt(b=b, s=s), t, False, H100, regather=True).comm == tuple(
        shard_trace(gpt(b=b, s=s), t, False, H100).comm
    )  # without sequence parallelism nothing is gathered


@pytest.mark.parametrize(
    "framework, sp, regather",
    [
        ("megatron-lm", True, True),
        ("megatron-lm", False, False),
        ("megatron-lm[tp_comm_overlap]", True, False),
        ("torchtitan", True, False),
        ("pipesim", True, False),
    ],
)
def test_which_frameworks_gather_the_saved_input_again(framework, sp, regather):
    point = PointConfig(
        model="m", schedule="1f1b", stages=1, dp_width=1, microbatch_size=1, microbatches=1,
        memory_policy="none", global_batch=1, tensor_parallel=4, sequence_parallel=sp,
        framework=framework,
    )  # fmt: skip
    assert point.sp_regather is regather
