"""ZeRO-Offload's per-parameter gradient path and host unscale pass (sim.memory.zero_offload):
closed forms derived by hand from DeepSpeed's code."""

from __future__ import annotations

import pytest

from sim.memory.registry import parse_policy
from sim.memory.zero_offload import (
    ADAM_HOST_BYTES,
    BUCKET_COPY_BYTES,
    GRAD_PATH_BYTES,
    RELEASE_GRAD_PATH_BYTES,
    RELEASE_TILE_STORE_BYTES,
    UNSCALE_HOST_BYTES,
    FRESH_PAGE_D2H_Bps,
    unscale_s,
)
from sim.trace.generator import transformer_trace
from tests.helpers import chain_topology
from tests.policy_helpers import run

GiB = 2.0**30


def _trace():
    return transformer_trace(
        "gpt",
        name="g",
        layers=4,
        hidden=512,
        heads=8,
        seq_len=128,
        vocab=1000,
        microbatch_size=1,
        gpu_model="x",
        peak_flops=1e12,
    )


def test_path_bytes_are_the_ops_of_deepspeeds_code():
    """Bucket copy 2+2; norm in double 2+8+8; the release's float(x.float().sum()) 2+4+4,
    today's isnan/isinf check 6+5+5+3+5+4; the fp32 cast 2+4. CPU Adam: 4 loads and 3 stores
    of fp32; the release's store into the pinned tile and its read for ownership; the unscale
    mul_: 1 load, 1 store."""
    assert BUCKET_COPY_BYTES == 4
    assert RELEASE_GRAD_PATH_BYTES == 18 + 10 + 6 == 34
    assert GRAD_PATH_BYTES == 18 + 28 + 6 == 52
    assert (ADAM_HOST_BYTES, UNSCALE_HOST_BYTES, RELEASE_TILE_STORE_BYTES) == (28, 8, 8)
    assert unscale_s(7e9, 2e9) == pytest.approx(7e9 / (2e9 * 3.5))  # 1.0 s


@pytest.mark.parametrize("policy", ["zero_offload:1:overlap", "zero_offload:1:overlap:release"])
def test_overlap_still_waits_and_the_path_is_charged(policy):
    """With overlap_comm the per-parameter overflow check still reads back after each copy, so
    the plan's moves are blocking and nothing streams beside the backward; the step's GPU time
    is P * bytes / HBM rate (the test topology models no host ops), and the host step is CPU
    Adam plus the unscale pass at 28/8 of its rate."""
    trace = _trace()
    topo = chain_topology(1, memory_bytes=64 * GiB)
    res, met, _ = run(trace, topo, policy, p=1, m=1, schedule="gpipe")
    (plan,) = res.sim_input.plans[0]
    gpu, host = topo.gpu(0), topo.host("cpu0")
    P = sum(x.param_bytes for x in trace.layers) / 2
    per_param = RELEASE_GRAD_PATH_BYTES if policy.endswith("release") else GRAD_PATH_BYTES
    assert plan.blocking_moves and plan.grad_stream_bytes == 0
    assert plan.optimizer_s == pytest.approx(P * (4 + per_param) / gpu.memory_bound_Bps)
    rate = host.adam_params_per_s
    adam = 36 / 28 if policy.endswith("release") else 1.0  # the release's tile store + RFO
    assert plan.host_optimizer_s == pytest.approx(P / rate * adam + P / (rate * 28 / 8))
    assert met.fits


def test_cpu_ckpt_moves_the_checkpoints_to_the_host():
    """DeepSpeed's cpu_checkpointing: the checkpoints that full recompute keeps on the GPU (the
    layer inputs) go to the host between F and B, and only they; without recompute there is
    nothing to move (an error)."""
    trace = _trace()
    topo = chain_topology(1, memory_bytes=64 * GiB)
    res, _, _ = run(trace, topo, "zero_offload:1:recompute", p=1, m=1, schedule="gpipe")
    (kept,) = res.sim_input.plans[0]
    res, met, log = run(
        trace, topo, "zero_offload:1:recompute:cpu_ckpt", p=1, m=1, schedule="gpipe"
    )
    (plan,) = res.sim_input.plans[0]
    assert kept.resident_act_bytes > 0 and kept.swap_bytes == 0
    assert plan.swap_bytes == pytest.approx(kept.resident_act_bytes)
    assert plan.resident_act_bytes == 0 and plan.swap_target == "cpu0"
    assert plan.recompute_bytes == pytest.approx(kept.recompute_bytes)
    assert any(e.kind == "swap_out" for e in log.events) and met.fits
    with pytest.raises(ValueError, match="add ':recompute'"):
        parse_policy("zero_offload:1:cpu_ckpt")


@pytest.mark.parametrize("m", [1, 2])
def test_release_cpu_ckpt_charges_the_page_faults_of_fresh_host_buffers(m):
    """At the release every checkpoint goes into untouched pageable pages: per micro-batch the
    copy takes swap / (1 GiB / 0.5479 s) instead of swap / 10 GB/s (the test link, no latency),
    and the difference is charged in the step's GPU time; today's DeepSpeed pre-touches the
    pages, so without ``release`` nothing is added."""
    assert FRESH_PAGE_D2H_Bps == pytest.approx(1.9597e9, rel=1e-4)
    trace = _trace()
    topo = chain_topology(1, memory_bytes=64 * GiB)
    steps = {}
    for policy in ("recompute:release", "recompute:release:cpu_ckpt", "recompute:cpu_ckpt",
                   "recompute"):  # fmt: skip
        res, _, _ = run(trace, topo, f"zero_offload:1:{policy}", p=1, m=m, schedule="gpipe")
        steps[policy] = res.sim_input.plans[0][0]
    swap = steps["recompute:release:cpu_ckpt"].swap_bytes
    want = m * swap * (1 / FRESH_PAGE_D2H_Bps - 1 / 10e9)
    added = steps["recompute:release:cpu_ckpt"].optimizer_s - steps["recompute:release"].optimizer_s
    assert swap > 0 and added == pytest.approx(want)
    assert steps["recompute:cpu_ckpt"].optimizer_s == pytest.approx(steps["recompute"].optimizer_s)


def test_each_replica_runs_the_path_on_its_partition():
    """With two replicas every one copies all P gradients into its bucket (4 B each) but runs
    the norm, check and cast only on its P / 2: (4 P + 34 P / 2) / HBM rate at the release."""
    trace = _trace()
    topo = chain_topology(2, memory_bytes=64 * GiB)
    res, _, _ = run(trace, topo, "zero_offload:1:release", p=1, w=2, m=1, schedule="gpipe")
    P = sum(x.param_bytes for x in trace.layers) / 2
    for (plan,) in res.sim_input.plans:
        expected = (4 * P + 34 * P / 2) / topo.gpu(0).memory_bound_Bps
        assert plan.optimizer_s == pytest.approx(expected)
