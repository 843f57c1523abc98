"""Interleaved 1F1B (Megatron-LM, Narayanan et al. SC'21 §2.2) as torch 2.13 orders it.

torch ``ScheduleInterleaved1F1B._calculate_single_rank_operations`` (schedules.md §2.6): rank
``r`` holds stages ``r, r+p, ..., r+(v-1)p`` ("loop" placement); warm-up
``(v-1)*m_round + 2(p-1-r)`` chunk-forwards (at most ``m*v``), then one forward and one
backward per step, depth-first in rounds of ``m_round = m // max(1, m // p)`` micro-batches,
then the cool-down backwards. torch relaxes Megatron's ``m % p == 0`` to ``m % rounds == 0``.

Closed forms (uniform chunks, free communication, t_B = 2 t_F; schedules.md §2.6, §3):
makespan ``3m + 3(p-1)/v`` full-stage forward times, so bubble/ideal ``(p-1)/(v*m)``; peak in
flight on rank ``r``: ``2(p-r-1) + (v-1)p + 1`` chunk-micro-batches (``m >= p``).
"""

from __future__ import annotations

from typing import ClassVar

from sim.schedules.interleaved_rounds import InterleavedRounds


class Interleaved1F1B(InterleavedRounds):
    """Interleaved 1F1B with ``v >= 2`` chunks per rank; ``m`` a multiple of ``max(1, m//p)``.

    Example:
        >>> [str(a) for a in Interleaved1F1B(2, 2).rank_order(1)]
        ['1F0', '1F1', '3F0', '3B0', '3F1', '3B1', '1B0', '1B1']
    """

    name: ClassVar[str] = "interleaved_1f1b"
    description: ClassVar[str] = (
        "Interleaved 1F1B (torch ScheduleInterleaved1F1B): v chunks per rank, depth-first"
    )
