"""Clusters (issue 18): the planner over a GPU count, per-stage plots above the threshold, and
routes on a large topology equal to the whole search's."""

from __future__ import annotations

import pytest

import sim.hardware.topology as topology_module
from sim import api
from sim.errors import InputError
from sim.hardware.loader import load_hardware
from sim.report.gantt import plot_gantt
from sim.report.memory_plots import plot_memory_per_gpu, plot_memory_timeline
from sim.report.scale import PER_STAGE_ABOVE_GPUS, stage_view
from tests.helpers import small_gpt_csv


@pytest.fixture(scope="module")
def gpt(tmp_path_factory) -> str:
    return small_gpt_csv(tmp_path_factory.mktemp("trace"))


def _cluster(trace: str, servers: int, **sweep) -> dict:
    return {
        "name": "cluster",
        "hardware": f"{servers}x-dgx-a100-80gb",
        "framework": "megatron-lm",
        "models": [{"name": "g", "trace": trace, "global_batch": 1024}],
        "training": {"optimizer": "adam", "dtype": "fp16"},
        "sweep": {"schedule": "1f1b", "microbatch_size": 1, "memory_policy": "recompute", **sweep},
    }


def test_planner_fills_512_gpus_and_returns_a_winner(gpt):
    plan = api.plan(_cluster(gpt, 64, gpus=512, stages=[4, 8], tensor_parallel=[1, 2]))
    got = {(r.stages, r.tensor_parallel, r.dp_width, r.microbatches) for r in plan.rows}
    # every (p, t) fills the 512 GPUs: w = 512 / (p t), m = 1024 / w
    want = {(p, t, 512 // (p * t), 1024 * p * t // 512) for p in (4, 8) for t in (1, 2)}
    assert got == want
    win = plan.winners["g"]
    assert win is not None and win.stages * win.tensor_parallel * win.dp_width == 512


def test_gpus_and_dp_width_together_are_refused(gpt):
    with pytest.raises(InputError) as err:
        api.plan(_cluster(gpt, 64, gpus=512, stages=2, dp_width=256))
    assert err.value.field == "sweep.dp_width"


def test_gpu_count_not_filled_is_skipped(gpt):
    plan = api.plan(_cluster(gpt, 64, gpus=512, stages=[3, 4]))
    assert {r.stages for r in plan.rows} == {4}
    assert any("not a multiple of stages x t x cp = 3" in why for _, why in plan.skipped)


def test_plots_show_one_gpu_per_stage_above_the_threshold(gpt, tmp_path):
    sim = api.simulate(_cluster(gpt, 16, stages=2, dp_width=64))  # 128 GPUs, mirrored
    assert 2 * 64 > PER_STAGE_ABOVE_GPUS and sim.resolved.sim_input.mirrored
    view, labels = stage_view(sim.log)
    # across servers the ranks follow Megatron's order (sim.parallel.placement): replica r of
    # stage s is GPU r + 64 s
    assert labels == {"gpu0": "stage 0 (gpu0, x64)", "gpu64": "stage 1 (gpu64, x64)"}
    assert {e.device for e in view.events} == {"gpu0", "gpu64"}
    kinds = {e.kind for e in view.events if e.device == "gpu0"}
    assert "allreduce" in kinds  # its data-parallel collective, on the pipeline's rows
    for draw in (plot_memory_per_gpu, plot_memory_timeline, plot_gantt):
        draw(sim.log, tmp_path / f"{draw.__name__}.png")
        assert (tmp_path / f"{draw.__name__}.png").stat().st_size > 0


def test_plots_keep_every_gpu_up_to_the_threshold(gpt):
    sim = api.simulate(_cluster(gpt, 2, stages=2, dp_width=8))
    view, labels = stage_view(sim.log)
    assert view is sim.log and labels == {}


def test_bounded_route_search_gives_the_whole_searchs_routes(monkeypatch):
    """The search that stops at the destination's level (large topologies) picks the same
    route as the whole search, for GPU pairs, GPU to host, and relays within a communicator."""
    routes = {}
    for bound in (10**9, 1):
        monkeypatch.setattr(topology_module, "BOUNDED_ABOVE_NODES", bound)
        topo = load_hardware("2x-dgx-a100-80gb")
        gpus = [g.name for g in topo.gpus]
        comm = frozenset(gpus[:3] + gpus[-3:])
        got = {}
        for a in gpus:
            for b in [*gpus, topo.gpu(int(a[3:])).host]:
                got[a, b] = [lk.name for lk in topo.route(a, b)]
                if a in comm and b in comm:
                    got[a, b, "comm"] = [lk.name for lk in topo.route(a, b, within=comm)]
        routes[bound] = got
    assert routes[1] == routes[10**9]
