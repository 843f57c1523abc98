"""Linear interpolation in ``log2 x`` over measured points, clamped to the measured range: how
the measured-speed tables (:mod:`sim.compute.measured`, :mod:`sim.compute.cudnn_attention`,
:mod:`sim.compute.hd64_attention`) read a length or a count between their points."""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence


def log2_interp(points: Sequence[tuple[float, float]], x: float) -> float:
    """Linear interpolation in ``log2 x`` over ``(x, y)`` points sorted by ``x``, clamped.

    Example:
        >>> log2_interp([(1024.0, 1.0), (4096.0, 3.0)], 2048.0), log2_interp([(2.0, 5.0)], 9.0)
        (2.0, 5.0)
    """
    xs = [p[0] for p in points]
    if x <= xs[0]:
        return points[0][1]
    if x >= xs[-1]:
        return points[-1][1]
    i = bisect.bisect_right(xs, x)
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    w = (math.log2(x) - math.log2(x0)) / (math.log2(x1) - math.log2(x0))
    return y0 + w * (y1 - y0)
