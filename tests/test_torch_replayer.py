"""What the torch replayer says it can run (:class:`backends.torch.replay.replayer.TorchReplayer`);
asking starts no process and needs no torch."""

from __future__ import annotations

import dataclasses

import pytest

from backends.torch.models.user_spec import UserModelSpec
from backends.torch.replay.replayer import TorchReplayer, replay_job
from sim.replay import ReplayRequest

GPT = {"kind": "gpt", "layers": 2, "hidden": 32, "heads": 2, "seq_len": 8, "vocab": 64}
BASE = ReplayRequest(GPT, (0, 2), "gpipe", 2, 4, 1)
replayer = TorchReplayer()


def fields(request: ReplayRequest) -> list[str]:
    return [p.field for p in replayer.problems(request)]


@pytest.mark.parametrize(
    "change,field",
    [
        (dict(memory_policy="d2d_swap"), "memory_policy"),
        (dict(tensor_parallel=2), "stages"),  # the tensor-parallel replay runs one stage
        (dict(tensor_parallel=3, stages=1, boundaries=(0,)), "model"),  # 3 does not divide 64
        # 4 divides the vocabulary (64) and the hidden size but not the 2 heads
        (dict(tensor_parallel=4, stages=1, boundaries=(0,)), "model"),
        (
            dict(schedule="interleaved_1f1b", virtual_stages=2, memory_policy="recompute"),
            "memory_policy",
        ),
    ],
)
def test_what_the_replay_refuses_names_the_field(change, field):
    request = dataclasses.replace(BASE, **change)
    if request.virtual_stages > 1:
        request = dataclasses.replace(request, runtime="torch", boundaries=(0, 1, 2, 3))
    assert field in fields(request)


def test_what_it_runs_has_no_problem():
    assert fields(BASE) == []
    assert fields(dataclasses.replace(BASE, tensor_parallel=2, stages=1, boundaries=(0,))) == []
    assert fields(dataclasses.replace(BASE, single_rank=1)) == []


def test_a_fixed_sample_user_model_replays_another_microbatch_size():
    spec = UserModelSpec("m.py:f", microbatch_size=4, takes_microbatch_size=False).to_dict()
    request = dataclasses.replace(BASE, model=spec, microbatch_size=2)
    assert "microbatch_size" not in fields(request)


def test_runtimes_and_the_job():
    multi = dataclasses.replace(BASE, schedule="zbv_zero_bubble", virtual_stages=2)
    assert replayer.runtimes(multi, builtin=False) == ("torch",)
    assert replayer.runtimes(BASE, builtin=True) == ("ours", "torch")
    assert replayer.runtimes(BASE, builtin=False) == ("ours",)
    assert replayer.runtimes(dataclasses.replace(BASE, schedule="pipedream"), builtin=True) == (
        "ours",
    )
    job = replay_job(dataclasses.replace(multi, runtime="torch", boundaries=(0, 1, 2, 3)))
    assert job.torch_csv and job.backend == "torch" and job.nproc == 2
    alone = replay_job(dataclasses.replace(BASE, single_rank=1))
    assert alone.nproc == 1 and alone.single_rank == 1
