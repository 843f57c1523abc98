"""benchmarks/accuracy/model_rows.py: the host overlay of --host-as and --host-set."""

from __future__ import annotations

import pytest

from benchmarks.accuracy.model_rows import host_overlay


def test_host_set_over_host_as():
    # dgx-h100's host (op 9.8 us, te_module 55.1 us, in seconds) with te_module set to 0 us over
    # it: the other keys stay the preset's; --host-set alone overlays only its keys.
    over = host_overlay("dgx-h100", "te_module=0 us")["host_overhead"]
    assert over["te_module"] == "0 us"
    assert over["op"] == pytest.approx(9.8e-6)
    assert host_overlay("", "te_module=0 us") == {"host_overhead": {"te_module": "0 us"}}
    assert host_overlay("", "") is None
    with pytest.raises(ValueError, match="key=value"):
        host_overlay("", "te_module")
