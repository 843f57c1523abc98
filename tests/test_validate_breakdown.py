"""The per-action breakdown of a replay's error, on logs written by hand."""

from __future__ import annotations

import pytest

from sim.events import Event, EventLog
from sim.validate.breakdown import action_breakdown, work_per_iteration


def _log(rank_actions: dict[str, list[tuple[str, float, float]]], kind_of=None) -> EventLog:
    log = EventLog()
    for dev, actions in rank_actions.items():
        for name, start, end in actions:
            kind = "optimizer" if "STEP" in name else "compute"
            if name.startswith("R"):
                kind = "recompute"
            log.events.append(Event(kind, dev, "compute", name, start, end))
    return log


# One rank, m = 2, two iterations. Iteration 0 (warm-up) is slow; iteration 1 has F = 1 s each,
# B = 2 s each, a recompute of 0.5 s before each B and a 0.25 s step.
MEASURED = _log(
    {
        "gpu0": [
            ("0F0", 0, 5),
            ("0F1", 5, 10),
            ("0B0", 10, 20),
            ("0B1", 20, 30),
            ("0STEP0", 30, 31),
            ("0F2", 31, 32),
            ("0F3", 32, 33),
            ("R0B2", 33, 33.5),
            ("0B2", 33.5, 35.5),
            ("R0B3", 35.5, 36),
            ("0B3", 36, 38),
            ("0STEP1", 38, 38.25),
        ]
    }
)


def test_work_per_iteration_skips_other_iterations_and_adds_recompute_to_b():
    work = work_per_iteration(MEASURED, microbatches=2, first_iteration=1, iterations=1)
    # F: 1 + 1 = 2 s over 2 actions; B: (0.5 + 2) * 2 = 5 s over 2 (recompute is not an action);
    # STEP: 0.25 s, 1 action. Iteration 0's slow actions are left out.
    assert work == {"gpu0": {"F": (2.0, 2.0), "B": (5.0, 2.0), "STEP": (0.25, 1.0)}}


def test_breakdown_parts_add_up_to_the_iteration_difference():
    # Predicted: F 0.8 s, B 2.5 s (no recompute), step 0.25 s, for iterations 0 and 1;
    # predicted iteration 7.0 s, measured 8.0 s.
    predicted = _log(
        {
            "gpu0": [
                (f"0F{mb}", 0, 0.8)
                for mb in range(4)  # times do not matter, durations do
            ]
            + [(f"0B{mb}", 0, 2.5) for mb in range(4)]
            + [("0STEP0", 0, 0.25), ("0STEP1", 0, 0.25)]
        }
    )
    rows = action_breakdown(
        MEASURED,
        8.0,
        predicted,
        7.0,
        microbatches=2,
        warmup_iterations=1,
        measured_iterations=1,
        predicted_window=(1, 1),
    )
    by_part = {r["part"]: r for r in rows}
    assert [r["part"] for r in rows] == ["F", "B", "STEP", "idle"]
    assert by_part["F"]["measured_s"] == pytest.approx(2.0)
    assert by_part["F"]["predicted_s"] == pytest.approx(1.6)
    assert by_part["B"]["diff_s"] == pytest.approx(5.0 - 5.0)
    assert by_part["STEP"]["diff_s"] == pytest.approx(0.0)
    # idle: measured 8 - (2 + 5 + 0.25) = 0.75; predicted 7 - (1.6 + 5 + 0.25) = 0.15
    assert by_part["idle"]["measured_s"] == pytest.approx(0.75)
    assert by_part["idle"]["predicted_s"] == pytest.approx(0.15)
    assert sum(r["diff_s"] for r in rows) == pytest.approx(8.0 - 7.0)


def test_bad_window_is_refused():
    with pytest.raises(ValueError, match="must be >= 1"):
        work_per_iteration(MEASURED, microbatches=2, first_iteration=0, iterations=0)


def test_predicted_step_includes_the_tied_all_reduces_it_waits_in():
    # The replay's STEP action runs Ties.reduce (waiting for the other holders) before the
    # update, so the predicted STEP is the tied all-reduces' spans on the rank plus the update:
    # iteration 1: 1.5 s (0.5 s of it waiting) + 0.5 s + 0.25 s = 2.25 s; iteration 0's is left
    # out, and so is an all-reduce that is not a tied one (data parallelism).
    log = MEASURED.__class__()
    log.events.extend(MEASURED.events)
    for it, (start, end) in ((0, (29, 30)), (1, (36.0, 37.5)), (1, (37.5, 38.0))):
        log.events.append(
            Event("allreduce", "gpu0", "comm", "tied allreduce s0", start, end, iteration=it)
        )
    log.events.append(Event("allreduce", "gpu0", "comm", "allreduce s0", 36, 37, iteration=1))
    work = work_per_iteration(log, microbatches=2, first_iteration=1, iterations=1)
    assert work["gpu0"]["STEP"] == (2.25, 1.0)
