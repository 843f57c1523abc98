"""Megatron-Core's combined 1F1B: a backward and the next forward run as one overlapped pair.

With ``overlap_moe_expert_parallel_comm`` Megatron-LM merges the backward of one micro-batch
and the forward of another into one step whose expert all-to-alls hide under each other's
compute (``megatron/core/pipeline_parallel/combined_1f1b.py``):

* no pipeline (``combined_1f1b_schedule_for_no_pipelining``): the forward of micro-batch 0
  alone, then the backward of ``i - 1`` with the forward of ``i``, then the last backward
  alone;
* the interleaved schedule: the steady state's forward and backward steps merged
  (``combined_forward_backward_step``), with one more warm-up micro-batch
  (``schedules.py``: ``num_warmup_microbatches += 1`` with the overlap).

Both are the rank's action list with every backward paired with the forward that follows it
(:func:`combine_pairs`): in 1F1B's steady state ``F_j B_i F_{j+1} B_{i+1} ...`` the forward
after ``B_i`` is one micro-batch further on, which is the extra warm-up micro-batch. The pair is
an ``OVERLAP_F_B`` action (:meth:`~sim.schedules.action.Action.pair`), run by the engine as
two chains (:mod:`sim.engine.overlap`). Megatron requires the interleaved schedule for
``p > 1`` (``transformer_config.py``), :func:`combine_reason` says so.
"""

from __future__ import annotations

from sim.schedules.action import Action, Program


def combine_pairs(program: Program) -> Program:
    """``program`` with each backward (``B``) paired with the forward right after it on its
    rank (module doc); a backward followed by anything else stays alone.

    Example:
        >>> from sim.schedules.action import Action
        >>> order = [Action.from_str(x) for x in ["0F0", "0B0", "0F1", "0B1", "0STEP0"]]
        >>> [str(a) for a in combine_pairs([order])[0]]
        ['0F0', '(0F1;0B0)OVERLAP_F_B', '0B1', '0STEP0']
    """
    out: Program = []
    for order in program:
        rank: list[Action] = []
        i = 0
        while i < len(order):
            a = order[i]
            nxt = order[i + 1] if i + 1 < len(order) else None
            if a.op == "B" and a.sub_actions is None and nxt is not None and nxt.op == "F":
                rank.append(Action.pair(nxt, a))
                i += 2
                continue
            rank.append(a)
            i += 1
        out.append(rank)
    return out


def combine_reason(schedule: str, stages: int, virtual_stages: int) -> str:
    """Why Megatron does not run the combined 1F1B for this schedule, or ``""``: it needs
    1F1B without a pipeline or the interleaved schedule (``transformer_config.py``: "VPP is
    required" with ``p > 1``)."""
    if schedule not in ("1f1b", "interleaved_1f1b"):
        return f"the combined 1F1B replaces 1F1B, not {schedule}"
    if stages > 1 and virtual_stages < 2:
        return (
            "overlap_moe_expert_parallel_comm with pipeline parallelism needs the interleaved "
            "schedule (Megatron-LM transformer_config.py)"
        )
    return ""


def paired_forwards(actions: list[Action]) -> frozenset[int]:
    """Positions, in the rank's flattened list (:func:`~sim.schedules.action.flatten`), of the
    forwards that open an ``OVERLAP_F_B`` pair with a backward.

    Example:
        >>> order = [Action.from_str(x) for x in ["0F0", "0B0", "0F1", "0B1", "0STEP0"]]
        >>> sorted(paired_forwards(combine_pairs([order])[0]))
        [1]
    """
    pos, out = 0, set()
    for a in actions:
        subs = a.sub_actions
        if subs is not None and len(subs) == 2 and (subs[0].op, subs[1].op) == ("F", "B"):
            out.add(pos)
        pos += len(subs) if subs is not None else 1
    return frozenset(out)
