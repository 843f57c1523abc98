"""FSDP2's unsharded bytes in flight (:mod:`sim.memory.fsdp_inflight`), by hand.

Three units of ``E`` elements each, ``param_dtype`` bf16 (2 B) and ``reduce_dtype`` fp32 (4 B),
as torchtitan runs them.
"""

from __future__ import annotations

import pytest

from sim.memory.fsdp_inflight import FsdpState, after, backward_peak, forward_peak, kept_bytes
from sim.memory.fsdp_units import FsdpPlan, FsdpUnit

E = 1000.0


def _plan(reshard=True, accumulate=False) -> FsdpPlan:
    units = tuple(FsdpUnit((i,), E, 0.0, reshard) for i in range(3))
    return FsdpPlan(units, 2.0, 4.0, shard=4, accumulate=accumulate)


def test_resharded_units_hold_one_unit_and_two_gathers_forward():
    """Unit i computes with P_i and A_i while A_{i+1} is gathered: 3 x 2E."""
    peak = forward_peak(_plan(), FsdpState())
    assert (peak.weights, peak.buffers, peak.gradients) == (2 * E, 4 * E, 0.0)


def test_backward_keeps_the_previous_reduce_scatter_input():
    """P_i + A_{i-1} (prefetched; A_i freed at its copy-out) + G_i (bf16) + R_{i+1} (fp32)."""
    peak = backward_peak(_plan(), FsdpState())
    assert (peak.weights, peak.buffers, peak.gradients) == (2 * E, 2 * E, 2 * E + 4 * E)


def test_units_kept_after_forward_add_up():
    """reshard_after_forward False: forward at the last unit keeps the two before it (4E),
    P_2 and A_1, A_2: 10E; backward's largest moment is the last unit's post-backward (P_2
    freed, the two before kept, G_2 2E and R_2 4E): 10E; nothing is prefetched."""
    fs = _plan(reshard=False)
    assert forward_peak(fs, FsdpState()).total == pytest.approx(10 * E)
    assert backward_peak(fs, FsdpState(held=True)).total == pytest.approx(10 * E)
    assert kept_bytes(fs, FsdpState(held=True)).weights == 6 * E


def test_partial_reshard_keeps_one_kth():
    fs = _plan(reshard=2)
    assert kept_bytes(fs, FsdpState(held=True)).weights == pytest.approx(3 * E)


def test_pipeline_parallelism_keeps_every_unit_and_accumulates_in_fp32():
    """With PP every unit stays unsharded (6E) and its gradients accumulate in fp32 (12E);
    a later backward holds G_i (2E) on top: 20E, the first backward at its last unit too."""
    fs = _plan(reshard=False, accumulate=True)
    first = forward_peak(fs, FsdpState())
    assert first.total == pytest.approx(6 * E + 2 * E + 2 * E)  # P_0, P_1 kept; A_1, A_2
    st = after(fs, FsdpState(), "F", False)
    assert forward_peak(fs, st).total == pytest.approx(6 * E)
    assert backward_peak(fs, st).total == pytest.approx(6 * E + 12 * E + 2 * E)
    st = after(fs, st, "B", True)
    assert kept_bytes(fs, st).total == pytest.approx(18 * E)
    assert backward_peak(fs, st).total == pytest.approx(20 * E)
