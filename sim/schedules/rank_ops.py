"""The warm-up / 1F1B / cool-down generator shared by the interleaved schedules (torch 2.13).

A port of torch ``torch/distributed/pipelining/schedules.py::_get_warmup_ops`` and
``_get_1f1b_rank_ops`` (schedules.md §2.6, §2.8) without the ``None`` padding they insert
(padding only aligns list positions across ranks; it is not an action). Used by
:mod:`sim.schedules.interleaved_1f1b` (``multiply_factor=2``, full backward) and
:mod:`sim.schedules.interleaved_zero_bubble` (``multiply_factor=1``, I and W split).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.schedules.action import Action
from sim.schedules.errors import ScheduleError


def rounds_check(name: str, stages: int, microbatches: int) -> int:
    """Micro-batches per round, ``m // max(1, m // p)``, after torch's check.

    Raises:
        ScheduleError: ``m`` is not a multiple of the number of rounds ``max(1, m // p)``
            (torch ``ScheduleInterleaved1F1B.__init__``; schedules.md §2.6, §5).
    """
    rounds = max(1, microbatches // stages)
    if microbatches % rounds:
        raise ScheduleError(
            f"{name} needs microbatches to be a multiple of the number of rounds "
            f"max(1, m // p) = {rounds}, got m={microbatches} (p={stages})"
        )
    return microbatches // rounds


def warmup_ops(
    rank: int, local_stages: int, per_round: int, stages: int, microbatches: int, factor: int
) -> int:
    """Warm-up chunk-forwards on ``rank``: ``(v-1)*per_round + factor*(p-1-rank)``, at most
    ``m*v`` (torch ``_get_warmup_ops``)."""
    ops = (local_stages - 1) * per_round + factor * (stages - 1 - rank)
    return min(ops, microbatches * local_stages)


@dataclass(frozen=True)
class RankPlan:
    """Inputs of :func:`one_f_one_b_rank_ops` for one rank (torch's arguments, same names).

    Attributes:
        rank: the rank.
        stages: pipeline depth ``p``.
        local_stages: stage chunks on the rank ``v``.
        microbatches: ``m``.
        per_round: micro-batches per round.
        warmup: warm-up operations (:func:`warmup_ops`).
        zero_bubble: split the backward into I and W (``enable_zero_bubble``).
    """

    rank: int
    stages: int
    local_stages: int
    microbatches: int
    per_round: int
    warmup: int
    zero_bubble: bool

    def forward_stage(self, op: int) -> int:
        """Stage of the ``op``-th forward: chunk ``(op // per_round) mod v``."""
        return ((op // self.per_round) % self.local_stages) * self.stages + self.rank

    def backward_stage(self, op: int) -> int:
        """Stage of the backward at operation ``op``: chunks in reverse order."""
        local = self.local_stages - 1 - ((op - self.warmup) // self.per_round) % self.local_stages
        return local * self.stages + self.rank


def one_f_one_b_rank_ops(plan: RankPlan) -> list[Action]:
    """One rank's actions: warm-up forwards, then per step F and B (or F, I and, after ``rank``
    steady steps, the W of the oldest pending I), cool-down backwards, then the remaining W.

    The port of torch ``_get_1f1b_rank_ops`` (``num_1f1b_microbatches = rank`` for the zero-
    bubble variant, as ``ScheduleInterleavedZeroBubble`` passes it).
    """
    counters: dict[tuple[str, int], int] = {}
    out: list[Action] = []

    def emit(stage: int, op: str) -> None:
        key = (op, stage)
        counters[key] = counters.get(key, 0) + 1
        out.append(Action(stage, op, counters[key] - 1))

    total = plan.microbatches * plan.local_stages
    fwd_bwd = total - plan.warmup
    bwd_op = "I" if plan.zero_bubble else "B"
    backward_ids: list[int] = []
    weights = 0
    for op in range(plan.warmup + fwd_bwd + plan.warmup):
        if op < plan.warmup + fwd_bwd:
            emit(plan.forward_stage(op), "F")
        if op >= plan.warmup:
            emit(plan.backward_stage(op), bwd_op)
            backward_ids.append(op)
            if plan.zero_bubble and op - plan.warmup >= plan.rank:
                emit(plan.backward_stage(backward_ids[weights]), "W")
                weights += 1
    while plan.zero_bubble and weights < len(backward_ids):
        emit(plan.backward_stage(backward_ids[weights]), "W")
        weights += 1
    return out


def interleaved_rank_ops(
    rank: int,
    stages: int,
    local_stages: int,
    microbatches: int,
    *,
    factor: int,
    zero_bubble: bool,
    name: str,
) -> list[Action]:
    """The whole generator for one rank: the rounds check, the warm-up count, the ops."""
    per_round = rounds_check(name, stages, microbatches)
    warm = warmup_ops(rank, local_stages, per_round, stages, microbatches, factor)
    plan = RankPlan(rank, stages, local_stages, microbatches, per_round, warm, zero_bubble)
    return one_f_one_b_rank_ops(plan)
