"""Hybrid-EP's NVLink bandwidth falls with the ranks of its NVLink domain, as measured on GB200.

:mod:`sim.comm.ep_dispatch` carries Hybrid-EP's measured NVLink efficiency at 8 ranks (GB200
NVL72, kernel only, 32 SMs: BF16 dispatch 764.03, combine 737.13 GB/s of 900) to every group.
The same table measures it at 8 to 36 ranks of one NVL72 rack, and it falls with the ranks:
each token goes to more destinations and every rank's kernel serves more peers on the same SMs.
deepseek-ai/DeepEP@41cad94 ``docs/README_Hybrid-EP.md``, "GB200 Platform" (4096 tokens, hidden
7168, top-8, 8 local experts per rank, random uniform router; algorithm bandwidth, GB/s),
"Kernel Only" BF16 dispatch / combine:

===== ================== ==================
ranks 16 SMs             32 SMs
===== ================== ==================
8     750.15 / 684.27    764.03 / 737.13
16    661.93 / 600.75    706.95 / 666.26
24    637.80 / 565.53    665.97 / 639.80
32    629.79 / 547.25    642.23 / 605.15
36    612.85 / 543.27    632.31 / 596.99
===== ================== ==================

:func:`rank_factor` is the mean of dispatch and combine at ``ranks`` over the mean at 8 (the
efficiency :mod:`sim.comm.ep_dispatch` holds, like it averaging the two directions): at 32 SMs
1.0 at 8 ranks, 0.819 at 36; linear in the ranks between measured counts and in the SMs
between 16 and 32 (clamped outside). ``ranks`` is the group's members inside the NVLink domain
of a rank (an NVL72 rack, or an 8-GPU server whose other members are reached over the
network). Assumptions: beyond 36 ranks (EP 64 in a rack) the 36-rank value holds (no larger
measurement; the fall flattens from 24 ranks on: 0.870, 0.831, 0.819 at 32 SMs); other Blackwell parts and
the dispatch of FP8 rows keep GB200's BF16 ratio.
"""

from __future__ import annotations

# {sms: [(ranks, dispatch GB/s, combine GB/s), ...]}: the table of the module doc.
_GB200_KERNEL_BF16 = {
    16: [(8, 750.15, 684.27), (16, 661.93, 600.75), (24, 637.80, 565.53),
         (32, 629.79, 547.25), (36, 612.85, 543.27)],
    32: [(8, 764.03, 737.13), (16, 706.95, 666.26), (24, 665.97, 639.80),
         (32, 642.23, 605.15), (36, 632.31, 596.99)],
}  # fmt: skip


def _at(points: list[tuple[int, float, float]], ranks: float) -> float:
    """Mean of dispatch and combine at ``ranks``, linear between measured counts, clamped."""
    means = [(r, (d + c) / 2) for r, d, c in points]
    if ranks <= means[0][0]:
        return means[0][1]
    for (r0, y0), (r1, y1) in zip(means, means[1:], strict=False):
        if ranks <= r1:
            return y0 + (ranks - r0) / (r1 - r0) * (y1 - y0)
    return means[-1][1]


def rank_factor(ranks: int, sms: int) -> float:
    """Hybrid-EP's NVLink bandwidth with ``ranks`` members in an NVLink domain over its
    bandwidth with 8, at ``sms`` SMs (module doc); 1.0 up to 8 ranks.

    Example:
        >>> round(rank_factor(8, 32), 3), round(rank_factor(36, 32), 3), round(rank_factor(64, 32), 3)
        (1.0, 0.819, 0.819)
    """
    lo, hi = min(_GB200_KERNEL_BF16), max(_GB200_KERNEL_BF16)
    s = min(max(sms, lo), hi)
    w = (s - lo) / (hi - lo)

    def ratio(table: list[tuple[int, float, float]]) -> float:
        return _at(table, ranks) / _at(table, 8)

    return (1 - w) * ratio(_GB200_KERNEL_BF16[lo]) + w * ratio(_GB200_KERNEL_BF16[hi])
