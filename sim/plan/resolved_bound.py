"""The memory lower bound of a resolved point: what a rank's GPU surely holds at once.

A point that passes the planner's bounds (:mod:`sim.plan.bounds`) is resolved (partition,
placement, plans) before it is simulated; :func:`resolved_memory_excess` then bounds each rank
exactly in its parts, and a rank that cannot fit is not simulated (its row says ``pruned:
memory lower bound ... as partitioned``). The property tests (``tests/test_planner.py``) hold
it to full simulation.
"""

from __future__ import annotations

from sim.engine.replicas import stage_replicas
from sim.memory.activation_peak import kept_peak
from sim.memory.step_moment import step_moment_bytes
from sim.schedules.action import flatten
from sim.schedules.combined import paired_forwards


def resolved_memory_excess(res) -> tuple[str, float, float] | None:
    """``(gpu, lower bound, capacity)`` (bytes) of the first rank of a resolved point
    (:class:`sim.point.simulate.Resolved`) that cannot fit on its GPU (module doc), or None.

    A rank's GPU holds the bytes every stage chunk on it charges at t = 0 (``static_gpu_bytes
    + overhead_bytes``; the per-process charges are its first chunk's only) and, right after
    each forward, the kept stash of every chunk-micro-batch it has run forward and not yet
    freed (by its B, or its W when the backward is split): :func:`peak_resident_bytes` walks
    its action list for the most at once. With one stage per rank that is ``n_s`` in-flight
    micro-batches of ``resident_act_bytes``. The walk is :func:`sim.memory.rank_memory.
    kept_peak` (``sim memory``'s floor), which also counts the running action's rebuilt bytes
    and frees a micro-batch's stash once, at the backward that ends it (a combined 1F1B step
    holds its two stashes layer by layer, :mod:`sim.memory.overlapped`), or, where more, what
    its optimizer steps allocate while they run, one chunk after another (the step moment,
    :func:`sim.memory.step_moment.step_moment_bytes`: DeepSpeed's ``FP16_Optimizer``)."""
    inp = res.sim_input
    by_rank: dict[tuple[int, int, int], list] = {}
    for rep in stage_replicas(inp):
        key = (rep.replica, inp.stage_ranks[rep.stage], rep.tp_rank)
        by_rank.setdefault(key, []).append(rep)
    for (_, rank, _), reps in by_rank.items():
        need = sum(rep.plan.static_gpu_bytes + rep.plan.overhead_bytes for rep in reps)
        plans = {rep.stage: rep.plan for rep in reps}
        ops = [(a.stage, a.op) for a in flatten(inp.program[rank])]
        kept = kept_peak(ops, plans, paired_forwards(inp.program[rank]))
        step = step_moment_bytes(inp.runtime.step_transient, (rep.plan for rep in reps))
        need += max(kept, step)
        gpu = reps[0].gpu
        cap = inp.topology.gpu(int(gpu[3:])).memory_bytes
        if need > cap:
            return gpu, need, cap
    return None


def peak_resident_bytes(order, resident: dict[int, float]) -> float:
    """The most stash bytes a rank keeps at once: after each forward (F) of stage ``s``,
    ``resident[s]`` more, until that micro-batch's B (or W) of ``s`` frees it; the rank runs
    its ``order`` one action at a time (pairs as their two actions).

    Example:
        >>> from sim.schedules.action import Action
        >>> order = [Action.from_str(x) for x in "0F0 2F0 0F1 2B0 0B0 0B1".split()]
        >>> peak_resident_bytes(order, {0: 1.0, 2: 10.0})
        12.0
    """
    live = peak = 0.0
    for a in flatten(order):
        if a.op == "F":
            live += resident[a.stage]
            peak = max(peak, live)
        elif a.op in ("B", "W"):
            live -= resident[a.stage]
    return peak
