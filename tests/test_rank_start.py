"""How a rank process starts (backends.torch.replay.start): forked from the forkserver, which has
imported torch, or as its own interpreter. Either way the rank is what ``python -m
backends.torch.replay.worker WORKDIR RANK`` started by the launcher would be: the launcher's
environment and working folder as they are now, its own session, that command line, and a
torch generator seeded anew."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from backends.torch.replay.launch import run_ranks  # noqa: E402
from backends.torch.replay.start import START_ENV  # noqa: E402


def describe(payload: dict, ctx: object) -> dict:
    """Rank function: what this rank process sees of itself."""
    import torch

    args = Path("/proc/self/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    return {
        "pid": os.getpid(),
        "session": os.getsid(0),
        "args": [a.decode() for a in args],
        "mark": os.environ.get("PIPESIM_TEST_MARK"),
        "cwd": os.getcwd(),
        "seed": torch.initial_seed(),
        "log": (ctx.workdir / f"rank{ctx.rank}.log").is_file(),  # type: ignore[attr-defined]
    }


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("start", ["fork", "exec"])
def test_a_rank_is_the_worker_command_in_the_launchers_environment(start, monkeypatch, tmp_path):
    monkeypatch.setenv(START_ENV, start)
    monkeypatch.setenv("PIPESIM_TEST_MARK", f"{start}-{tmp_path.name}")  # set after any server
    monkeypatch.chdir(tmp_path)
    ranks = run_ranks("tests.test_rank_start:describe", {}, nproc=2, timeout_s=120)
    for rank, seen in enumerate(ranks):
        assert seen["mark"] == f"{start}-{tmp_path.name}" and seen["cwd"] == str(tmp_path)
        assert seen["session"] == seen["pid"] and seen["log"]
        python, m, module, work, rank_arg = seen["args"]
        assert (python, m, module) == (sys.executable, "-m", "backends.torch.replay.worker")
        assert Path(work).name.startswith(f"pipesim-run-{os.getpid()}-ranks-")
        assert rank_arg == str(rank)
    assert ranks[0]["pid"] != ranks[1]["pid"] and ranks[0]["seed"] != ranks[1]["seed"]
