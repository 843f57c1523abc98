"""The engine's memory traffic: swaps, chunk fetches, gradient write-backs and step copies.

A mix-in of :class:`sim.engine._Engine` (split out to keep each module small). Every copy is a
transfer on the topology (it holds each link of its route, so it contends with the pipeline's
own sends), and every byte is recorded in the ledger where it lives:

* **swap** (``StagePlan.swap_parts``): after a forward, each part of the stash is copied to its
  node (a host, or a peer GPU over NVLink; parts run in parallel) and freed on the GPU when its
  copy ends; the node records it under category ``swap`` until it comes back. The swap-in is
  started one action ahead of the backward, re-allocates the whole stash on the GPU when it
  starts, and the backward waits for it (a ``stall`` when late).
* **fetch** (chunks on demand): ``fetch_bytes`` are copied in before each F and B (prefetched
  one action ahead) and dropped after the action.
* **write-back**: ``writeback_bytes`` of gradients leave after each B (or W); the optimizer step
  waits for all of them. They overwrite fetched chunks (PatrickStar reuses the 16-bit parameter
  chunk for its gradient), so they take no memory beyond ``fetch_live_bytes``.
* **step copies**: ``step_transfers_before/after`` around the host optimizer.
"""

from __future__ import annotations

import simpy

from sim.events import Event
from sim.memory.plan import StagePlan, Transfer
from sim.schedules.action import Action


def _stream(node: str, out: bool) -> str:
    if node.startswith("gpu"):
        return "p2p"
    return "d2h" if out else "h2d"


class MemoryOps:
    """Swap, fetch and write-back processes (needs ``env``, ``ledger``, ``transfer``, ``box``)."""

    env: simpy.Environment

    def prefetch(self, r, s, gpu, plan: StagePlan, nxt: Action) -> None:
        """Start the copies the next action needs while the current one runs."""
        if plan.swap_bytes > 0 and nxt.op in ("B", "I"):
            self.start_once(("swapin", r, s, nxt.microbatch),
                            self.swap_in(r, s, gpu, plan, nxt.microbatch))
        if plan.fetch_bytes > 0 and nxt.op in ("F", "B", "I"):
            self.start_once(("fetch", r, s, str(nxt)), self.fetch(gpu, plan, nxt, s, r))

    def start_once(self, key: tuple, gen) -> simpy.Event:
        if key not in self.mail:
            self.mail[key] = self.env.process(gen)
        else:
            gen.close()
        return self.mail[key]

    def fetch(self, gpu, plan: StagePlan, a: Action, s: int, r: int):
        self.ledger.change(self.env.now, gpu, plan.fetch_live, "chunks", f"fetch {a}")
        yield from self.transfer(plan.fetch_source, gpu, plan.fetch_bytes, "chunk_move",
                                 f"fetch {a}", "h2d", stage=s, replica=r)

    def writeback(self, r, s, gpu, plan: StagePlan, a: Action, meta) -> None:
        """Start the copy of a backward's gradients to ``fetch_source``; the step waits for it."""
        def run():
            yield from self.transfer(gpu, plan.fetch_source, plan.writeback_bytes, "chunk_move",
                                     f"write-back {a}", "d2h", **meta)

        self.pending.setdefault((r, s), []).append(self.env.process(run()))

    def wait_writebacks(self, r, s, gpu, meta):
        pending = self.pending.pop((r, s), [])
        if pending:
            yield from self.wait(self.env.all_of(pending), gpu, f"wait write-back s{s}", **meta)

    def swap_out(self, r, s, gpu, plan: StagePlan, mb, meta):
        parts = plan.swap_parts
        if len(parts) == 1:
            yield from self.swap_part_out(s, gpu, parts[0], mb, "", meta)
        else:
            yield self.env.all_of([self.env.process(
                self.swap_part_out(s, gpu, part, mb, f" ->{part[0]}", meta)) for part in parts])
        self.box(("swapout", r, s, mb)).succeed()

    def swap_part_out(self, s, gpu, part: tuple[str, float], mb, suffix: str, meta):
        node, nbytes = part
        yield from self.transfer(gpu, node, nbytes, "swap_out", f"swap-out {s}/{mb}{suffix}",
                                 _stream(node, True), **meta)
        now = self.env.now
        self.ledger.change(now, gpu, -nbytes, "activations", f"swapped {s}/{mb}{suffix}")
        self.ledger.change(now, node, nbytes, "swap", f"from {gpu} {s}/{mb}")

    def swap_in(self, r, s, gpu, plan: StagePlan, mb):
        yield self.box(("swapout", r, s, mb))
        self.ledger.change(self.env.now, gpu, plan.swap_bytes, "activations", f"swap-in {s}/{mb}")
        meta = dict(stage=s, microbatch=mb, replica=r, iteration=mb // self.inp.microbatches)
        parts = plan.swap_parts
        if len(parts) == 1:
            yield from self.swap_part_in(s, gpu, parts[0], mb, "", meta)
        else:
            yield self.env.all_of([self.env.process(
                self.swap_part_in(s, gpu, part, mb, f" <-{part[0]}", meta)) for part in parts])

    def swap_part_in(self, s, gpu, part: tuple[str, float], mb, suffix: str, meta):
        node, nbytes = part
        yield from self.transfer(node, gpu, nbytes, "swap_in", f"swap-in {s}/{mb}{suffix}",
                                 _stream(node, False), **meta)
        self.ledger.change(self.env.now, node, -nbytes, "swap", f"back to {gpu} {s}/{mb}")

    def copy(self, t: Transfer, meta):
        stream = "d2h" if t.dst.startswith("cpu") else "h2d"
        yield from self.transfer(t.src, t.dst, t.nbytes, "swap_out" if stream == "d2h"
                                 else "swap_in", t.label or f"{t.src}->{t.dst}", stream, **meta)

    def host_step(self, r, s, plan: StagePlan, meta):
        """The optimizer step on the host CPU; one socket runs one step at a time (its
        ``adam_params_per_s`` is shared by every stage whose states it holds)."""
        host = self.inp.topology.gpu(self.inp.placement[r][s]).host
        cpu = self.link(f"adam@{host}")
        req = cpu.request()
        yield req
        start = self.env.now
        yield self.env.timeout(plan.host_optimizer_s)
        cpu.release(req)
        self.log.events.append(Event("host_optimizer", host, f"adam-s{s}r{r}", f"host step s{s}",
                                     start, self.env.now, **meta))
