"""Policy ``auto``: per stage, the cheapest combination of the other policies that fits.

MPress's holistic choice and vPipe's per-layer swap/recompute plan, with the estimates of
:mod:`sim.memory.estimate`. For every stage replica:

1. **Local options**: model states on the GPU, on the host (ZeRO-Offload with ``overlap_comm``,
   whose gradient copies run beside the backward) or in chunks
   (PatrickStar); for the first two, every recompute choice with the smallest host swap that
   fits (:mod:`sim.memory.search`); for chunks, keep / selective / full recompute. Each option
   has an estimated cost, the seconds it adds per iteration (recompute, exposed copies, the host
   optimizer step, which the stages of one server share, :mod:`sim.memory.host_adam`).
2. The cheapest option that fits its GPU's budget is taken (if none fits: the smallest peak,
   and the notes say it does not fit).
3. **D2D pass** (MPress): stages that still pay something, costliest first, try parking their
   stash on NVLink peers' spare memory instead; taken when cheaper.
4. **Host DRAM**: while a socket's planned bytes (offloaded states and swapped stashes) exceed
   its DRAM, the stage on it with the cheapest alternative that uses less host memory switches.
5. **Replicas agree**: the data-parallel replicas of a stage reduce their gradients the same
   way (all-reduce, reduce-scatter, or chunks gathered and scattered around every action:
   :func:`dp_layout`), as one process group does; where their choices differ, all take the
   layout whose slowest replica adds least.

Notes per stage: the choice, GiB saved, ms added per iteration, the runner-up and how many
options were considered.
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.memory.base import MemoryPolicy
from sim.memory.chunk_plan import chunk_states
from sim.memory.compose import activation_plan, describe, ms, note_reservations, resident_plan
from sim.memory.context import StageContext
from sim.memory.estimate import (
    HEADROOM,
    SWAP_LIVE,
    budget_bytes,
    host_bytes,
    incoming_bytes,
    planned_peak_bytes,
    spare_bytes,
)
from sim.memory.host_adam import pool_sharers
from sim.memory.memtracer import best_utilization
from sim.memory.peers import nvlink_peers, stripe
from sim.memory.plan import StagePlan
from sim.memory.search import Option, best_option, option, stash_choices
from sim.memory.stash import stash
from sim.memory.tensors import stage_groups
from sim.memory.zero_offload import offload_states


class AutoPolicy(MemoryPolicy):
    """Pick, per stage, the cheapest plan that fits (module doc)."""

    name = "auto"
    description = "per stage, the cheapest fitting mix of recompute, swap, d2d, offload, chunks"
    cross_stage = True

    def plan(self, ctx: StageContext) -> StagePlan:
        return self.plan_all([ctx])[0]

    def plan_all(
        self, contexts: list[StageContext], fixed: Sequence[tuple[StageContext, StagePlan]] = ()
    ) -> list[StagePlan]:
        options = [self.options(c, pool_sharers(contexts, c), len(contexts)) for c in contexts]
        chosen = [opts[0] for opts in options]
        self.d2d_pass(contexts, chosen, fixed)
        self.host_pass(contexts, chosen, options)
        self.replica_pass(contexts, chosen, options)
        plans = [
            self.describe(c, ch, opts)
            for c, ch, opts in zip(contexts, chosen, options, strict=True)
        ]
        return note_reservations(contexts, plans, fixed)

    def options(self, ctx: StageContext, on_host: int, ranks: int = 1) -> list[Option]:
        """Every local option of a stage, best first (``on_host``: stages sharing its
        server's CPU-Adam pool, :mod:`sim.memory.host_adam`; ``ranks``: stages on the server)."""
        out = []
        offload, off_s = offload_states(ctx, resident_plan(ctx), overlap=True)
        off_s += (on_host - 1) * offload.host_optimizer_s
        resident = resident_plan(ctx)
        for tag, base, extra in (("gpu", resident, 0.0), ("zero_offload", offload, off_s)):
            for st in stash_choices(ctx):
                o = option(ctx, st, base, extra_s=extra)
                out.append(
                    Option(
                        o.plan,
                        f"{tag} states, {o.label}",
                        o.added_s,
                        o.peak_bytes,
                        o.fits,
                        tag,
                        extra,
                    )
                )
        chunk = best_utilization(stage_groups(ctx.layers, ctx.dtype_bytes))
        for st in (stash(ctx), stash(ctx, selective=True), stash(ctx, full=range(len(ctx.layers)))):
            act = activation_plan(ctx, st)
            plan, added, _ = chunk_states(ctx, act, chunk, ranks)
            added += ctx.microbatches * st.recompute_s + (on_host - 1) * plan.host_optimizer_s
            peak = planned_peak_bytes(plan, ctx)
            out.append(
                Option(
                    plan,
                    f"chunked states, {st.label}",
                    added,
                    peak,
                    peak <= budget_bytes(ctx),
                    "chunked",
                    added,
                )
            )
        return sorted(out, key=lambda o: o.key)

    def d2d_pass(self, contexts, chosen: list[Option], fixed) -> None:
        job = {c.gpu for c in contexts} | {c.gpu for c, _ in fixed}
        for i in sorted(range(len(contexts)), key=lambda i: -chosen[i].added_s):
            ctx, cur = contexts[i], chosen[i]
            if cur.added_s <= 0 or cur.state == "chunked" or ctx.in_flight <= SWAP_LIVE:
                continue
            base = resident_plan(ctx)
            if cur.state == "zero_offload":
                base = offload_states(ctx, base, overlap=True)[0]
            pairs = list(fixed) + [
                (c, o.plan) for j, (c, o) in enumerate(zip(contexts, chosen, strict=True)) if j != i
            ]
            reserved = incoming_bytes(pairs).get(ctx.gpu, 0.0)
            need = (
                planned_peak_bytes(activation_plan(ctx, stash(ctx), (), base), ctx)
                + reserved
                - budget_bytes(ctx)
            )
            n = ctx.in_flight
            room = {g: max(0.0, s) / n for g, s in spare_bytes(pairs).items()}
            parts = stripe(min(ctx.act_bytes, need / (n - SWAP_LIVE)), nvlink_peers(ctx, job), room)
            if not parts:
                continue
            o = best_option(ctx, base, parts, extra_s=cur.state_s, reserved=reserved)
            if o.fits and o.added_s < cur.added_s - 1e-9:
                label = f"{cur.state} states, d2d + {o.label}"
                chosen[i] = Option(
                    o.plan, label, o.added_s, o.peak_bytes, True, cur.state, cur.state_s
                )

    def host_pass(self, contexts, chosen: list[Option], options: list[list[Option]]) -> None:
        """Switch stages until every socket's DRAM holds its plans (or no switch helps: then
        :func:`~sim.memory.compose.note_host_capacity` marks them)."""
        if not contexts:
            return
        topo = contexts[0].topology
        for host in sorted({c.host for c in contexts}):
            cap = topo.host(host).dram_bytes * (1 - HEADROOM)
            idx = [i for i, c in enumerate(contexts) if c.host == host]
            while sum(host_bytes(contexts[i], chosen[i].plan) for i in idx) > cap:
                best = None
                inc = incoming_bytes([(c, o.plan) for c, o in zip(contexts, chosen, strict=True)])
                for i in idx:
                    have = host_bytes(contexts[i], chosen[i].plan)
                    room = budget_bytes(contexts[i]) - inc.get(contexts[i].gpu, 0.0)
                    for o in options[i]:
                        saved = have - host_bytes(contexts[i], o.plan)
                        if o.fits and o.peak_bytes <= room and saved > 0:
                            score = (o.added_s - chosen[i].added_s) / saved
                            if best is None or score < best[0]:
                                best = (score, i, o)
                if best is None:
                    break
                chosen[best[1]] = best[2]

    def replica_pass(
        self, contexts: list[StageContext], chosen: list[Option], options: list[list[Option]]
    ) -> None:
        """Give the data-parallel replicas of each stage one gradient layout
        (:func:`dp_layout`): they must meet in the same collectives (an all-reduce at the
        step; a reduce-scatter there; or chunks gathered and reduce-scattered around every
        action), else none of them finishes. Where the replicas' choices differ, each takes
        its best option of the layout whose slowest replica adds least (fitting first)."""
        stages: dict[int, list[int]] = {}
        for i, c in enumerate(contexts):
            stages.setdefault(c.stage, []).append(i)
        for idx in stages.values():
            layouts = sorted({dp_layout(chosen[i].plan) for i in idx})
            best: tuple | None = None
            for layout in layouts if len(layouts) > 1 else ():
                found = [_best_of(layout, chosen[i], options[i]) for i in idx]
                picks = [o for o in found if o is not None]
                if len(picks) < len(idx):
                    continue
                score = (any(not o.fits for o in picks), max(o.added_s for o in picks))
                if best is None or score < best[0]:
                    best = (score, picks)
            for i, o in zip(idx, best[1] if best else (), strict=False):
                chosen[i] = o

    def describe(self, ctx: StageContext, ch: Option, opts: list[Option]) -> StagePlan:
        fitting = [o for o in opts if o.fits and o.label != ch.label]
        runner = fitting[0] if fitting else None
        return describe(
            ctx,
            ch.plan,
            ch.label,
            ch.added_s,
            options=len(opts),
            fitting_options=sum(o.fits for o in opts),
            runner_up=runner.label if runner else None,
            runner_up_added_ms=ms(runner.added_s) if runner else None,
        )


def dp_layout(plan: StagePlan) -> tuple[bool, bool, bool]:
    """How ``plan``'s stage replica meets the other replicas: ``(parameters gathered around
    every action, gradients reduce-scattered after every backward, gradients reduce-scattered
    at the step)`` (:class:`~sim.memory.plan.StagePlan`'s ``gather_bytes``, ``scatter_bytes``,
    ``dp_sharded``; all False: all-reduced at the step)."""
    return (plan.gather_bytes > 0, plan.scatter_bytes > 0, plan.dp_sharded)


def _best_of(layout: tuple, cur: Option, opts: list[Option]) -> Option | None:
    """``cur`` if it has ``layout``, else the best of ``opts`` that has it (None: none)."""
    if dp_layout(cur.plan) == layout:
        return cur
    return min((o for o in opts if dp_layout(o.plan) == layout), key=lambda o: o.key, default=None)
