"""Simulate what differs, once (sim.engine.symmetry): the mirrored run of one replica's tensor
rank 0 gives the full simulation's iteration time and peak memory where both run (16 and 64
GPUs), and every asymmetric case falls back to the full simulation."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim import api
from sim.engine.symmetry import asymmetry, mirrored
from sim.errors import InputError
from sim.hardware.loader import load_hardware
from sim.hardware.parts import GPU, Host, Link
from sim.hardware.topology import Topology
from tests.helpers import cluster_1f1b, small_gpt_csv, uniform_input


@pytest.fixture(scope="module")
def gpt(tmp_path_factory) -> str:
    return small_gpt_csv(tmp_path_factory.mktemp("trace"))


def _exp(trace: str, servers: int, t: int, p: int, w: int, mode: str, **more) -> dict:
    return cluster_1f1b(
        trace, servers, t, p, w, 8 * w, mode, name="sym",
        framework=more.pop("framework", "pipesim"),
        memory_policy=more.pop("policy", None) or "recompute",
        options=more.pop("options", {}),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("servers", "t", "p", "w", "framework", "more"),
    [
        (2, 1, 2, 8, "pipesim", {}),  # data parallel only, buckets overlapping the backward
        (2, 8, 2, 1, "pipesim", {}),  # tensor parallel only
        (2, 2, 2, 4, "megatron-lm", {}),  # both, 16 GPUs
        (2, 2, 2, 4, "megatron-lm", {"schedule": "interleaved_1f1b"}),  # v = 2
        (2, 2, 2, 4, "megatron-lm", {"policy": "zero3"}),  # per-action gathers and scatters
        (2, 1, 4, 4, "deepspeed", {}),  # blocking sends, step barrier
        (8, 2, 4, 8, "megatron-lm", {}),  # both, 64 GPUs over 8 servers
    ],
)
def test_symmetric_equals_full(gpt, servers, t, p, w, framework, more):
    runs = {}
    for mode in ("full", "symmetric"):
        exp = _exp(gpt, servers, t, p, w, mode, framework=framework, policy=more.get("policy"))
        exp["sweep"]["schedule"] = more.get("schedule", "1f1b")
        runs[mode] = api.simulate(exp)
    full, sym = runs["full"], runs["symmetric"]
    assert sym.resolved.sim_input.mirrored and not full.resolved.sim_input.mirrored
    assert sym.metrics.iteration_time_s == full.metrics.iteration_time_s
    assert sym.metrics.peak_memory_bytes == full.metrics.peak_memory_bytes
    assert sym.metrics.comm_bytes == pytest.approx(full.metrics.comm_bytes, rel=1e-12)
    assert sym.metrics.bubble_fraction == pytest.approx(full.metrics.bubble_fraction, rel=1e-9)
    ran = {e.device for e in sym.log.events}
    assert len(ran) == p  # one GPU per stage: replica 0, tensor rank 0
    assert len(sym.log.events) * w * t == len(full.log.events)


def _moe(mode: str, **sweep) -> dict:
    """Qwen1.5-MoE-A2.7B (60 experts) on two DGX H100 under Megatron-LM's runtime, 1F1B,
    the distributed optimizer, in ``options.simulation`` mode ``mode``."""
    gb = sweep.pop("gb", 32)
    return {
        "name": "sym-moe",
        "hardware": "2x-dgx-h100",
        "framework": sweep.pop("framework", "megatron-lm"),
        "models": [{"name": "q", "trace": "qwen1.5-moe-a2.7b", "global_batch": gb}],
        "training": {"optimizer": "adam", "dtype": "bf16"},
        "options": {"simulation": mode, "partition": "uniform"},
        "sweep": {"schedule": "1f1b", "stages": 2, "dp_width": 4, "microbatch_size": 1,
                  "memory_policy": "dist_opt", **sweep},
    }  # fmt: skip


@pytest.mark.parametrize(
    "sweep",
    [
        {"expert_parallel": 4},  # all-to-alls inside a server, expert-data-parallel grads
        {"expert_parallel": 12, "dp_width": 12, "stages": 1, "gb": 48},  # across servers
        {"context_parallel": 2, "dp_width": 2},  # ring attention
        {
            "context_parallel": 4,
            "context_parallel_comm": "all_gather",
            "dp_width": 1,
            "tensor_parallel": 2,
            "sequence_parallel": True,
        },  # fmt: skip
        {"context_parallel": 2, "context_parallel_comm": "a2a", "expert_parallel": 4},
        {
            "expert_parallel": 2,
            "framework": "megatron-lm[overlap_grad_reduce=true,overlap_param_gather=true]",
        },  # dense and expert-data-parallel buckets issued at one instant on shared links
        # MoE parallel folding: expert groups across tensor ranks (etp 1 < tp 2), and the
        # experts' tensor group across replicas (etp 2 > tp 1)
        {
            "tensor_parallel": 2,
            "sequence_parallel": True,
            "expert_parallel": 4,
            "expert_tensor_parallel": 1,
            "dp_width": 2,
        },
        {"tensor_parallel": 1, "expert_parallel": 2, "expert_tensor_parallel": 2},
    ],
)
def test_symmetric_equals_full_with_expert_and_context_parallelism(sweep):
    """Issue 28: the EP and CP ranks are mirrored like the data-parallel replicas; the
    mirrored run (periodic where it can be) gives the full simulation's iteration time and
    peak (16 GPUs, all of them simulated in full)."""
    full = api.simulate(_moe("full", **dict(sweep)))
    sym = api.simulate(_moe("symmetric", **dict(sweep)))
    assert sym.resolved.sim_input.mirrored and not full.resolved.sim_input.mirrored
    assert sym.metrics.iteration_time_s == pytest.approx(full.metrics.iteration_time_s, rel=1e-12)
    assert sym.metrics.peak_memory_bytes == full.metrics.peak_memory_bytes
    assert sym.metrics.comm_bytes == pytest.approx(full.metrics.comm_bytes, rel=1e-9)
    assert len({e.device for e in sym.log.events}) == sym.resolved.point.stages


def test_deferred_expert_parameter_gather_is_launched_by_its_simulated_members():
    """Megatron's overlap_param_gather gathers the experts over their expert-data-parallel
    group (replicas 0 and 2 with ep 2, dp 4); mirrored, only replica 0 runs, and it alone
    launches the chain (it waited for replica 2 and deadlocked in the second iteration). The
    two chains, issued at one instant on shared links, queue dense first in both runs
    (sim.engine.links), so the step is the full run's."""
    sweep = {"expert_parallel": 2, "framework": "megatron-lm[overlap_param_gather=true]"}
    full = api.simulate(_moe("full", **dict(sweep)))
    sym = api.simulate(_moe("symmetric", **dict(sweep)))
    assert sym.resolved.sim_input.mirrored
    assert sym.metrics.iteration_time_s == pytest.approx(full.metrics.iteration_time_s, rel=1e-12)
    assert sym.metrics.peak_memory_bytes == full.metrics.peak_memory_bytes
    assert sym.metrics.comm_bytes == pytest.approx(full.metrics.comm_bytes, rel=1e-12)


def test_auto_mirrors_above_64_gpus_only(gpt):
    small = api.simulate(_exp(gpt, 2, 1, 2, 8, "auto"))
    big = api.simulate(_exp(gpt, 16, 1, 2, 64, "auto"))
    assert not small.resolved.sim_input.mirrored and big.resolved.sim_input.mirrored


def _fallback(gpt, **more) -> api.Simulation:
    sim = api.simulate(_exp(gpt, 2, 1, 2, 8, "symmetric", **more))
    assert not sim.resolved.sim_input.mirrored
    return sim


def test_straggler_falls_back_and_slows_the_step(gpt):
    plain = api.simulate(_exp(gpt, 2, 1, 2, 8, "full"))
    slow = _fallback(gpt, options={"stragglers": {3: 1.5}})
    assert any("straggler GPU (gpu3 x1.5)" in n for n in slow.resolved.compute_notes)
    assert slow.metrics.iteration_time_s > plain.metrics.iteration_time_s


def test_host_offload_falls_back(gpt):
    sim = _fallback(gpt, policy="cpu_swap")
    assert any("off its GPU" in n for n in sim.resolved.compute_notes)


def test_degraded_link_is_asymmetric(gpt):
    sim = api.simulate(_exp(gpt, 2, 1, 2, 8, "full"))
    inp = sim.resolved.sim_input
    assert asymmetry(inp) is None
    topo = inp.topology
    links = tuple(
        replace(lk, bandwidth_Bps=lk.bandwidth_Bps / 4) if lk.name == "gpu5->leaf0.5" else lk
        for lk in topo.links
    )
    why = asymmetry(replace(inp, topology=replace(topo, links=links, _route_cache={})))
    assert why is not None and "gpu5" in why


def test_non_uniform_stage_across_replicas_is_asymmetric(gpt):
    inp = api.simulate(_exp(gpt, 2, 1, 2, 8, "full")).resolved.sim_input
    plans = list(inp.plans)
    plans[3] = (replace(plans[3][0], recompute_s=plans[3][0].recompute_s * 2), *plans[3][1:])
    why = asymmetry(replace(inp, plans=tuple(plans)))
    assert why == "stage 0 has another memory plan on replica 3 tensor rank 0"


def test_send_through_a_shared_link_is_asymmetric():
    """DGX-1: GPUs 0 and 5 have no NVLink; their sends cross PCIe switches and QPI."""
    sim = api.simulate(
        {
            "name": "d",
            "hardware": "dgx1-v100-16gb",
            "models": [{"name": "b", "trace": "bert-large", "global_batch": 8}],
            "options": {"simulation": "symmetric", "placement": [[0, 5], [1, 6]]},
            "sweep": {"schedule": "1f1b", "stages": 2, "dp_width": 2, "microbatch_size": 2},
        }
    )
    assert not sim.resolved.sim_input.mirrored
    assert any("which other replicas share" in n for n in sim.resolved.compute_notes)


def test_too_many_gpus_lists_what_exists():
    with pytest.raises(InputError) as err:
        load_hardware("3000x-dgx-h100", file="e.yaml", field="hardware")
    msg = str(err.value)
    assert "24,000 GPUs is more than the 16,384" in msg and "dgx-a100-80gb" in msg
    assert "presets/" not in msg and err.value.field == "hardware.servers"


def _two_leaves() -> Topology:
    """GPUs 0, 1 under leaf ``la``, GPUs 2, 3 under ``lb``, the leaves and the host joined by a
    spine."""
    gpus = tuple(GPU(f"gpu{i}", "test", 16 * 2**30, 100e12, 1e12, "cpu0") for i in range(4))
    ends = [(f"gpu{i}", "la" if i < 2 else "lb") for i in range(4)]
    ends += [("la", "spine"), ("lb", "spine"), ("spine", "cpu0")]
    links = tuple(Link(f"{a}->{b}", a, b, 10e9, 1e-6) for x, y in ends for a, b in ((x, y), (y, x)))
    return Topology("leaves", gpus, (Host("cpu0", 2**40),), links, ("la", "lb", "spine"))


def test_send_across_a_fabric_is_mirrored_with_a_note():
    inp = replace(
        uniform_input("1f1b", 2, 4, w=2, topology=_two_leaves()), placement=((0, 2), (1, 3))
    )
    out, note = mirrored(inp)
    assert out.mirrored
    assert note is not None and "gpu0->gpu2 crosses la->spine" in note
