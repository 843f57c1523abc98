"""The sweep flow (issue 17): plug-ins answer for themselves, the planner's busiest-stage bound,
and each winner simulated and drawn once."""

from __future__ import annotations

import io
import itertools
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

import sim.run
from sim.memory.registry import POLICIES, parse_policy, replay_plan, replay_problems
from sim.memory.replay import NotReplayable
from sim.memory.states import state_bytes
from sim.plan.bounds import min_bottleneck_s
from sim.plugins import Registry, UnknownName
from sim.point.rows import BestRows, ResultRow

TWO_MODELS = {
    "name": "two",
    "hardware": "dgx1-v100-16gb",
    "models": [
        {"name": "bert", "trace": "bert-large", "global_batch": 8},
        {"name": "gnmt", "trace": "gnmt16", "global_batch": 64, "microbatch_size": 16},
    ],
    "sweep": {"schedule": ["gpipe", "1f1b"], "stages": [2, 4], "microbatch_size": 1},
}


def _row(model: str, tput: float, stages: int = 2) -> ResultRow:
    return ResultRow(
        model=model,
        schedule="1f1b",
        stages=stages,
        dp_width=1,
        microbatch_size=1,
        microbatches=8,
        memory_policy="none",
        global_batch=8,
        parameters=1,
        iteration_time_s=8 / tput,
        throughput_samples_per_s=tput,
        peak_memory_bytes=1.0,
        fits=True,
    )


def test_registry_looks_names_up_once_and_lists_the_known_ones():
    class Fast:
        name = "fast"

    class Slow:
        name = "slow"

    kinds = Registry("profile", [Fast, Slow], aliases={"quick": "fast"})
    assert kinds.get("Fast") is Fast and kinds.get("quick") is Fast and "QUICK" in kinds
    assert kinds.names() == ["fast", "slow"] and kinds.names(aliases=True)[-1] == "quick"
    with pytest.raises(UnknownName, match="unknown profile 'medium'; known: fast, slow"):
        kinds.get("medium")
    with pytest.raises(ValueError, match="names no class"):
        Registry("profile", [Fast], aliases={"x": "nothing"})


def test_each_policy_class_gives_its_own_state_floor():
    """Bytes per parameter kept on the GPU at least, fp16 + Adam (2 + 2 + 12 = 16 per
    parameter, memory.md §1), 2 weight versions of 2 bytes each, data-parallel width 4."""
    sb = state_bytes("fp16", "adam")
    floor = {
        text: parse_policy(text).min_state_bytes_per_param(sb, 4, 2, 2.0)
        for text in (
            "none",
            "recompute:full",
            "cpu_swap:0.5",
            "d2d_swap",
            "d2d_swap+recompute",
            "zero_offload",
            "zero3",
            "zero3:offload",
            "chunked",
            "auto",
            "none|zero_offload",
        )
    }
    assert floor == {
        "none": 18.0,  # 2 versions x 2 + 2 + 12
        "recompute:full": 18.0,
        "cpu_swap:0.5": 18.0,
        "d2d_swap": 16.0,  # one version: extra versions may move to peers
        "d2d_swap+recompute": 16.0,
        "zero_offload": 2.0,  # the 16-bit weights
        "zero3": 4.0,  # a 1/4 shard of 16
        "zero3:offload": 0.0,
        "chunked": 0.0,
        "auto": 0.0,
        "none|zero_offload": 2.0,  # the least of its stages'
    }
    kept = {t: parse_policy(t).keeps_every_stash() for t in ("none", "cpu_swap", "none|none")}
    assert kept == {"none": True, "cpu_swap": False, "none|none": True}
    modes = [parse_policy(t).bound_recompute_mode() for t in ("recompute", "recompute:full:2")]
    assert modes == ["full", None]  # only every layer's recompute counts in the bound


def test_the_replay_asks_the_policy_class():
    blocks = [False, True, True, False]
    assert replay_plan("none|cpu_swap:0.5", 1, 2, blocks).swap == {0, 1}
    assert [c.name for c in POLICIES.classes() if c.replayable] == ["none", "recompute", "cpu_swap"]
    with pytest.raises(
        NotReplayable, match="stage 0: 'chunked'.*only none, recompute and cpu_swap"
    ):
        replay_plan("chunked", 0, 1, blocks)
    assert "uses auto, chunked" in replay_problems("auto|chunked|none", 3)[0]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    work=st.lists(st.sampled_from([0.0, 0.25, 1.0, 3.0, 0.1, 7.5]), min_size=1, max_size=8),
    parts=st.integers(1, 9),
)
def test_min_bottleneck_is_the_best_contiguous_split(work, parts):
    """Against every split of ``work`` into ``parts`` contiguous parts (brute force)."""
    n = len(work)
    best = min(
        max(sum(work[a:b]) for a, b in itertools.pairwise((0, *cuts, n)))
        for cuts in itertools.combinations(range(1, n), min(parts, n) - 1)
    )
    got = min_bottleneck_s(work, parts)
    assert got <= best * (1 + 1e-12)
    assert got >= best * (1 - 1e-11)


def test_best_rows_keep_the_winners_log_only():
    best = BestRows()
    slow, fast, other = _row("a", 2.0), _row("a", 4.0), _row("b", 1.0)
    best.offer(slow, "log-slow")  # type: ignore[arg-type]
    best.offer(fast, "log-fast")  # type: ignore[arg-type]
    best.offer(slow, "again")  # type: ignore[arg-type]
    best.offer(other, None)
    assert best.log_of(fast) == "log-fast" and best.log_of(slow) is None
    assert best.log_of(other) is None  # read from the cache: simulated by the caller
    seeded = BestRows(best.keys())
    assert not seeded.improves(slow) and seeded.improves(_row("a", 4.0, stages=2))


def test_each_winner_is_simulated_and_drawn_once(tmp_path, monkeypatch):
    """Two models: the sweep's own logs draw each winner's plots once (the first model's are
    copied to the top level, byte for byte); nothing is simulated after the sweep."""
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(TWO_MODELS))
    drawn: list[Path] = []
    artifacts = sim.run.winner_artifacts

    def counting(out: Path, log, title: str):
        drawn.append(out)
        return artifacts(out, log, title)

    def no_second_simulation(*args, **kwargs):
        raise AssertionError("a winner was simulated again")

    monkeypatch.setattr(sim.run, "winner_artifacts", counting)
    monkeypatch.setattr(sim.run, "evaluate", no_second_simulation)
    out = tmp_path / "out"
    for jobs in (1, 2):
        drawn.clear()
        code = sim.run.run_experiment(
            path,
            out_dir=out,
            jobs=jobs,
            use_cache=False,
            plots=True,
            console=Console(file=io.StringIO()),
        )
        assert code == 0
        assert sorted(p.name for p in drawn) == ["bert", "gnmt"]
        for name in ("timeline.json", "timeline.png", "memory_per_gpu.png"):
            assert (out / name).read_bytes() == (out / "bert" / name).read_bytes()
