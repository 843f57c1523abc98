"""Shared and tied parameters (issue 19): found when profiling, counted once, a copy on every
further rank that holds them, and their gradients all-reduced between those ranks (a timeline
computed by hand)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import chain_topology

from sim.config import parse_experiment
from sim.point.config import PointConfig
from sim.point.simulate import evaluate, resolve
from sim.trace.native import read_trace, write_trace
from sim.trace.schema import LayerProfile, SharedParams, Trace
from sim.trace.shared import place_shared

GB = 1e9
ROOT = Path(__file__).resolve().parents[1]


def _trace(shared: tuple[SharedParams, ...]) -> Trace:
    layers = tuple(LayerProfile(f"l{i}", 1.0, 2.0, pb, 0.0, 0.0) for i, pb in enumerate([GB, 1, 1]))
    return Trace("t", layers, 1, "fp32", "test", {"source": "test"}, shared=shared)


def _point(trace: Trace, p: int, schedule: str = "gpipe", v: int = 1, m: int = 1):
    exp = parse_experiment(
        {
            "name": "x",
            "hardware": "dgx1-v100-16gb",
            "models": [{"name": "t", "trace": "t"}],
            "training": {"global_batch": 1, "optimizer_step": False, "optimizer": "sgd"},
            "options": {"partition": "uniform"},
        }
    )
    point = PointConfig(
        model="t", schedule=schedule, stages=p, dp_width=1, microbatch_size=1, microbatches=m,
        memory_policy="none", global_batch=m, virtual_stages=v,
    )  # fmt: skip
    res = resolve(exp, point, chain_topology(3, bandwidth_Bps=1 * GB), trace)
    return res, *evaluate(res)


def test_a_group_on_two_ranks_is_a_copy_there_and_an_allreduce_at_the_step():
    # l0 and l2 share 1e9 bytes (counted in l0); p = 3, one layer per stage, F = 1 s, B = 2 s,
    # m = 1, free sends: F [0,1] [1,2] [2,3], B on s2 [3,5], s1 [5,7], s0 [7,9]. The copy on
    # gpu2 is all-reduced with gpu0's (ring of 2: 2(n-1)/n x B / bw = 1 s at 1 GB/s) once s0
    # joins at 9: [9, 10] on both; gpu1 holds none. gpu2's weights hold the copy (1e9 + 1).
    res, met, log = _point(_trace((SharedParams((0, 2), GB),)), 3)
    assert res.sim_input.runtime.tied_groups == (((0, 2), GB),)
    tied = sorted(
        (e.device, e.start_s, e.end_s)
        for e in log.events
        if e.name.startswith("tied") and e.iteration == 0
    )
    assert tied == [("gpu0", 9.0, pytest.approx(10.0)), ("gpu2", 5.0, pytest.approx(10.0))]
    assert met.iteration_time_s == pytest.approx(10.0)
    assert res.sim_input.plans[0][2].weight_bytes == pytest.approx(GB + 1)
    assert res.sim_input.plans[0][1].weight_bytes == pytest.approx(1)


def test_a_group_on_one_rank_is_stored_once_and_not_reduced():
    res, met, log = _point(_trace((SharedParams((0, 1), GB),)), 2)  # l0, l1 on stage 0
    assert res.sim_input.runtime.tied_groups == ()
    assert not [e for e in log.events if e.name.startswith("tied")]
    assert res.sim_input.plans[0][0].weight_bytes == pytest.approx(GB + 1)


def test_groups_crossing_stage_chunks_all_reduce_once_per_rank_without_deadlock():
    # 4 layers on 4 stage chunks of 2 ranks (interleaved: stages 0, 2 on rank 0; 1, 3 on rank
    # 1); group A = layers 0 and 3 (ranks 0, 1), group B = layers 0 and 1 (ranks 0, 1). One
    # all-reduce per stage chunk would deadlock (rank 0 waits at stage 0 for A, rank 1 at
    # stage 1 for B); each rank joins both at its last chunk, A then B.
    layers = tuple(LayerProfile(f"l{i}", 1.0, 2.0, 8.0, 0.0, 0.0) for i in range(4))
    shared = (SharedParams((0, 3), 4.0), SharedParams((0, 1), 2.0))
    trace = Trace("t", layers, 1, "fp32", "test", {"source": "test"}, shared=shared)
    res, met, log = _point(trace, 2, "interleaved_1f1b", 2, m=2)
    assert res.sim_input.runtime.tied_groups == (((2, 3), 4.0), ((2, 3), 2.0))
    tied = [e for e in log.events if e.name.startswith("tied") and e.iteration == 0]
    assert sorted((e.device, e.nbytes) for e in tied) == [
        ("gpu0", 2.0), ("gpu0", 4.0), ("gpu1", 2.0), ("gpu1", 4.0)
    ]  # fmt: skip
    assert met.iteration_time_s > 0


def test_place_shared_counts_one_copy_per_further_rank():
    trace = Trace(
        "t",
        tuple(LayerProfile(f"l{i}", 1, 1, 10, 0, 0) for i in range(6)),
        1,
        "fp32",
        "cpu",
        shared=(SharedParams((0, 2, 3, 5), 4.0),),
    )
    placed, groups = place_shared(trace, [0, 2, 4], [0, 1, 2])  # stages 0|1|2 -> layers 0-1|2-3|4-5
    assert [x.param_bytes for x in placed.layers] == [10, 10, 14, 10, 10, 14]
    assert groups == (((0, 1, 2), 4.0),)
    _, v_groups = place_shared(trace, [0, 2, 4], [0, 1, 0])  # stages 0 and 2 on rank 0
    assert v_groups == (((1, 2), 4.0),)  # rank 0 all-reduces at its last chunk, stage 2


def test_shared_groups_round_trip_and_bad_ones_name_the_field(tmp_path):
    from sim.errors import InputError

    trace = _trace((SharedParams((0, 2), 12.0, ("0.w",)),))
    write_trace(trace, tmp_path / "t")
    assert read_trace(tmp_path / "t").shared == trace.shared
    text = (tmp_path / "t.yaml").read_text().replace("- 2\n", "- 7\n")
    (tmp_path / "t.yaml").write_text(text)
    with pytest.raises(InputError, match="shared.0.layers"):
        read_trace(tmp_path / "t")


def test_profiling_finds_the_shared_ffn_and_the_tied_head_and_counts_them_once(tmp_path):
    torch = pytest.importorskip("torch")
    from backends.torch.profile.user import profile_user_model

    trace = profile_user_model(
        str(ROOT / "examples" / "vit_shared.py") + ":build",
        layers=("embed", "blocks.*", "head"),
        loss=str(ROOT / "examples" / "vit_shared.py") + ":loss",
        warmup=0,
        reps=1,
    )
    dim, patch = 64, 48
    ffn = (dim * 4 * dim + 4 * dim + 4 * dim * dim + dim) * 4
    assert [(g.layers, g.param_bytes) for g in trace.shared] == [
        ((0, 7), dim * patch * 4.0),  # embed.proj.weight, the head's weight
        ((2, 4), float(ffn)),  # blocks 1 and 3's FFN
    ]
    from backends.torch.models.user import load_callable

    model, _, _ = load_callable(str(ROOT / "examples" / "vit_shared.py") + ":build", option="x")()
    unique = sum(p.numel() for n, p in model.named_parameters() if not n.startswith("probe"))
    assert trace.parameters == unique  # named_parameters yields each shared tensor once
    assert trace.layers[4].param_bytes == trace.layers[3].param_bytes - ffn  # block 3: no FFN
    assert torch.is_tensor(model.head.weight) and model.head.weight is model.embed.proj.weight
