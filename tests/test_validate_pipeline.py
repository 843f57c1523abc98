"""The validation pipeline (``sim validate``) with a replayer that runs nothing.

A :class:`FakeReplayer` implements :class:`sim.replay.Replayer` and answers every request with
a measurement fixed here, so what the pipeline does around the replay is checked without torch
or processes: the mode of each configuration and what it asks the replayer to run, that every
check precedes the first replay, the row's arithmetic, the per-rank breakdown of measured spans
(hand-computed), and that outputs are staged and replace the previous set as a whole.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from sim import api
from sim.errors import InputError
from sim.replay import ReplayFailed, ReplayProblem, ReplayRequest
from sim.schedules.registry import get_schedule

ROOT = Path(__file__).resolve().parents[1]
ACTION_S = 0.01
"""Every measured action lasts this long (seconds) in :meth:`FakeReplayer.spans`."""


@dataclasses.dataclass
class Measured:
    """A :class:`sim.replay.Measurement` with fixed numbers."""

    iteration_time_s: float
    iteration_times_s: list[float]
    peak_memory_bytes: list[float]
    memory: list[dict[str, float]]
    losses: list[float]
    notes: list[str]
    device_name: str
    action_spans: list[list[tuple[str, float, float, float]]]
    all_actions_done: bool = True
    numerics: dict = dataclasses.field(default_factory=dict)


class FakeReplayer:
    """Records what it is asked; ``problem`` refuses every request; ``fail`` fails the run."""

    def __init__(self, problem: ReplayProblem | None = None, fail: str = "", spans=False):
        self.problem, self.fail, self.with_spans = problem, fail, spans
        self.checked: list[tuple[str, int]] = []
        self.replayed: list[ReplayRequest] = []

    def check_device(self, device: str, nproc: int) -> None:
        self.checked.append((device, nproc))

    def runtimes(self, request: ReplayRequest, *, builtin: bool) -> tuple[str, ...]:
        if request.virtual_stages > 1:
            return ("torch",)
        return ("ours", "torch") if builtin and request.schedule in ("gpipe", "1f1b") else ("ours",)

    def problems(self, request: ReplayRequest) -> list[ReplayProblem]:
        return [self.problem] if self.problem else []

    def replay(self, request: ReplayRequest) -> Measured:
        self.replayed.append(request)
        if self.fail == request.runtime:
            raise ReplayFailed("rank 1 failed: injected\ntraceback line")
        ranks = request.ranks
        return Measured(
            iteration_time_s=0.5,
            iteration_times_s=[0.5] * request.iterations,
            peak_memory_bytes=[1e6 * (r + 1) for r in range(ranks)],
            memory=[{} for _ in range(ranks)],
            losses=[2.0] * request.microbatches,
            notes=["fake"],
            device_name="fake-device",
            action_spans=self.spans(request) if self.with_spans else [],
        )

    @staticmethod
    def spans(request: ReplayRequest) -> list[list[tuple[str, float, float, float]]]:
        """Each rank's program back to back, every action :data:`ACTION_S`, no waiting."""
        sched = get_schedule(request.schedule)(request.stages, request.microbatches)
        program = sched.program(request.warmup_iterations + request.iterations)
        out = []
        for actions in program:
            t = 0.0
            rank = []
            for a in actions:
                rank.append((str(a), t, t, t + ACTION_S))
                t += ACTION_S
            out.append(rank)
        return out


def config(tmp_path: Path, framework: str | None = None, **sweep: object) -> Path:
    """One configuration of the shipped CPU trace (6 layers, a real model) on 2 CPU ranks."""
    exp: dict = {
        "name": "one",
        "hardware": str(ROOT / "sim" / "hardware" / "calibrated" / "cpu-2rank.yaml"),
        "models": [
            {
                "name": "g",
                "trace": str(ROOT / "traces" / "gpt-tiny-cpu.csv"),
                "global_batch": 16,
                "microbatch_size": 4,
            }
        ],
        "training": {"optimizer": "sgd"},
        "options": {"partition": "uniform"},
        "sweep": {"schedule": "gpipe", "stages": 2, "memory_policy": "none", **sweep},
    }
    if framework:
        exp["framework"] = framework
    path = tmp_path / "one.yaml"
    path.write_text(yaml.safe_dump(exp))
    return path


def test_a_pipeline_row_is_the_replay_beside_the_simulation(tmp_path):
    path = config(tmp_path)
    fake = FakeReplayer()
    v = api.validate(path, replayer=fake, iterations=2)
    (row,) = v.table.to_dict("records")
    predicted = api.simulate(path).metrics
    assert row["mode"] == "pipeline" and row["runtime"] == "ours"
    assert row["predicted_iteration_s"] == predicted.iteration_time_s
    assert row["error"] == pytest.approx((predicted.iteration_time_s - 0.5) / 0.5)
    assert row["measured_peak_bytes"] == 2e6  # the larger rank
    assert row["memory_error"] == pytest.approx((predicted.peak_memory_bytes - 2e6) / 2e6)
    (req,) = fake.replayed
    assert (req.stages, req.microbatches, req.iterations, req.ranks) == (2, 4, 2, 2)
    assert req.boundaries == (0, 3) and req.model["kind"] == "gpt"
    assert fake.checked == [("cpu", 2)]
    assert pd.read_csv(tmp_path / "validation.csv").shape[0] == 1


@pytest.mark.parametrize(
    "sweep,options,mode,ranks",
    [
        ({"stages": 1, "tensor_parallel": 2}, {}, "tensor_parallel", 2),
        ({"schedule": "interleaved_1f1b", "virtual_stages": 2}, {}, "multi_stage", 2),
        ({}, {"rank": 1}, "single_rank", 1),
    ],
)
def test_each_mode_asks_for_its_ranks(tmp_path, sweep, options, mode, ranks):
    fake = FakeReplayer()
    v = api.validate(config(tmp_path, **sweep), replayer=fake, **options)
    (row,) = v.table.to_dict("records")
    (req,) = fake.replayed
    assert row["mode"] == mode and req.ranks == ranks
    if mode == "single_rank":
        assert row["rank"] == 1 and req.single_rank == 1 and row["gpu"] == "gpu1"
        assert row["predicted_peak_bytes"] <= row["predicted_device_peak_bytes"]


def test_every_check_precedes_the_first_replay(tmp_path):
    """The second variant is refused: nothing runs, nothing is written."""
    fake = FakeReplayer(problem=ReplayProblem("memory_policy", "'x' is not replayed"))
    with pytest.raises(InputError) as err:
        api.validate(config(tmp_path), replayer=fake, schedules=("gpipe", "1f1b"))
    assert err.value.field == "sweep.memory_policy" and "cannot be replayed" in str(err.value)
    assert fake.replayed == [] and sorted(p.name for p in tmp_path.iterdir()) == ["one.yaml"]


@pytest.mark.parametrize("options", [{}, {"rank": 0}])
def test_the_prediction_must_be_of_the_runtime_replayed(tmp_path, options):
    """The replay runs pipesim's runtime: a prediction for another framework is refused."""
    fake = FakeReplayer()
    with pytest.raises(InputError) as err:
        api.validate(config(tmp_path, framework="megatron-lm"), replayer=fake, **options)
    assert err.value.field == "framework" and fake.replayed == []


def test_nproc_must_match_the_configuration(tmp_path):
    with pytest.raises(InputError, match="--nproc 4"):
        api.validate(config(tmp_path), replayer=FakeReplayer(), nproc=4)


def test_a_failed_replay_is_a_row_and_keeps_the_other_runtimes_rows(tmp_path):
    path = config(tmp_path)
    fake = FakeReplayer(fail="ours")
    v = api.validate(path, replayer=fake, schedules=("gpipe", "pipedream_2bw"), torch_builtin=True)
    rows = v.table[["schedule", "runtime", "status", "reason"]].values.tolist()
    assert rows == [
        ["gpipe", "ours", "failed", "rank 1 failed: injected"],
        ["gpipe", "torch", "ok", ""],
        ["pipedream_2bw", "ours", "failed", "rank 1 failed: injected"],
        ["pipedream_2bw", "torch", "not_run", rows[3][3]],
    ]
    assert "no pipedream_2bw schedule" in rows[3][3]
    assert [r.runtime for r in fake.replayed] == ["ours", "torch", "ours"]
    on_disk = pd.read_csv(tmp_path / "validation.csv", keep_default_na=False)
    assert on_disk["status"].tolist() == ["failed", "ok", "failed", "not_run"]


def test_a_new_set_replaces_the_previous_one(tmp_path):
    path = config(tmp_path)
    api.validate(path, replayer=FakeReplayer(spans=True), schedules=("gpipe", "1f1b"))
    assert (tmp_path / "predicted-1f1b-m4.json").is_file()
    assert (tmp_path / "validation_breakdown.csv").is_file()
    v = api.validate(path, replayer=FakeReplayer(), schedules=("gpipe",))
    names = {p.name for p in tmp_path.iterdir()}
    assert names == {
        "one.yaml",
        "validation.csv",
        "predicted-gpipe-m4.json",
        ".pipesim-validation.json",
    }
    manifest = json.loads((tmp_path / ".pipesim-validation.json").read_text())["entries"]
    assert (
        manifest == ["predicted-gpipe-m4.json", "validation.csv"] == sorted(p.name for p in v.files)
    )


def test_breakdown_of_measured_spans_by_hand(tmp_path):
    """GPipe, p = 2, m = 4, one measured iteration after one warm-up: every rank runs 4 F,
    4 B and 1 STEP of 10 ms each per iteration, so F 40 ms, B 40 ms, STEP 10 ms, and idle is
    the measured 500 ms less those 90 ms."""
    api.validate(config(tmp_path), replayer=FakeReplayer(spans=True), iterations=1, warmup=1)
    parts = pd.read_csv(tmp_path / "validation_breakdown.csv")
    measured = {(r.rank, r.part): (r.measured_s, r.actions) for r in parts.itertuples(index=False)}
    for gpu in ("gpu0", "gpu1"):
        assert measured[(gpu, "F")] == pytest.approx((4 * ACTION_S, 4))
        assert measured[(gpu, "B")] == pytest.approx((4 * ACTION_S, 4))
        assert measured[(gpu, "STEP")] == pytest.approx((ACTION_S, 1))
        assert measured[(gpu, "idle")][0] == pytest.approx(0.5 - 9 * ACTION_S)


def test_a_multi_stage_schedule_on_a_one_stage_per_rank_winner(tmp_path):
    """``-s interleaved_1f1b`` on a GPipe file with fixed boundaries: the variant runs at the
    schedule's smallest v (2), partitioned afresh into p x v = 4 stages; ``--virtual-stages``
    sets v and is refused (naming the option) where the schedule does not take it."""
    path = config(tmp_path)
    text = path.read_text().replace(
        "partition: uniform", "partition: uniform\n  boundaries: [0, 3]"
    )
    path.write_text(text)
    fake = FakeReplayer()
    v = api.validate(path, replayer=fake, schedules=("gpipe", "interleaved_1f1b"))
    assert [(r.schedule, r.virtual_stages, len(r.boundaries)) for r in fake.replayed] == [
        ("gpipe", 1, 2),
        ("interleaved_1f1b", 2, 4),
    ]
    assert list(v.table["mode"]) == ["pipeline", "multi_stage"]
    fake = FakeReplayer()
    api.validate(path, replayer=fake, schedules=("looped_bfs",), virtual_stages=3)
    assert [(r.virtual_stages, len(r.boundaries)) for r in fake.replayed] == [(3, 6)]
    with pytest.raises(InputError, match="--virtual-stages"):
        api.validate(
            path, replayer=FakeReplayer(), schedules=("zbv_zero_bubble",), virtual_stages=3
        )


def test_numerics_are_asked_for_every_pipeline_replay_and_reported(tmp_path):
    path = config(tmp_path)

    class Checked(FakeReplayer):
        def replay(self, request):
            out = super().replay(request)
            out.numerics = {"numerics": "ok", "loss_max_error": 0.0, "grad_max_error": 2e-7,
                            "grad_worst": "step 1 0.tok.weight", "tolerance": 1e-4}  # fmt: skip
            return out

    fake = Checked()
    (row,) = api.validate(path, replayer=fake).table.to_dict("records")
    assert fake.replayed[0].numerics
    assert (row["numerics"], row["grad_max_error"], row["numerics_tolerance"]) == ("ok", 2e-7, 1e-4)
    fake = Checked()
    (row,) = api.validate(path, replayer=fake, numerics=False).table.to_dict("records")
    assert not fake.replayed[0].numerics and row["numerics"] == "skipped"
    (row,) = api.validate(path, replayer=Checked(), rank=0).table.to_dict("records")
    assert row["numerics"] == "skipped" and "single_rank" in row["numerics_reason"]
