"""A replay's measured spans become an event log like the simulator's."""

from __future__ import annotations

import pytest

from sim.validate.measured import measured_log


def test_waits_become_stalls_and_steps_optimizer_events():
    spans = [
        [("0F0", 0.0, 0.0, 1.0), ("0B0", 1.0, 2.5, 3.0), ("0STEP0", 3.0, 3.0, 3.1)],
        [("1F0", 0.0, 1.2, 2.0), ("1B0", 2.0, 2.0, 2.4)],
    ]
    log = measured_log(spans)
    kinds = [(e.device, e.kind, e.name) for e in log.events]
    assert kinds == [
        ("gpu0", "compute", "0F0"),
        ("gpu0", "stall", "wait 0B0"),
        ("gpu0", "compute", "0B0"),
        ("gpu0", "optimizer", "0STEP0"),
        ("gpu1", "stall", "wait 1F0"),
        ("gpu1", "compute", "1F0"),
        ("gpu1", "compute", "1B0"),
    ]
    b0 = log.events[2]
    assert (b0.start_s, b0.end_s) == (2.5, 3.0)
    assert log.events[1].duration_s == pytest.approx(1.5)
    assert log.events[3].microbatch is None and log.events[0].microbatch == 0
