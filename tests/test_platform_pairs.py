"""benchmarks/accuracy/platform_pairs.py: x86 DGX rows paired with Grace rows of one release."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from benchmarks.accuracy.platform_pairs import KEY, pairs


def _rows(specs):
    base = {k: 1 for k in KEY}
    return pd.DataFrame([base | s for s in specs])


def test_pairs_by_hand():
    # B200 12 s against GB200 10 s (1.2), predicted 9 and 10 (0.9): the ratio is 25 % low;
    # B300 9 s against GB300 9 s (1.0), predicted 10 and 8 (1.25): 25 % high; a GB200 row of
    # another release pairs with nothing; a pair without a prediction keeps NaN.
    m = _rows([
        {"row": 2, "gpu": "B200", "measured_s": 12.0},
        {"row": 3, "gpu": "GB200", "measured_s": 10.0},
        {"row": 4, "gpu": "GB200", "measured_s": 5.0, "release": "26.08"},
        {"row": 5, "gpu": "B300", "measured_s": 9.0, "model": "m2"},
        {"row": 6, "gpu": "GB300", "measured_s": 9.0, "model": "m2"},
        {"row": 7, "gpu": "B300", "measured_s": 4.0, "model": "m3"},
        {"row": 8, "gpu": "GB300", "measured_s": 2.0, "model": "m3"},
    ])  # fmt: skip
    p = pairs(m, pd.Series({2: 9.0, 3: 10.0, 4: 1.0, 5: 10.0, 6: 8.0, 7: 3.0}))
    assert list(zip(p.x86_row, p.grace_row, strict=True)) == [(2, 3), (5, 6), (7, 8)]
    assert list(p.pair) == ["B200/GB200", "B300/GB300", "B300/GB300"]
    assert p.measured_ratio.tolist() == pytest.approx([1.2, 1.0, 2.0])
    assert p.ratio_error.tolist()[:2] == pytest.approx([0.9 / 1.2 - 1, 0.25])
    assert math.isnan(p.ratio_error.iloc[2])
