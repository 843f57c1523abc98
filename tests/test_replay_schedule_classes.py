"""The torch backend replays a schedule as the schedule's class says (issue 25): its weight
versions (``version_rule``), torch's own class for it (``torch_class``), whether only the CSV
runtime runs it and whether the tensor-parallel replay does, all read from class attributes, so
a new schedule is replayed without editing the backend. Each test defines its schedule here."""

from __future__ import annotations

from typing import ClassVar

import pytest

from backends.torch.replay.job import ReplayJob, needs_torch_csv, torch_runs, tp_runs
from sim.schedules import OneFOneB, PipeDream, ScheduleError
from sim.schedules.interleaved_1f1b import Interleaved1F1B


class AsyncTwoVersions(OneFOneB):
    """1F1B's order without a flush, keeping the two newest versions as 2BW does."""

    name: ClassVar[str] = "test_async_two_versions"
    synchronous: ClassVar[bool] = False
    weight_rule: ClassVar[str] = "previous_iteration"
    version_rule: ClassVar[str] = "two_versions"
    torch_class: ClassVar[str | None] = None


class StashingVariant(PipeDream):
    """PipeDream's stash under another name (inherits ``version_rule = "stashed"``)."""

    name: ClassVar[str] = "test_stashing_variant"


class GPipeLikeByTorch(OneFOneB):
    """A flushed schedule that asks torch's ``ScheduleGPipe`` to run it."""

    name: ClassVar[str] = "test_gpipe_like"
    torch_class: ClassVar[str | None] = "ScheduleGPipe"


class UnknownRule(OneFOneB):
    name: ClassVar[str] = "test_unknown_rule"
    version_rule: ClassVar[str] = "ema"


def test_the_job_reads_what_the_replay_runs_from_the_class():
    assert torch_runs(GPipeLikeByTorch) and tp_runs(GPipeLikeByTorch)
    assert not torch_runs(AsyncTwoVersions) and not tp_runs(AsyncTwoVersions)
    assert not tp_runs(StashingVariant)  # asynchronous: the TP replay keeps one copy, flushed
    assert needs_torch_csv(Interleaved1F1B) and not needs_torch_csv(AsyncTwoVersions)


def test_registered_schedules_keep_their_replay_messages():
    """Derived from the classes, the messages name what they named before (gpipe, 1f1b)."""
    job = ReplayJob(schedule="pipemare", backend="torch", check=False)
    assert "schedule: backend 'torch' runs only ('gpipe', '1f1b'), not 'pipemare'" in (
        job.problems()
    )
    tp = ReplayJob(schedule="pipedream", stages=1, tensor_parallel=2, check=False)
    assert any("tensor-parallel replay runs ('gpipe', '1f1b')" in p for p in tp.problems())
    assert not ReplayJob(schedule="1f1b", stages=1, tensor_parallel=2, check=False).problems()


def test_memory_policies_say_whether_they_keep_everything():
    """The replays that run no memory policy accept the policy whose class keeps everything
    (``none``, however it is spelled), read from the class, not from the string."""
    multi = dict(schedule="interleaved_1f1b", stages=2, backend="torch", torch_csv=True)
    assert ReplayJob(**multi, memory_policy="None").memory_policy == "None"
    for text in ("recompute", "none|none"):  # a per-stage spec names stages, not chunks
        bad = ReplayJob(**multi, memory_policy=text, check=False)
        assert "memory_policy: only 'none' with stage chunks per rank" in bad.problems()
    tp = ReplayJob(schedule="gpipe", stages=1, tensor_parallel=2, memory_policy="recompute",
                   check=False)  # fmt: skip
    assert "memory_policy: the tensor-parallel replay runs 'none'" in tp.problems()


torch = pytest.importorskip("torch")


def test_versions_follow_the_schedule_class():
    from backends.torch.replay.versions import SingleVersion, Stashed, make_versions

    module = torch.nn.Linear(2, 2)
    two = make_versions(AsyncTwoVersions, module, 0.1, microbatches=2)
    stash = make_versions(StashingVariant, module, 0.1, microbatches=2)
    single = make_versions(GPipeLikeByTorch(2, 2), module, 0.1, microbatches=2)
    assert isinstance(two, Stashed) and two.two
    assert isinstance(stash, Stashed) and not stash.two
    assert isinstance(single, SingleVersion)
    # 2BW's rule: micro-batches of iteration 1 (2, 3) run on W(0) after the first step
    two.forward_module(0)
    two.backward_done(0)
    two.step()
    assert two.forward_module(2) is two.versions[0]
    with pytest.raises(ValueError, match="version_rule 'ema'"):
        make_versions(UnknownRule, module, 0.1, microbatches=2)


def test_torch_class_is_the_one_the_schedule_names():
    from torch.distributed.pipelining import ScheduleGPipe

    from backends.torch.replay.pipelining import torch_class

    assert torch_class(GPipeLikeByTorch) is ScheduleGPipe
    with pytest.raises(ValueError, match="no class None"):
        torch_class(AsyncTwoVersions)


def test_a_schedule_class_checks_its_arguments_as_before():
    with pytest.raises(ScheduleError):
        AsyncTwoVersions(4, 2)  # inherits 1F1B's m >= p
