"""The torch backend on CPU: models, profiling, calibration and multi-process replays (gloo).

Replays run 2 ranks of tiny models (hidden 32, seq 16) and compare with a single-process
reference, as torch's own pipelining tests do (schedules.md §4.5).
"""

from __future__ import annotations

import functools
import json
import os
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from backends.torch.models.transformer import (  # noqa: E402
    ModelSpec,
    build_layers,
    build_stage,
    lm_loss,
    microbatch,
)
from backends.torch.profile.saved_bytes import SavedBytes  # noqa: E402
from backends.torch.replay.dumps import load_dumps  # noqa: E402
from backends.torch.replay.job import ReplayResult, collect_result  # noqa: E402
from backends.torch.replay.launch import ReplayError, ReplayJob, replay, run_ranks  # noqa: E402
from tests.helpers import REPLAY_TARGETS, replay_in_turn  # noqa: E402

SPEC = ModelSpec(name="tiny", kind="gpt", layers=2, hidden=32, heads=2, seq_len=16, vocab=64)
FAST = {"pg_timeout_s": 30.0, "timeout_s": 90.0}


def _job(**kw: object) -> ReplayJob:
    base = {
        "model": SPEC.to_dict(),
        "stages": 2,
        "microbatches": 4,
        "microbatch_size": 2,
        "iterations": 1,
        "warmup_iterations": 0,
        **FAST,
    }
    return ReplayJob(**{**base, **kw})


def _reference_grads(params: dict[str, torch.Tensor] | None, first_mb: int, m: int, b: int = 2):
    """Mean-loss gradients of micro-batches ``first_mb ..`` in one process, and their losses."""
    model = torch.nn.Sequential(*build_layers(SPEC, 0))
    if params is not None:
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(params[n])
    losses = []
    for i in range(m):
        ids, targets = microbatch(SPEC, b, 0, first_mb + i)
        loss = lm_loss(model(ids), targets)
        (loss / m).backward()
        losses.append(loss.item())
    return {n: p.grad for n, p in model.named_parameters()}, losses


@functools.cache  # one reference for the nine replays of the first 4 micro-batches (read only)
def _full_reference():
    """:func:`_reference_grads` of micro-batches 0-3 from the initial weights."""
    return _reference_grads(None, 0, 4)


def _load_dumps(path: Path) -> tuple[list[dict], dict[str, torch.Tensor]]:
    dumps = load_dumps(path)
    grads = [{k: v[0] for k, v in dumps.grads[s].items()} for s in sorted(dumps.grads)]
    return grads, {k: v[0] for k, v in dumps.params.items()}


def _worker_children() -> list[int]:
    """Live rank processes started by this process: its descendants whose command line is the
    worker's (a rank forked from the forkserver, backends.torch.replay.start, is a grandchild,
    its command line rewritten to the worker's)."""
    parents: dict[int, int] = {}
    commands: dict[int, bytes] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if stat[0] != "Z":
            parents[int(pid)], commands[int(pid)] = int(stat[1]), cmd

    def descends(pid: int) -> bool:
        while pid in parents and pid != os.getpid():
            pid = parents[pid]
        return pid == os.getpid()

    return [
        pid
        for pid, cmd in commands.items()
        if pid != os.getpid() and b"backends.torch.replay.worker" in cmd and descends(pid)
    ]


def test_stage_weights_equal_full_model_and_chain_forward_matches() -> None:
    full = torch.nn.Sequential(*build_layers(SPEC, 3))
    stages = [build_stage(SPEC, [0, 2], s, 3) for s in range(2)]
    named = {**stages[0].global_named_parameters(), **stages[1].global_named_parameters()}
    for n, p in full.named_parameters():
        torch.testing.assert_close(named[n], p, rtol=0, atol=0)
    ids, _ = microbatch(SPEC, 2, 0, 0)
    torch.testing.assert_close(stages[1](stages[0](ids)), full(ids))


def test_saved_bytes_counts_once_and_frees() -> None:
    lin = torch.nn.Linear(8, 8)
    counter = SavedBytes(lin.parameters())
    x = torch.ones(4, 8, requires_grad=True)
    with counter.hooks():
        y = (lin(x) * lin(x)).sum()  # x saved twice by two linears: one storage
    assert counter.live_bytes == 4 * 8 * 4 * 3  # x once, the two linear outputs (mul saves both)
    y.backward()
    assert counter.live_bytes == 0 and counter.peak_bytes == 4 * 8 * 4 * 3


def test_cpu_profile_times_layers_under_the_replays_counting_hooks(monkeypatch) -> None:
    """Every timed forward, and every forward before a timed backward, packs its saved tensor
    through SavedBytes as the CPU replay's forward does: (warmup + reps) * 2 packs of the one
    tensor ``x * x`` saves (it saves x twice, one pack each), plus the act_bytes count."""
    from backends.torch.profile.layers import profile_layer

    packs = []
    original = SavedBytes.pack
    monkeypatch.setattr(SavedBytes, "pack", lambda self, t: packs.append(1) or original(self, t))
    profile_layer("sq", lambda x: x * x, [], torch.ones(3), torch.device("cpu"),
                   False, warmup=1, reps=2)  # fmt: skip
    assert len(packs) == (1 + 2) * 2 * 2 + 2


def test_replay_job_rejects_bad_input_and_torch_has_the_gloo_fix() -> None:
    from backends.torch.replay.torch_schedules import has_gloo_p2p_fix

    assert _job(schedule="2BW", microbatches=2).schedule == "pipedream_2bw"
    with pytest.raises(ValueError, match="unknown schedule 'zb'"):
        _job(schedule="zb")
    with pytest.raises(ValueError, match="needs microbatches >= stages"):
        _job(schedule="1f1b", microbatches=1)
    with pytest.raises(ValueError, match="backend 'torch' runs only"):
        _job(schedule="pipemare", backend="torch")
    with pytest.raises(ValueError, match="unknown replay job fields"):
        ReplayJob.from_dict({"schedul": "gpipe"})
    assert has_gloo_p2p_fix()  # schedules.md §4.5: torch >= 2.8 waits on every gloo work


def test_profile_model_writes_a_trace(tmp_path: Path) -> None:
    from backends.torch.profile.layers import profile_model
    from sim.trace.native import read_trace

    trace = profile_model(
        SPEC, microbatch_size=2, warmup=1, reps=2, split_backward=True, path=tmp_path / "tiny"
    )
    assert [layer.name for layer in trace.layers] == ["embedding", "block.0", "block.1", "head"]
    assert all(layer.fwd_s > 0 and layer.bwd_s > 0 for layer in trace.layers)
    block = trace.layers[1]
    assert block.out_bytes == 2 * 16 * 32 * 4 and block.act_bytes > block.out_bytes
    assert block.param_bytes == (12 * 32 * 32 + 13 * 32) * 4
    assert trace.layers[-1].out_bytes == 0
    assert trace.provenance["torch"] == str(torch.__version__)
    assert read_trace(tmp_path / "tiny").layers[1].act_bytes == block.act_bytes


# -- the nine gradient replays, in one launch --------------------------------------------------
# test_replay_gradients_equal_single_process (4) and test_multi_stage_csv_replay_equals_single_
# process (5) replay the same tiny GPT on 2 ranks. Their jobs run one after another in one launch
# of two rank processes (each process starts Python and imports torch: about 2 CPU seconds), once
# per session; each test then checks its own job's result (the launcher's collect_result of its
# ranks' statistics) and its own gradient dumps, as before.
GRADIENT_JOBS = [
    ("ours", "gpipe", False),
    ("ours", "1f1b", False),
    ("torch", "gpipe", False),
    ("torch", "1f1b", True),
    *(
        ("torch", s, True)
        for s in (
            "interleaved_1f1b",
            "looped_bfs",
            "interleaved_zero_bubble",
            "zbv_zero_bubble",
            "dualpipe_v",
        )  # fmt: skip
    ),
]


def _gradient_job(folder: Path, backend: str, schedule: str, csv: bool) -> ReplayJob:
    dumps = folder / f"{backend}-{schedule}"
    return _job(schedule=schedule, backend=backend, torch_csv=csv, dump_dir=str(dumps))


def _make_gradient_replays(folder: Path) -> None:
    jobs = [_gradient_job(folder, *key) for key in GRADIENT_JOBS]
    for job in jobs:
        Path(job.dump_dir).mkdir()
    payload = {"jobs": [[REPLAY_TARGETS[j.backend], j.to_dict()] for j in jobs]}
    ranks = run_ranks(
        "tests.helpers:run_jobs_in_turn",
        payload,
        nproc=2,
        timeout_s=len(jobs) * FAST["timeout_s"],
        pg_timeout_s=FAST["pg_timeout_s"],
        threads=jobs[0].threads,
    )
    (folder / "ranks.json").write_text(json.dumps(ranks))


@pytest.fixture
def gradient_replay(session_once):
    """``gradient_replay(backend, schedule, csv)``: the job's result and its dumps' folder."""

    def get(backend: str, schedule: str, csv: bool) -> tuple[ReplayResult, Path]:
        folder = session_once("gradient-replays", _make_gradient_replays)
        ranks = json.loads((folder / "ranks.json").read_text())
        i = GRADIENT_JOBS.index((backend, schedule, csv))
        job = _gradient_job(folder, backend, schedule, csv)
        return collect_result(job, [rank[i] for rank in ranks]), Path(job.dump_dir)

    return get


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "backend,schedule,csv",
    [
        ("ours", "gpipe", False),
        ("ours", "1f1b", False),
        ("torch", "gpipe", False),
        ("torch", "1f1b", True),
    ],
)
def test_replay_gradients_equal_single_process(
    gradient_replay, backend: str, schedule: str, csv: bool
) -> None:
    result, dumps = gradient_replay(backend, schedule, csv)
    assert result.all_actions_done, (result.action_counts, result.expected_action_counts)
    grads, _ = _load_dumps(dumps)
    ref, ref_losses = _full_reference()
    assert set(grads[0]) == set(ref)
    for name, g in ref.items():
        torch.testing.assert_close(grads[0][name], g, rtol=1e-5, atol=4e-5, msg=name)
    torch.testing.assert_close(torch.tensor(result.losses), torch.tensor(ref_losses))
    assert result.iteration_time_s > 0 and len(result.peak_memory_bytes) == 2


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_2bw_update_is_one_step_stale(tmp_path: Path) -> None:
    lr, m, steps = 0.5, 2, 3
    result = replay(
        _job(
            schedule="pipedream_2bw",
            microbatches=m,
            iterations=steps,
            lr=lr,
            dump_dir=str(tmp_path),
        )
    )
    assert result.all_actions_done and all(map(torch.isfinite, torch.tensor(result.losses)))
    assert [mem["versions"] for mem in result.memory] == [2.0, 2.0]
    _, params = _load_dumps(tmp_path)
    w0 = {
        n: p.detach().clone()
        for n, p in torch.nn.Sequential(*build_layers(SPEC, 0)).named_parameters()
    }
    prev, cur, sgd = w0, w0, w0
    for k in range(steps):  # W(t+1) = W(t) - lr * grad f_t(W(t-1)), W(-1) = W(0)
        g, _ = _reference_grads(prev, k * m, m)
        prev, cur = cur, {n: cur[n] - lr * g[n] for n in cur}
        g_sgd, _ = _reference_grads(sgd, k * m, m)
        sgd = {n: sgd[n] - lr * g_sgd[n] for n in sgd}
    for name, w in cur.items():
        torch.testing.assert_close(params[name], w, rtol=1e-5, atol=4e-5, msg=name)
    assert any(not torch.allclose(params[n], sgd[n], atol=1e-4) for n in sgd)


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("schedule,versions", [("pipedream", [2.0, 1.0]), ("pipemare", [1.0, 1.0])])
def test_async_schedules_run_every_action(schedule: str, versions: list[float]) -> None:
    result = replay(_job(schedule=schedule, microbatches=2, iterations=2, warmup_iterations=1))
    assert result.all_actions_done
    assert len(result.losses) == 6 and all(map(torch.isfinite, torch.tensor(result.losses)))
    assert [mem["versions"] for mem in result.memory] == versions
    assert len(result.iteration_times_s) == 2


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_memory_policies_change_the_activation_peak() -> None:
    """2 stages of [embedding, block0] | [block1, head]: what each policy string replays, with
    per-stage specs (``a|b``) so that one replay checks two stages."""
    policies = (
        "none",
        "recompute|cpu_swap",
        "cpu_swap|recompute",
        "recompute:full:1|cpu_swap:0.5",
        "recompute:selective|recompute:full:1",
    )
    # the five replays one after another in one launch of the two ranks
    jobs = [_job(schedule="gpipe", memory_policy=policy) for policy in policies]
    runs = dict(zip(policies, replay_in_turn(jobs), strict=True))
    act = {p: [m["act_peak_bytes"] for m in r.memory] for p, r in runs.items()}
    host = {p: [m["host_act_peak_bytes"] for m in r.memory] for p, r in runs.items()}
    none = act["none"]
    recompute = [act["recompute|cpu_swap"][0], act["cpu_swap|recompute"][1]]
    swapped = [host["cpu_swap|recompute"][0], host["recompute|cpu_swap"][1]]
    assert all(a < b for a, b in zip(recompute, none, strict=True))
    assert act["cpu_swap|recompute"][0] == 0 and act["recompute|cpu_swap"][1] == 0
    # like torch's save_on_cpu, every saved tensor gets its own host copy (no sharing)
    assert all(h >= a for h, a in zip(swapped, none, strict=True))
    # recompute:full:1 checkpoints each stage's first layer: stage 0's is the embedding (not a
    # block: nothing changes, and a note says so), stage 1's is block1 (= full recompute)
    half = "recompute:full:1|cpu_swap:0.5"
    assert act[half][0] == none[0] and any("non-block layers" in n for n in runs[half].notes)
    # cpu_swap:0.5 swaps the first of stage 1's two layers: block1 goes to host, the head stays
    assert 0 < host[half][1] < swapped[1] and 0 < act[half][1] < none[1]
    assert any("first 1 of 2 layers" in n for n in runs[half].notes)
    # selective recompute is not replayed: it runs as none and says so
    sel = "recompute:selective|recompute:full:1"
    assert act[sel] == [none[0], recompute[1]]
    assert any("not replayed" in n for n in runs[sel].notes)


def test_replay_reads_the_simulators_policy_spec() -> None:
    from backends.torch.replay.job import policy_problems
    from backends.torch.replay.memory import replay_policy

    blocks = [False, True, True, False]  # embedding, block, block, head
    assert replay_policy("recompute", 0, 1, blocks).checkpoint == {1, 2}
    assert replay_policy("recompute:full:2", 0, 1, blocks).checkpoint == {1}
    assert replay_policy("none|recompute:full:3", 1, 2, blocks).checkpoint == {1, 2}
    assert replay_policy("none|recompute:full:3", 0, 2, blocks).checkpoint == set()
    assert replay_policy("cpu_swap:0.25", 0, 1, blocks).swap == {0}
    assert replay_policy("cpu_swap", 0, 1, blocks).swap == {0, 1, 2, 3}
    assert replay_policy("cpu_swap", 0, 1, blocks).notes == ()
    assert replay_policy("recompute:selective", 0, 1, blocks).checkpoint == set()
    assert policy_problems("none|cpu_swap:0.5", 2) == []
    assert "d2d_swap" in policy_problems("d2d_swap", 2)[0]
    assert "chunked" in policy_problems("none|chunked", 2)[0]
    assert "names 2 stages, not 3" in policy_problems("none|none", 3)[0]
    assert "unknown memory policy 'swap'" in policy_problems("swap", 1)[0]
    with pytest.raises(ValueError, match="memory_policy: 'auto' uses auto"):
        _job(memory_policy="auto")
    with pytest.raises(ValueError, match="only none, recompute and cpu_swap"):
        replay_policy("zero_offload", 0, 1, blocks)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_failing_rank_ends_the_run_with_its_error() -> None:
    t0 = time.monotonic()
    with pytest.raises(
        ReplayError, match=r"rank 1 failed: RuntimeError: injected failure at action 1F1"
    ):
        replay(_job(schedule="1f1b", fail_on="1F1"))
    assert time.monotonic() - t0 < 30
    assert _worker_children() == []


def hang_on_rank_1(payload: dict, ctx: object) -> None:
    """Rank function for the timeout test: rank 1 blocks forever on an event nobody sets (no
    sleep that could end); rank 0 waits for it in a barrier."""
    import threading

    import torch.distributed as dist

    if ctx.rank == 1:  # type: ignore[attr-defined]
        threading.Event().wait()
    dist.barrier()


HANG_TIMEOUT_S = 30  # generous: both ranks start (import torch, join the group) well within it


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_hanging_run_times_out_and_leaves_no_process() -> None:
    """Deterministic: nothing ends by itself; only the launcher's timeout stops the run, and its
    message names both ranks and shows rank 1 waiting inside ``hang_on_rank_1``."""
    t0 = time.monotonic()
    with pytest.raises(ReplayError) as err:
        run_ranks(
            "tests.test_backend_torch:hang_on_rank_1",
            {},
            nproc=2,
            timeout_s=HANG_TIMEOUT_S,
            pg_timeout_s=600,  # rank 0's barrier must not give up before the launcher does
        )
    message = str(err.value)
    assert f"run timed out after {HANG_TIMEOUT_S} s; ranks still running: [0, 1]" in message
    rank1 = message.split("--- rank 1 ---", 1)[1]
    assert "hang_on_rank_1" in rank1 and "wait" in rank1, message
    assert HANG_TIMEOUT_S <= time.monotonic() - t0 < HANG_TIMEOUT_S + 30
    assert _worker_children() == []


def test_ping_pong_latency_is_the_smallest_message():
    # One-way times 50 us at 0 B, 1 ms at 1 MB, 2 ms at 2 MB: the least-squares slope is
    # 1950 / 2e12 s/B (bandwidth 1.0256 GB/s), whose intercept would be 41.7 us; the latency
    # is the smallest message's 50 us (its bytes take no time). With 1 KB as the smallest
    # message the latency is its time less 1 KB at the fitted bandwidth.
    from backends.torch.calibrate.rank import fit_latency_bandwidth

    lat, bw = fit_latency_bandwidth([0, 1e6, 2e6], [5e-5, 1e-3, 2e-3])
    assert (lat, bw) == pytest.approx((5e-5, 2e12 / 1950))
    lat, bw = fit_latency_bandwidth([1e3, 1e6, 2e6], [6e-5, 1e-3, 2e-3])
    assert lat == pytest.approx(6e-5 - 1e3 / bw)
    # a falling time (noise): the largest message gives the bandwidth, the fastest the latency
    assert fit_latency_bandwidth([1e3, 1e6], [1e-4, 5e-5]) == pytest.approx((5e-5, 2e10))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_calibrate_writes_loadable_hardware(tmp_path: Path) -> None:
    from backends.torch.calibrate.hardware import calibrate
    from backends.torch.calibrate.rank import fit_latency_bandwidth
    from sim.hardware.loader import load_hardware

    assert fit_latency_bandwidth([0, 1e6, 2e6], [1e-5, 1e-5 + 1e-3, 1e-5 + 2e-3]) == pytest.approx(
        (1e-5, 1e9)
    )
    cal = calibrate(
        nproc=2,
        sizes=(2**10, 2**16, 2**20),
        reps=2,
        matmul_n=256,
        path=tmp_path / "hw.yaml",
        timeout_s=90,
    )
    topo = load_hardware(str(tmp_path / "hw.yaml"))
    assert [g.name for g in topo.gpus] == ["gpu0", "gpu1"] and topo.gpus[0].model == "cpu-rank"
    assert topo.gpus[0].peak_flops > 0 and topo.direct_link("gpu0", "gpu1").bandwidth_Bps > 0
    assert cal.ranks[0]["pairs"][0]["sizes"] == [2**10, 2**16, 2**20]
    # gloo's collectives measured between the 2 ranks, used by a 2-rank communicator
    assert sorted(t.kind for t in topo.collectives) == ["all_gather", "allreduce", "reduce_scatter"]
    assert all(
        t.ranks == 2 and len(t.sizes_bytes) == 8 and min(t.times_s) > 0 for t in topo.collectives
    )
    assert min(topo.gpus[0].tp_module_overhead_s) >= 0
    # our runtime's per-action time and the replay's step cost
    # (backends.torch.calibrate.runtime_costs)
    assert min(topo.gpus[0].action_overhead_s) >= 0
    per_tensor_s, bandwidth_Bps = topo.gpus[0].step_cost("sgd")
    assert per_tensor_s >= 0 and bandwidth_Bps > 0 and topo.gpus[0].step_cost("adam") is not None


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "pipedream_2bw", "pipedream", "pipemare"])
def test_expected_actions_are_every_microbatch_once_and_the_steps(schedule: str) -> None:
    """The closed form the replay checks against: the program of every rank runs exactly it."""
    from collections import Counter

    from backends.torch.replay.runtime import expected_actions, rank_program

    job = _job(
        schedule=schedule, stages=3, nproc=3, microbatches=3, iterations=2, warmup_iterations=1
    )
    steps = 9 if schedule == "pipedream" else 3  # PipeDream steps after every micro-batch
    for rank in range(3):
        want = expected_actions(job, rank)
        assert sum(want.values()) == 2 * 9 + steps and set(want.values()) == {1}
        assert f"{rank}STEP{steps - 1}" in want and f"{rank}B8" in want
        assert Counter(str(a) for a in rank_program(job, rank)) == want


def test_a_missing_repeated_or_foreign_action_fails_all_actions_done() -> None:
    from collections import Counter

    from backends.torch.replay.job import ReplayResult
    from backends.torch.replay.runtime import action_tally

    due = Counter(["0F0", "0F1", "0B0", "0B1", "0STEP0"])

    def done(executed: list[str]) -> bool:
        counts, expected = action_tally(Counter(executed), due)
        return ReplayResult(
            1.0, [1.0], [0.0], [{}], [counts], [expected], [], [], {}
        ).all_actions_done

    assert done(["0F0", "0F1", "0B0", "0B1", "0STEP0"])
    assert not done(["0F0", "0F1", "0B0", "0STEP0"])  # 0B1 never ran
    assert not done(["0F0", "0F0", "0B0", "0B1", "0STEP0"])  # 0F0 twice, 0F1 never: same counts
    assert not done(["0F0", "0F1", "0B0", "0B1", "0STEP0", "0STEP1"])


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "schedule",
    ["interleaved_1f1b", "looped_bfs", "interleaved_zero_bubble", "zbv_zero_bubble", "dualpipe_v"],
)
def test_multi_stage_csv_replay_equals_single_process(gradient_replay, schedule: str) -> None:
    """2 ranks x 2 stage chunks (4 stages: embedding, block 0, block 1, head) through torch's
    _PipelineScheduleRuntime from our CSV on gloo: completes, and its losses and gradients
    equal a single-process reference (torch's test_grad_with_manual tolerances)."""
    result, dumps = gradient_replay("torch", schedule, True)
    assert result.all_actions_done, (result.action_counts, result.expected_action_counts)
    grads, _ = _load_dumps(dumps)
    ref, ref_losses = _full_reference()
    assert set(grads[0]) == set(ref)
    for name, g in ref.items():
        torch.testing.assert_close(grads[0][name], g, rtol=1e-5, atol=4e-5, msg=name)
    torch.testing.assert_close(torch.tensor(result.losses), torch.tensor(ref_losses))
