"""The activations and gradients a pipeline replica's stages send each other.

A forward's output activation goes to the next stage of the same replica (and tensor rank), a
backward's input gradient to the previous one; each send is a process that holds the links of
its route (:mod:`sim.engine.links`) and, when it ends, books the receive buffer on the
receiver and triggers the arrival the receiver waits for. With blocking exchanges
(:mod:`sim.engine.exchanges`) a send starts only once its receiver has posted the receive, and
the sender's next boundary waits for it. The input gradient lives on the sender until its send
completes (:mod:`sim.memory.transients`).
"""

from __future__ import annotations

from collections import defaultdict

import simpy

from sim.engine.exchanges import Exchanges
from sim.engine.inputs import SimInput
from sim.engine.links import Links
from sim.engine.replicas import StageReplica
from sim.events import EventKind, MemCategory, Stream
from sim.ledger import Ledger


class StageSends:
    """The stage-to-stage sends of one run and the arrivals ranks wait for.

    Args:
        env: the simulation environment.
        inp: the configuration (placement, micro-batches).
        links: the link resources sends hold.
        ledger: the memory ledger (receive buffers).
        exchanges: blocking exchanges (a send waits for its posted receive; tracked sends).

    Arrival keys are ``(kind, replica, stage, microbatch, tp_rank)`` with ``kind`` ``"act"``
    (an activation arriving at ``stage``) or ``"grad"`` (a gradient arriving at it).
    """

    def __init__(
        self,
        env: simpy.Environment,
        inp: SimInput,
        links: Links,
        ledger: Ledger,
        exchanges: Exchanges,
    ):
        self.env = env
        self.inp = inp
        self.links = links
        self.ledger = ledger
        self.exchanges = exchanges
        self._arrived: defaultdict[tuple, simpy.Event] = defaultdict(env.event)

    def arrival(self, key: tuple) -> simpy.Event:
        """The event of ``key``'s data having arrived (created on first use)."""
        return self._arrived[key]

    def receive(self, key: tuple):
        """Process: post the receive of ``key`` (blocking exchanges) and wait for its data."""
        self.exchanges.post(key)
        yield self.arrival(key)

    def start(self, args: tuple) -> None:
        """Start the send :meth:`send` ``(*args)`` now, tracked for its rank's next boundary."""
        self.exchanges.track(args[0], self.env.process(self.send(*args)), args[4])

    def start_or_defer(self, args: tuple, deferred: list | None) -> None:
        """:meth:`start` the send of ``args`` now, or (``deferred`` a list) add it there for
        the caller to start later (an ``OVERLAP_F_B`` pair sends after both halves)."""
        if deferred is None:
            self.start(args)
        else:
            deferred.append(args)

    def send(self, rep: StageReplica, dst_stage: int, mb: int, nbytes: float, kind: str):
        """Process: send micro-batch ``mb``'s activation (``kind="act"``) or gradient
        (``"grad"``) of ``nbytes`` to stage ``dst_stage`` of the same replica; it arrives when
        it ends."""
        r, s = rep.replica, rep.stage
        src, dst = rep.gpu, f"gpu{self.inp.gpu_index(r, dst_stage, rep.tp_rank)}"
        op = "F" if kind == "act" else "B"
        if self.exchanges.rendezvous(nbytes):  # the receiver has posted its receive
            yield self.exchanges.posted((kind, r, dst_stage, mb, rep.tp_rank))
        yield from self.links.transfer(
            src,
            dst,
            nbytes,
            EventKind.TRANSFER,
            f"{s}{op}{mb} {src}->{dst}",
            Stream.SEND,
            **rep.tags(mb, mb // self.inp.microbatches),
        )
        self.ledger.change(
            self.env.now, dst, nbytes, MemCategory.BUFFERS, f"recv {kind} {dst_stage}/{mb}"
        )
        if kind == "grad":  # the sender's input gradient is freed (sim.memory.transients)
            self.ledger.change(self.env.now, src, -nbytes, MemCategory.BUFFERS, f"sent {op}{mb}")
        self.arrival((kind, r, dst_stage, mb, rep.tp_rank)).succeed()
