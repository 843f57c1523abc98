"""Memory traffic: swaps, chunk fetches, gradient write-backs, step copies, host optimizer steps.

Every copy is a transfer on the topology (:class:`~sim.engine.links.Links`: it holds each link
of its route, so it contends with the pipeline's own sends), and every byte is recorded in the
ledger where it lives:

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

from collections import defaultdict

import simpy

from sim.engine.links import Links
from sim.engine.replicas import StageReplica
from sim.engine.streams import ComputeStream
from sim.events import Event, EventKind, MemCategory, Stream
from sim.ledger import Ledger
from sim.memory.plan import Transfer
from sim.schedules.action import Action


def _stream(node: str, out: bool) -> Stream:
    if node.startswith("gpu"):
        return Stream.P2P
    return Stream.D2H if out else Stream.H2D


class MemoryTraffic:
    """The memory-policy copies of every stage replica of one run.

    Args:
        env: the simulation environment.
        links: the link resources transfers hold.
        ledger: where bytes are recorded.
        compute: the compute streams (a late copy is a stall there).
        microbatches: micro-batches per iteration (for the iteration tag of swap-ins).
    """

    def __init__(
        self,
        env: simpy.Environment,
        links: Links,
        ledger: Ledger,
        compute: ComputeStream,
        microbatches: int,
    ):
        self.env = env
        self.links = links
        self.ledger = ledger
        self.compute = compute
        self.microbatches = microbatches
        self._started: dict[tuple, simpy.Process] = {}
        self._swapped_out: defaultdict[tuple, simpy.Event] = defaultdict(env.event)
        self._writebacks: dict[tuple[int, int, int], list[simpy.Process]] = {}

    def _start_once(self, key: tuple, gen) -> simpy.Process:
        proc = self._started.get(key)
        if proc is None:
            proc = self._started[key] = self.env.process(gen)
        else:
            gen.close()
        return proc

    def _swap_done(self, rep: StageReplica, mb: int) -> simpy.Event:
        return self._swapped_out[(*rep.key, mb)]

    # -- prefetching ------------------------------------------------------------------
    def prefetch(self, rep: StageReplica, nxt: Action) -> None:
        """Start the copies the next action needs while the current one runs (chunk fetches
        not when the plan's moves are synchronous, ``blocking_moves``: then the action starts
        them itself)."""
        if nxt.sub_actions is not None:  # an OVERLAP_F_B pair starts with its forward
            nxt = nxt.sub_actions[0]
        plan = rep.plan
        if plan.swap_bytes > 0 and nxt.op in ("B", "I"):
            self.swap_in(rep, nxt.microbatch)
        if plan.fetch_bytes > 0 and nxt.op in ("F", "B", "I") and not plan.blocking_moves:
            self.fetch(rep, nxt)

    def fetch(self, rep: StageReplica, a: Action) -> simpy.Process:
        """The (one) fetch of ``rep``'s chunks for action ``a``, started if not yet."""
        return self._start_once(("fetch", *rep.key, str(a)), self._fetch(rep, a))

    def _fetch(self, rep: StageReplica, a: Action):
        plan = rep.plan
        self.ledger.change(self.env.now, rep.gpu, plan.fetch_live, MemCategory.CHUNKS, f"fetch {a}")
        assert plan.fetch_source is not None, "a fetch plan names its source"
        yield from self.links.transfer(
            plan.fetch_source,
            rep.gpu,
            plan.fetch_bytes,
            EventKind.CHUNK_MOVE,
            f"fetch {a}",
            Stream.H2D,
            stage=rep.stage,
            replica=rep.replica,
        )

    # -- write-backs ------------------------------------------------------------------
    def writeback(
        self, rep: StageReplica, a: Action, tags: dict, after: simpy.Process | None = None
    ) -> simpy.Process:
        """Start the copy of a backward's gradients to ``fetch_source`` (once ``after``, e.g.
        their reduce-scatter, is done); the step waits for it. Returns its process."""

        def run():
            if after is not None:
                yield after
            if rep.plan.writeback_bytes <= 0:
                return
            yield from self.copy_back(rep, a, rep.plan.writeback_bytes, tags)

        proc = self.env.process(run())
        self.add_writeback(rep, proc)
        return proc

    def copy_back(self, rep: StageReplica, a: Action, nbytes: float, tags: dict, part: str = ""):
        """Process: copy ``nbytes`` of ``a``'s gradients from ``rep``'s GPU to its
        ``fetch_source``."""
        assert rep.plan.fetch_source is not None, "a write-back plan names its destination"
        yield from self.links.transfer(
            rep.gpu,
            rep.plan.fetch_source,
            nbytes,
            EventKind.CHUNK_MOVE,
            f"write-back {a}{part}",
            Stream.D2H,
            **tags,
        )

    def add_writeback(self, rep: StageReplica, proc: simpy.Process) -> None:
        """Make ``rep``'s next optimizer step wait for ``proc`` (a gradient copy)."""
        self._writebacks.setdefault(rep.key, []).append(proc)

    def wait_writebacks(self, rep: StageReplica, tags: dict):
        """Process: wait for every write-back started since the last call (a stall if late)."""
        pending = self._writebacks.pop(rep.key, [])
        if pending:
            yield from self.compute.wait(
                self.env.all_of(pending), rep.gpu, f"wait write-back s{rep.stage}", **tags
            )

    # -- swaps ------------------------------------------------------------------------
    def swap_out(self, rep: StageReplica, mb: int, tags: dict) -> None:
        """Start swapping out micro-batch ``mb``'s stash (the swap-in waits for it)."""
        self._swap_done(rep, mb)  # created now so that a swap-in can wait on it
        self.env.process(self._swap_out(rep, mb, tags))

    def _swap_out(self, rep: StageReplica, mb: int, tags: dict):
        yield from self._each_part(rep, mb, tags, self._part_out, "->")
        self._swap_done(rep, mb).succeed()

    def _each_part(self, rep: StageReplica, mb: int, tags: dict, move, arrow: str):
        """Process: ``move(rep, part, mb, suffix, tags)`` each of ``rep``'s swap parts: one
        here (no suffix), several at once (suffix ``" {arrow}{node}"``)."""
        parts = rep.plan.swap_parts
        if len(parts) == 1:
            yield from move(rep, parts[0], mb, "", tags)
            return
        moves = [self.env.process(move(rep, p, mb, f" {arrow}{p[0]}", tags)) for p in parts]
        yield self.env.all_of(moves)

    def _part_out(
        self, rep: StageReplica, part: tuple[str, float], mb: int, suffix: str, tags: dict
    ):
        node, nbytes = part
        s, gpu = rep.stage, rep.gpu
        yield from self.links.transfer(
            gpu,
            node,
            nbytes,
            EventKind.SWAP_OUT,
            f"swap-out {s}/{mb}{suffix}",
            _stream(node, True),
            **tags,
        )
        now = self.env.now
        self.ledger.change(now, gpu, -nbytes, MemCategory.ACTIVATIONS, f"swapped {s}/{mb}{suffix}")
        self.ledger.change(now, node, nbytes, MemCategory.SWAP, f"from {gpu} {s}/{mb}")

    def swap_in(self, rep: StageReplica, mb: int) -> simpy.Process:
        """The (one) swap-in of micro-batch ``mb``'s stash, started if not yet."""
        return self._start_once(("swapin", *rep.key, mb), self._swap_in(rep, mb))

    def _swap_in(self, rep: StageReplica, mb: int):
        yield self._swap_done(rep, mb)
        self.ledger.change(
            self.env.now,
            rep.gpu,
            rep.plan.swap_bytes,
            MemCategory.ACTIVATIONS,
            f"swap-in {rep.stage}/{mb}",
        )
        tags = rep.tags(mb, mb // self.microbatches)
        yield from self._each_part(rep, mb, tags, self._part_in, "<-")

    def _part_in(
        self, rep: StageReplica, part: tuple[str, float], mb: int, suffix: str, tags: dict
    ):
        node, nbytes = part
        s = rep.stage
        yield from self.links.transfer(
            node,
            rep.gpu,
            nbytes,
            EventKind.SWAP_IN,
            f"swap-in {s}/{mb}{suffix}",
            _stream(node, False),
            **tags,
        )
        self.ledger.change(
            self.env.now, node, -nbytes, MemCategory.SWAP, f"back to {rep.gpu} {s}/{mb}"
        )

    # -- the optimizer step -----------------------------------------------------------
    def copy(self, t: Transfer, tags: dict):
        """Process: a step copy (``d2h`` when it goes to a host)."""
        out = t.dst.startswith("cpu")
        yield from self.links.transfer(
            t.src,
            t.dst,
            t.nbytes,
            EventKind.SWAP_OUT if out else EventKind.SWAP_IN,
            t.label or f"{t.src}->{t.dst}",
            Stream.D2H if out else Stream.H2D,
            **tags,
        )

    def host_step(
        self,
        rep: StageReplica,
        tags: dict,
        started: simpy.Event | None = None,
        share: float = 1.0,
    ):
        """Process: the optimizer step on the host CPU in the plan's CPU-Adam pool
        (``host_optimizer_pool``: the server's sockets, :mod:`sim.memory.host_adam`; else the
        GPU's host socket): steps that meet in a pool run one after another at its full rate.
        ``started`` (if given) succeeds when this step gets the pool; ``share``: the part of
        the host step this turn updates (one chunk's, :meth:`chunked_step`). With
        ``host_optimizer_thread_share`` below 1 the step runs on the rank's own threads at
        that share of the pool's rate, without queueing (PatrickStar's per-process OpenMP
        teams, :mod:`sim.memory.chunked`)."""
        threads = rep.plan.host_optimizer_thread_share
        queued = threads >= 1.0
        cpu = self.links.resource(f"adam@{rep.plan.host_optimizer_pool or rep.host}")
        req = cpu.request() if queued else None
        if req is not None:
            yield req
        start = self.env.now
        if started is not None:
            started.succeed()
        yield self.env.timeout(rep.plan.host_optimizer_s * share / min(1.0, threads))
        if req is not None:
            cpu.release(req)
        s, r = rep.stage, rep.replica
        self.links.events.append(
            Event(
                EventKind.HOST_OPTIMIZER,
                rep.host,
                f"adam-s{s}r{r}" + (f"t{rep.tp_rank}" if rep.tp_rank else ""),
                f"host step s{s}",
                start,
                self.env.now,
                **tags,
            )
        )

    def tiled_step(self, rep: StageReplica, tags: dict):
        """Process: the host step with its ``step_transfers_after`` copied tile by tile while
        the next tile updates (``host_step_tiles`` tiles): every tile but the last goes up once
        the first tile is done, the last once the step has ended (the copies of intermediate
        tiles may run ahead of their tile; the end, the last tile's copy after the step, is
        the pipelined one)."""
        plan = rep.plan
        n = max(1, plan.host_step_tiles)
        started = self.env.event()
        step = self.env.process(self.host_step(rep, tags, started))
        yield started
        yield self.env.timeout(plan.host_optimizer_s / n)
        after = plan.step_transfers_after
        if n > 1:
            yield self.env.all_of(
                [self.env.process(self.copy(_part(t, (n - 1) / n), tags)) for t in after]
            )
        yield step
        yield self.env.all_of([self.env.process(self.copy(_part(t, 1 / n), tags)) for t in after])

    def chunked_step(self, rep: StageReplica, tags: dict):
        """Process: the host step chunk by chunk (``host_step_chunks`` chunks) on the rank's one
        host thread, as PatrickStar's ``FP16Adam.fp16_chunk_adam_ops`` runs its CPU chunks
        (Tencent/PatrickStar@2384535 ``patrickstar/ops/fp16_cpu_adam.py`` 336-467): each
        chunk's 16-bit gradients are copied into a pinned host buffer
        (``FP32ChunkReadBuffer.access_from_cache``, a blocking ``copy_``), CPU Adam updates
        the chunk, and its fp32 weights are copied up (``FP16ChunkWriteBuffer.
        write_from_cache``, a blocking ``copy_``), one after another, each chunk's CPU Adam a
        :meth:`host_step` of its share (on the rank's own threads with
        ``host_optimizer_thread_share`` below 1, else one turn in the CPU-Adam pool).
        (PatrickStar copies chunk ``i``'s weights up after chunk ``i + 1``'s gradients come
        down; the per-rank sum is the same.)"""
        plan = rep.plan
        n = max(1, plan.host_step_chunks)
        for _ in range(n):
            for t in plan.step_transfers_before:
                yield from self.copy(_part(t, 1 / n), tags)
            yield from self.host_step(rep, tags, share=1 / n)
            for t in plan.step_transfers_after:
                yield from self.copy(_part(t, 1 / n), tags)


def _part(t: Transfer, share: float) -> Transfer:
    """``share`` of transfer ``t``'s bytes, same route and label."""
    return Transfer(t.src, t.dst, t.nbytes * share, t.label)
