"""The engine's data-parallel collectives over the ``w`` replicas of a stage (a mix-in).

Ring bounds (Patarasuk & Yuan; NCCL's ring algorithm): an all-reduce of ``B`` bytes takes
``2(w-1)/w * B / bottleneck + 2(w-1) * hop latency``; a reduce-scatter or an all-gather is half
of it (``(w-1)/w * B / bottleneck + (w-1) * hop latency``). Each holds every link of the ring
for its duration, so it contends with sends and swaps on those links.
"""

from __future__ import annotations

import simpy

from sim.events import Event
from sim.memory.plan import StagePlan

_FACTOR = {"allreduce": 1.0, "reduce_scatter": 0.5, "all_gather": 0.5}


class Collectives:
    """All-reduce, reduce-scatter and all-gather of one stage's gradients or parameters."""

    env: simpy.Environment

    def dp_bytes(self, plan: StagePlan) -> float:
        return plan.grad_bytes if plan.dp_grad_bytes is None else plan.dp_grad_bytes

    def collective(self, r, s, step_no, plan: StagePlan, meta, kind: str = "allreduce"):
        """Process: join the ``kind`` collective of stage ``s`` at step ``step_no``; returns
        when every replica has joined and the ring has finished."""
        key = (s, step_no, kind)
        group = self.collectives.setdefault(key, [self.env.event(), 0])
        group[1] += 1
        nbytes = self.dp_bytes(plan)
        if group[1] == self.inp.dp_width:
            self.env.process(self.ring(s, nbytes, _FACTOR[kind], group[0]))
        start = self.env.now
        yield group[0]
        gpu = f"gpu{self.inp.placement[r][s]}"
        self.log.events.append(Event(kind, gpu, "comm", f"{kind} s{s}", start, self.env.now,
                                     nbytes=nbytes, **{**meta, "replica": r}))

    def allreduce(self, r, s, step_no, plan: StagePlan, meta):
        """Ring all-reduce of the stage's gradients over its ``w`` replicas (module doc)."""
        yield from self.collective(r, s, step_no, plan, meta, "allreduce")

    def ring(self, s, nbytes, factor: float, done: simpy.Event):
        """Hold the ring's links for ``factor * (2(w-1)/w * nbytes / bottleneck + 2(w-1) *
        latency)`` (``factor`` 1 for an all-reduce, 1/2 for a reduce-scatter or all-gather)."""
        topo, w = self.inp.topology, self.inp.dp_width
        gpus = [f"gpu{self.inp.placement[r][s]}" for r in range(w)]
        routes = [topo.route(gpus[i], gpus[(i + 1) % w]) for i in range(w)]
        links = [lk for route in routes for lk in route]
        bw = min(lk.bandwidth_Bps for lk in links)
        lat = max(sum(lk.latency_s for lk in route) for route in routes)
        dur = factor * (2 * (w - 1) / w * nbytes / bw + 2 * (w - 1) * lat)
        yield from self.hold_links(links, dur)
        done.succeed()
