"""Offload memory as PatrickStar, DeepSpeed, torch and Linux allocate it: one hand-computed case
per mechanism, and the papers' setups (no model fits that the paper could not fit)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sim.config import parse_experiment
from sim.hardware.host_memory import (
    EXACT,
    cached_pinned_bytes,
    os_usable_bytes,
    pinned_block_bytes,
    pinned_bytes,
)
from sim.hardware.parts import Host
from sim.memory.chunk_layout import chunk_layout
from sim.memory.chunk_plan import chunk_states
from sim.memory.chunked import ChunkedPolicy
from sim.memory.chunks import pack, utilization
from sim.memory.context import StageContext
from sim.memory.deepspeed import (
    CPU_ADAM_STAGING_BYTES,
    ipg_buffer_bytes,
    zero3_offload_host,
    zero_offload_host,
)
from sim.memory.memtracer import (
    chunk_candidates,
    chunkable_gpu_bytes,
    gpu_adam_chunk_count,
    gpu_adam_chunks,
    gpu_framework_bytes,
    host_chunk_cap_bytes,
    host_framework_bytes,
    search_score,
)
from sim.memory.states import StateBytes
from sim.memory.tensors import block_hidden, param_groups, stage_groups
from sim.memory.zero_offload import base_plan
from sim.plan.point_row import point_row
from sim.plan.sweep import expand
from sim.point.experiment import prepare
from sim.trace.generator import transformer_trace
from sim.trace.schema import LayerProfile, Trace
from tests.helpers import chain_topology
from tests.policy_helpers import run

MiB, GiB = 2**20, 2**30


def _small_gpt(layers: int, hidden: int, heads: int) -> Trace:
    """An analytic GPT trace of ``layers`` x ``hidden`` (``heads`` heads), 64 tokens, a
    vocabulary of 512, micro-batch 1, fp16, timed on a GPU "x" of 1e14 FLOP/s."""
    return transformer_trace(
        "gpt",
        name="g",
        layers=layers,
        hidden=hidden,
        heads=heads,
        seq_len=64,
        vocab=512,
        microbatch_size=1,
        gpu_model="x",
        peak_flops=1e14,
    )


def test_chunks_pack_next_fit_and_refuse_an_oversized_group():
    """PatrickStar appends a module's parameter list to the last chunk or opens a new one:
    [3, 2, 4, 1, 5] into chunks of 5 -> 3+2 | 4+1 | 5; [3, 3, 3] leaves 2 of 5 empty in each
    (utilization 9/15); a group of 6 does not fit a chunk of 5."""
    assert pack([3, 2, 4, 1, 5], 5) == [5, 5, 5]
    used = pack([3, 3, 3], 5)
    assert used == [3, 3, 3] and utilization(used, 5) == pytest.approx(0.6)
    with pytest.raises(ValueError, match="does not fit"):
        pack([2, 6], 5)


def test_pinned_allocations_round_to_a_power_of_two():
    """torch 2's CachingHostAllocator: 1120 MiB (a 280M-element fp32 chunk) takes 2 GiB, 1 GiB
    takes 1 GiB; torch 1 allocated the exact size; blocks are rounded one by one."""
    assert pinned_block_bytes(1120 * MiB) == 2 * GiB
    assert pinned_block_bytes(GiB) == GiB
    assert pinned_block_bytes(1120 * MiB, EXACT) == 1120 * MiB
    assert pinned_bytes([3, 5, 8]) == 4 + 8 + 8


def test_cached_pinned_blocks_keep_each_size_class_peak():
    """Freed pinned blocks stay cached in their size class: 3 fp16 chunks (192 MiB -> 256 MiB
    blocks) at one moment and 2 fp32 chunks (384 MiB -> 512 MiB) at another keep
    3 * 256 + 2 * 512 MiB, not the larger of the two moments."""
    assert cached_pinned_bytes({192 * MiB: 3, 384 * MiB: 2}) == (3 * 256 + 2 * 512) * MiB


def test_memtotal_is_installed_dram_less_the_page_map():
    """1 TiB installed: 1024 * 63/64 = 1008 GiB; a 1 TiB EPYC 7742 node with A100s reports
    MemTotal 1056649460 kB (within 0.1 %)."""
    assert os_usable_bytes(1024 * GiB) == 1008 * GiB
    assert os_usable_bytes(1024 * GiB) == pytest.approx(1056649460 * 1024, rel=1e-3)


def test_patrickstar_memtracer_budgets_by_hand():
    """T = 40 GiB, other tensors 10 GiB, w = 8, chunks of C = 256M elements (512 MiB fp16):
    chunkable 0.8 T - 10 - 8 * 0.5 = 18 GiB; with 10 owned chunks hybrid Adam's margin is
    32 - 10 - (10 + 7) * 0.5 = 13.5 GiB, i.e. 13.5 / (12 * 256 MiB) * 0.8 = 3.6 chunk groups;
    a host of 1008 GiB gives each of 8 ranks 0.8 * 126 GiB and keeps 0.2 * 126 from it; a
    1 GiB runtime leaves 0.2 * 40 - 1 = 7 GiB of the GPU to the framework."""
    T, C = 40 * GiB, 256 * MiB
    assert chunkable_gpu_bytes(T, 10 * GiB, 8, C, 2) == pytest.approx(18 * GiB)
    assert gpu_adam_chunks(T, 10 * GiB, 10, 8, C, 2) == pytest.approx(3.6)
    assert gpu_adam_chunks(T, 30 * GiB, 10, 8, C, 2) == 0.0
    assert host_chunk_cap_bytes(1008 * GiB, 8) == pytest.approx(0.8 * 126 * GiB)
    assert host_framework_bytes(1008 * GiB, 8) == pytest.approx(0.2 * 126 * GiB)
    assert gpu_framework_bytes(T, 1 * GiB) == pytest.approx(7 * GiB)


def test_patrickstar_gpu_adam_chunks_are_those_counted_below_the_margin():
    """``FP32ChunkReadBuffer`` counts the step's chunks 1, 2, 3, ... and sends chunk ``k`` to the
    GPU while ``k < margin``: a margin of 3.6 sends chunks 1-3, one of exactly 3 chunks 1-2,
    one of 1 or less none."""
    assert [gpu_adam_chunk_count(m) for m in (3.6, 3.0, 1.0, 0.5, 0.0)] == [3, 2, 0, 0, 0]


def test_transformer_layers_split_into_module_groups():
    """A block of 12h^2 + 13h parameters is GPT-2's six modules; the GPT head splits into its
    LayerNorm 2h and V*h; the largest group of a stage sets the smallest chunk."""
    h, V = 64, 1000
    block = LayerProfile("block.0", 1, 2, (12 * h * h + 13 * h) * 2, 0, 0)
    assert block_hidden(12 * h * h + 13 * h) == h and block_hidden(12 * h * h) is None
    groups = param_groups(block, 2)
    assert sum(groups) == 12 * h * h + 13 * h and max(groups) == 4 * h * h + 4 * h
    head = LayerProfile("head", 1, 2, (2 * h + V * h) * 2, 0, 0)
    assert stage_groups([block, head], 2)[-2:] == [2 * h, V * h]
    assert chunk_candidates([V * h])[0] == 88 * MiB  # PatrickStar's smallest search size


def test_chunk_size_is_the_search_s_smallest_footprint_that_fits():
    """PatrickStar's search recommends the size with the smallest overall chunk footprint among
    those that fit, untimed: groups of 60M and 50M elements fill chunks of 64M to 110/128 (two
    chunks, 0.859) and of 128M to 110/128 too (one chunk), a tie won by the smaller; of 96M
    to 110/192 (0.573), which loses to them however fast; any fitting size beats one that does
    not; sizes that do not fit go by bytes lacking, then by added time."""
    M = MiB
    g = [60 * M, 50 * M]
    fit_64 = search_score(g, 64 * M, 0.0, 9.0)
    fit_96 = search_score(g, 96 * M, 0.0, 1.0)
    fit_128 = search_score(g, 128 * M, 0.0, 9.0)
    assert fit_64 < fit_128 < fit_96
    assert fit_96 < search_score(g, 64 * M, 1.0, 0.0)
    assert search_score(g, 64 * M, 1.0, 5.0) < search_score(g, 64 * M, 2.0, 0.0)
    assert search_score(g, 64 * M, 1.0, 1.0) < search_score(g, 96 * M, 1.0, 5.0)


def test_chunked_plan_holds_whole_chunks_and_patrickstar_limits():
    """One stage, one replica, chunks of 2**20 elements, nothing streamed (a large GPU): the
    tiny model packs into n chunks; the GPU holds n fp16 chunks (2C each), hybrid Adam keeps k
    of the optimizer chunks there and the host the other n - k (12C each: three fp32 chunks,
    exact under PatrickStar's torch 1.x); the host keeps 0.2 of MemTotal from the chunks, the
    GPU 0.2 of its total less the runtime reserve."""
    trace = _small_gpt(layers=4, hidden=256, heads=4)
    topo = chain_topology(1, memory_bytes=8 * GiB)
    C = 2**20
    n = len(pack(stage_groups(trace.layers, 2), C))
    res, met, _ = run(trace, topo, "chunked:1", p=1, w=1, m=1, schedule="gpipe")
    (plan,) = res.sim_input.plans[0]
    k = round(plan.optimizer_bytes / (12 * C))
    assert plan.weight_bytes == n * 2 * C and 0 <= k <= n
    assert plan.host_bytes == pytest.approx((n - k) * 12 * C)
    assert plan.host_framework_bytes == pytest.approx(0.2 * topo.host_dram_bytes)
    runtime = plan.reserve_bytes + plan.allocator_bytes
    assert plan.framework_bytes == pytest.approx(max(0.0, 0.2 * 8 * GiB - runtime))
    assert met.fits


def test_v045_memory_tracer_reserves_a_chunk_group_with_msc():
    """PatrickStar up to v0.4.5 (its published figures' code) kept a group of w chunks free and
    counted a group's w - 1 remote chunks in hybrid Adam's margin also with MSC, which keeps
    one remote chunk live. w = 8, C = 2**20 elements of 2 bytes, one owned chunk, a GPU of
    T = 22.75 C / 0.8 bytes and other tensors below 3C: the chunks' room is 7 * 2C smaller
    than with MSC accounted; the margin is (0.8 T - sys - (1 + 1) 2C) / 12C * 0.8 > (18.75 -
    3) / 15 >= 1 chunk with MSC accounted, (0.8 T - sys - (1 + 7) 2C) / 12C * 0.8 < 6.75 / 15
    < 1 with v0.4.5's: one optimizer chunk on the GPU against none; one remote chunk live in
    both."""
    trace = _small_gpt(layers=4, hidden=256, heads=4)
    C = 2**20
    T = 22.75 * C / 0.8
    ctx = StageContext(
        0, 1, 0, 8, "gpu0", "cpu0", tuple(trace.layers), 1, 1, StateBytes(2, 2, 12), 2, T,
        chain_topology(8, memory_bytes=T),
    )  # fmt: skip
    act = base_plan(ctx, True)
    now, then = chunk_layout(ctx, act, C, True), chunk_layout(ctx, act, C, True, False)
    assert now.chunks == now.real == 1 and now.sys_bytes < 3 * C
    assert now.free_bytes - then.free_bytes == pytest.approx(7 * 2 * C)
    for v045, on_gpu in ((False, 1), (True, 0)):
        plan, _, _ = chunk_states(ctx, act, C, 8, True, True, v045)
        assert plan.optimizer_bytes == pytest.approx(on_gpu * 12 * C)
        assert plan.gather_live_bytes == pytest.approx(2 * C)
    assert ChunkedPolicy.from_args(["recompute", "msc", "v045"]).v045


def test_chunked_refuses_a_chunk_smaller_than_a_parameter_group():
    """PatrickStar raises when a module's parameters exceed the chunk: the plan does not fit
    and says why."""
    trace = _small_gpt(layers=2, hidden=1024, heads=8)
    topo = chain_topology(1, memory_bytes=64 * GiB)
    res, met, _ = run(trace, topo, "chunked:1", p=1, w=1, m=1, schedule="gpipe")
    assert not met.fits
    assert "refuses" in res.sim_input.plans[0][0].notes["warning"]


def test_deepspeed_offload_buffers_by_hand():
    """ZeRO-Offload, n = 1e9 parameters: 4n fp32 master pinned (4e9 B -> 2**32), 2n staging,
    4n fp32 gradients, 8n moments; gradient buffers of min(bucket, P) 16-bit elements, two
    with overlap_comm; CPU Adam's two pinned tiles of 128M floats: 1 GiB. ZeRO-3 offload: 18n."""
    n = 1e9
    assert zero_offload_host(n) == pytest.approx(2**32 + (2 + 4 + 8) * n)
    assert zero_offload_host(n, pinned=True) == pytest.approx(2**32 + 2**31 + 2**32 + 8 * n)
    assert ipg_buffer_bytes(5e8, 1e10, overlap=True) == 2 * 5e8 * 2
    assert ipg_buffer_bytes(5e8, 1e6, overlap=False) == 1e6 * 2
    assert CPU_ADAM_STAGING_BYTES == GiB
    assert zero3_offload_host(n) == 18 * n


def test_host_is_the_usable_dram_of_a_hand_built_server():
    """A Host built in code keeps the bytes it is given (the loader applies MemTotal)."""
    assert Host("cpu0", 100.0).dram_bytes == 100.0


# ------------------------------------------------------------- the papers' setups


ABOVE_PATRICKSTAR = ["ps-gpt-ds-60b", "ps-gpt-ds-68b", "ps-gpt-ds-70b", "ps-gpt-nv-76b"]
"""Models the shipped PatrickStar experiment leaves out because no policy fits them there."""


def _fits(path: str, model: str, policy: str) -> bool:
    """Whether ``model`` fits under ``policy`` at any point of the shipped experiment ``path``
    (with the models above PatrickStar's reach added to its grid)."""
    data = yaml.safe_load(Path(path).read_text())
    known = {m["name"] for m in data["models"]}
    data["models"] += [{"name": n, "trace": n} for n in ABOVE_PATRICKSTAR if n not in known]
    data["models"] = [m for m in data["models"] if m["name"] == model]
    exp = parse_experiment(data, file=path)
    prep = prepare(exp, path)
    points, _ = expand(prep)
    chosen = [p for p in points if p.model == model and p.memory_policy == policy]
    assert chosen, (path, model, policy)
    return any(bool(point_row(prep, pt)[0]["fits"]) for pt in chosen)


PAPER_LIMITS = [
    # PatrickStar on one 8x A100-40GB node with 1 TB: its largest is 68B (Tencent/PatrickStar
    # README, "It can train 68B model on 8xA100 with 1TB CPU memory"); nothing above fits.
    ("experiments/patrickstar-a100.yaml", "chunked:recompute", ["ps-gpt-ds-70b", "ps-gpt-nv-76b"]),
    # DeepSpeed ZeRO-3 there, as PatrickStar measured it (its DeepSpeed baseline runs
    # ds_zero_stage_3_config.json, no offload): 68B is "over 6x larger", i.e. below ~11B.
    ("experiments/patrickstar-a100.yaml", "zero3:recompute", ["ps-gpt3-18b"]),
    # ZeRO-Offload on one V100-32GB of a DGX-2: "over 13 billion parameters" (ATC'21 abstract).
    ("experiments/zero-offload-dgx2.yaml", "zero_offload:recompute", ["gpt3-15b", "gpt3-18b"]),
    ("experiments/zero-offload-dgx2.yaml", "zero_offload:48:recompute:overlap", ["gpt3-15b"]),
    # PyTorch alone there: 1.4B "the largest that can be trained" (same abstract).
    ("experiments/zero-offload-dgx2.yaml", "none", ["gpt2-4b"]),
]


@pytest.mark.parametrize(("path", "policy", "models"), PAPER_LIMITS)
def test_no_model_fits_that_its_paper_could_not_fit(path, policy, models):
    for model in models:
        assert not _fits(path, model, policy), (path, policy, model)


def test_the_papers_largest_patrickstar_model_class_still_fits():
    """The check above is not vacuous: PatrickStar fits GPT_DS_50B there (its v0.4.3 release:
    "It trains 50B model on a 8xA100 SuperPod node", CHANGE_LOG.md)."""
    assert _fits("experiments/patrickstar-a100.yaml", "ps-gpt-ds-50b", "chunked:recompute")
