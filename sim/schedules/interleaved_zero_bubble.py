"""Interleaved Zero Bubble (ZB1P / ZB-H1 on chunks; Qi et al. ICLR'24) as torch 2.13 orders it.

torch ``ScheduleInterleavedZeroBubble._calculate_single_rank_operations`` (schedules.md §2.7,
§2.8): the interleaved generator with ``multiply_factor=1`` warm-up (``(v-1)*m_round + p-1-r``
chunk-forwards), the backward split into I (input gradient) and W (weight gradient), and after
``rank`` steady steps one W per step for the oldest pending I; the remaining W's at the end.
torch's ``_add_bubbles_to_actions`` then only inserts ``None`` padding, so the order is kept.

Memory: a chunk-micro-batch stays in flight until its W; measured peak ``2p`` chunk-micro-batches
(``p`` full stages) on every rank (schedules.md §3). Unit-time makespan (t_F = t_I = t_W = 1 per
full stage): 25.5 for p=4, m=8, v=2, against 28.5 for interleaved 1F1B.
"""

from __future__ import annotations

from typing import ClassVar

from sim.schedules.interleaved_rounds import InterleavedRounds


class InterleavedZeroBubble(InterleavedRounds):
    """Interleaved ZB1P: F, I and W per chunk, ``v >= 2``; ``m`` a multiple of ``max(1, m//p)``.

    Example:
        >>> [str(a) for a in InterleavedZeroBubble(2, 2).rank_order(1)]
        ['1F0', '1F1', '3F0', '3I0', '3F1', '3I1', '3W0', '1I0', '3W1', '1I1', '1W0', '1W1']
    """

    name: ClassVar[str] = "interleaved_zero_bubble"
    splits_backward: ClassVar[bool] = True
    warmup_factor: ClassVar[int] = 1
    description: ClassVar[str] = (
        "Interleaved zero bubble ZB1P (torch ScheduleInterleavedZeroBubble): I/W split"
    )
