"""Stage-boundary exchanges, host sync points and step barriers as a framework's pipeline engine
runs them (:class:`~sim.engine.inputs.PipelineRuntime`).

By default nothing here applies: torch pipelining (what ``sim validate`` replays) sends with
``isend`` as soon as an action ends, nobody waits for a send, and a receiver waits only for the
data it needs.

Blocking exchanges (``blocking_p2p``). Megatron-LM's ``p2p_communication._communicate`` posts,
at each boundary between two actions of a rank, the sends of the action that ended and the
receive of the next one in one ``batch_isend_irecv`` and waits for all of them
(``send_forward_recv_backward``, ``send_backward_recv_forward``); DeepSpeed's pipeline engine
issues the same pairs as NCCL ``send``/``recv`` (``deepspeed/runtime/pipe/p2p.py``) that the
compute stream waits on, in :class:`TrainSchedule`'s order (``SendActivation`` then
``RecvGrad``; ``RecvActivation`` then ``SendGrad``). An NCCL send larger than its FIFO
(below) completes only once the receiver has posted the matching receive. So here a send starts when its sender has ended the
action and its receiver has reached the action that consumes it (:meth:`Exchanges.post`), and
the sender's next action waits until the send is complete (:meth:`Exchanges.boundary`). On a
rank that holds several stages (interleaved 1F1B), each exchange also posts the receives of the
rank's next forward and next backward, as Megatron's
``send_forward_backward_recv_forward_backward`` does (:meth:`Exchanges.post_ahead`).
With ``overlap_p2p`` (Megatron-Core's ``overlap_p2p_comm`` under the interleaved schedule,
NVIDIA/Megatron-LM@d98e8a6 ``megatron/core/pipeline_parallel/schedules.py``
``forward_backward_pipelining_with_interleaving``, steady 1F1B loop, lines 1770-1880):
``pp_post_forward`` posts the forward's ``send_next`` with the next forward's ``recv_prev`` and
waits that send right away when ``deallocate_pipeline_outputs`` (which Megatron-LM's
``core_transformer_config_from_args`` sets); ``pp_post_backward`` posts the backward's
``send_prev`` with the next backward's ``recv_next`` and only then waits the *previous*
backward's ``send_prev`` handle (``send_prev_wait_handle.wait()``, a stream wait). So a
backward of the steady state (one that follows a forward) has its sends waited at the first
boundary after the rank's next backward has run, past a forward and past that backward's own
receive posts (:meth:`Exchanges.track`); a forward's sends as without the option. The
cool-down (backwards after backwards; lines 1954-2061) sends with blocking
``send_backward_recv_backward`` without ``overlap_p2p_comm_warmup_flush``: there a backward's
sends are waited before the next action. (With ``overlap_p2p_comm_warmup_flush`` Megatron also
defers the cool-down's waits by one backward and prefetches the next receive before each
warm-up forward and cool-down backward; not modelled: the option is not mapped.)

A send of at most ``eager_send_bytes`` (NCCL's per-connection FIFO, set by a framework whose
schedule relies on it) completes without its receive posted: NCCL's sender copies it into the
receiver's buffer and returns. Megatron-Core's interleaved schedule with ``overlap_p2p_comm``
relies on it: under a pure rendezvous its own order and waits above deadlock (p=4, v=3, m=10,
group 5: rank 0 waits ``8B2``'s send after its ``8B3``, before its ``4F5``; rank 3 posts that
receive after its ``7B1``, which follows the wait of its ``3F6``'s send, whose receive rank 0
posts after its ``4F5``), yet Megatron runs it.

Host sync points (``sync_after_p2p``, ``sync_before_forward``): the host waits until the device
is idle (``torch.cuda.synchronize()``; :meth:`sim.engine.host.HostThreads.wait`), then issues the
next action's ops, so the device idles while the host issues them (the host model's
``host_wait``, :meth:`sim.engine.streams.ComputeStream.run_issued`) instead of the host running
ahead of it.

Micro-batch loads (``microbatch_load``): before a forward on the first and the last stage the
host loads the micro-batch with blocking copies (DeepSpeed's ``LoadMicroBatch`` running
Megatron's ``get_batch_pipe``), so the device idles for the host's ops, copies and the tiny
tensor-parallel broadcasts it waits for (:meth:`Exchanges.load`).

Step barriers (``step_barrier``): every rank of a pipeline replica (all ranks, all tensor
ranks; a rank holding several stage chunks arrives once) waits for the others at its optimizer
step, before or after its update.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import simpy

from sim.engine.host import HostThreads
from sim.engine.inputs import SimInput
from sim.engine.rendezvous import Rendezvous
from sim.engine.replicas import StageReplica
from sim.engine.streams import ComputeStream
from sim.engine.tensor_collectives import TensorCollectives
from sim.events import EventKind
from sim.schedules.action import STEP, Action, flatten


@dataclass
class _RankSends:
    """One rank's sends not yet waited and what the ``overlap_p2p`` holding rule needs of it.

    Attributes:
        pending: ``(tag, send)`` per send; ``tag`` is the rank's backward count when the send
            is a held backward's (:meth:`Exchanges.track`), else None.
        backwards: backwards (B or I) the rank has begun.
        after_forward: whether its latest backward came right after a forward (steady state).
        last_op: the kind of the rank's latest action ("" before the first).
    """

    pending: list[tuple[int | None, simpy.Process]] = field(default_factory=list)
    backwards: int = 0
    after_forward: bool = False
    last_op: str = ""

    def begin(self, op: str) -> None:
        """Count an action of kind ``op`` for the holding rule."""
        if op in ("B", "I"):
            self.after_forward = self.last_op == "F"
            self.backwards += 1
        self.last_op = op


class Exchanges:
    """The blocking sends, sync points and step barriers of one run.

    Args:
        env: the simulation environment.
        inp: the configuration (its :attr:`~sim.engine.inputs.SimInput.runtime`).
        compute: the compute streams (waits are logged on them).
        hosts: every rank's host thread (sync points move its clock).
        tensor: the tensor-parallel groups (times of the broadcasts a load waits for).
    """

    def __init__(
        self,
        env: simpy.Environment,
        inp: SimInput,
        compute: ComputeStream,
        hosts: HostThreads,
        tensor: TensorCollectives,
    ):
        self.env = env
        self.inp = inp
        self.runtime = inp.runtime
        self.compute = compute
        self.hosts = hosts
        self.tensor = tensor
        self._posted: defaultdict[tuple, simpy.Event] = defaultdict(env.event)
        self._ranks: defaultdict[tuple[int, int, int], _RankSends] = defaultdict(_RankSends)
        self._barriers = Rendezvous(env)
        self._ahead: dict[tuple[int, int, int], list[tuple[tuple, ...]]] = {}

    @property
    def active(self) -> bool:
        """Whether anything here applies (blocking sends or host sync points)."""
        return self.runtime.blocking_p2p or self.runtime.syncs

    @property
    def blocking(self) -> bool:
        """Whether sends are exchanged at action boundaries (module doc)."""
        return self.runtime.blocking_p2p

    def rendezvous(self, nbytes: float) -> bool:
        """Whether a send of ``nbytes`` starts only once its receive is posted: blocking
        exchanges, unless it fits NCCL's buffer (``eager_send_bytes``, module doc)."""
        return self.blocking and nbytes > self.runtime.eager_send_bytes

    def posted(self, key: tuple) -> simpy.Event:
        """The event of the receiver of ``key`` (``(kind, replica, stage, mb, tp_rank)``, the
        engine's arrival key) having posted its receive."""
        return self._posted[key]

    def post(self, key: tuple) -> None:
        """The receiver of ``key`` has reached the action that consumes it (blocking only)."""
        if self.blocking:
            ev = self.posted(key)
            if not ev.triggered:
                ev.succeed()

    def post_ahead(self, first: StageReplica, i: int) -> None:
        """At position ``i`` of ``first``'s rank order, on a rank holding several stages:
        post the receives of its next forward and its next backward (module doc)."""
        if not self.blocking:
            return
        owner = self._owner(first)
        ahead = self._ahead.get(owner)
        if ahead is None:
            ahead = self._ahead[owner] = self._receives_ahead(first)
        for key in ahead[i] if ahead else ():
            self.post(key)

    def _receives_ahead(self, first: StageReplica) -> list[tuple[tuple, ...]]:
        """Per position of the rank's order, the receive keys of the next F and the next
        B/I at or after it; empty for a rank with one stage."""
        order = [a for a in flatten(first.order) if a.op != STEP]
        if len({a.stage for a in order}) < 2:
            return []
        n, r, k = self.inp.stages, first.replica, first.tp_rank
        out: list[tuple[tuple, ...]] = []
        nxt: dict[str, tuple | None] = {"act": None, "grad": None}
        for a in reversed(first.order):
            if a.op == "F" and a.stage > 0:
                nxt["act"] = ("act", r, a.stage, a.microbatch, k)
            elif a.op in ("B", "I") and a.stage < n - 1:
                nxt["grad"] = ("grad", r, a.stage, a.microbatch, k)
            out.append(tuple(key for key in nxt.values() if key is not None))
        return out[::-1]

    def _owner(self, rep: StageReplica) -> tuple[int, int, int]:
        """``(replica, rank, tensor rank)``: the process that runs ``rep``'s actions."""
        return (rep.replica, self.inp.stage_ranks[rep.stage], rep.tp_rank)

    def track(self, rep: StageReplica, send: simpy.Process, kind: str = "act") -> None:
        """Remember ``send`` (of an action of ``rep``; ``kind``: ``act`` from a forward,
        ``grad`` from a backward) for its rank's boundaries: with ``overlap_p2p`` a steady-state
        backward's send is held (tagged with the rank's backward count) until the boundary after
        the rank's next backward (module doc); any other send is waited at the next boundary."""
        if not self.blocking:
            return
        rank = self._ranks[self._owner(rep)]
        held = kind == "grad" and self.runtime.overlap_p2p and rank.after_forward
        rank.pending.append((rank.backwards if held else None, send))

    def boundary(self, rep: StageReplica, a: Action, tags: dict, received: bool):
        """Process: what the rank of ``rep`` does before running ``a`` (once ``a``'s input has
        arrived; ``received``: ``a`` received one): wait for the sends of its previous action,
        then the host sync point, if any."""
        sent = yield from self._wait_sends(rep, str(a), tags, a.op)
        rt = self.runtime
        sync = (rt.sync_after_p2p and (sent or received)) or (
            rt.sync_before_forward and a.op == "F"
        )
        if sync:
            self.hosts.wait(rep.gpu)
        if a.op == "F":
            self.load(rep)

    def load(self, rep: StageReplica) -> None:
        """The host's blocking load of a micro-batch before a forward of ``rep``, on the first
        and the last stage (:class:`~sim.engine.inputs.MicrobatchLoad`): the host waits for the
        device (the first copy synchronizes the stream), then spends
        :meth:`~sim.hardware.host_ops.HostOverhead.blocking_s` and the broadcasts it waits for,
        each timed as the stage's tensor-parallel group times a collective of those bytes
        (an all-gather: NCCL's ring, ``n - 1`` steps; a broadcast's ``n`` is one hop more,
        under a microsecond on NVLink, not modelled); the device idles meanwhile."""
        load = self.runtime.microbatch_load
        ops = load.ops_on(rep.stage == 0, rep.stage == self.inp.stages - 1)
        if ops <= 0:
            return
        self.hosts.wait(rep.gpu)
        load_s = self.hosts.overhead_of(rep.gpu).blocking_s(ops, load.copies)
        if load_s <= 0:
            return
        if load.broadcasts and self.inp.tensor_parallel > 1:
            load_s += load.broadcasts * self.tensor.comm_s(
                rep, EventKind.ALL_GATHER, load.broadcast_bytes
            )
        self.hosts.clock(rep.gpu).t += load_s

    def drain(self, rep: StageReplica, label: str, tags: dict):
        """Process: before the optimizer step of ``rep``: wait for its rank's sends (and sync
        after them where the framework does)."""
        sent = yield from self._wait_sends(rep, label, tags, None)
        if sent and self.runtime.sync_after_p2p:
            self.hosts.wait(rep.gpu)

    def _wait_sends(self, rep: StageReplica, label: str, tags: dict, op: str | None):
        """Wait for the rank's pending sends before an action of kind ``op`` (``None``: the
        optimizer step, all of them): all but the held sends of the rank's latest backward
        (module doc); then count ``op`` (a backward or not) for the holding rule."""
        rank = self._ranks[self._owner(rep)]
        pending, latest = rank.pending, rank.backwards
        rank.pending = [entry for entry in pending if op is not None and entry[0] == latest]
        if op is not None:
            rank.begin(op)
        sends = [s for t, s in pending if op is None or t != latest]
        late = [s for s in sends if not s.triggered]
        if late:
            yield from self.compute.wait(
                self.env.all_of(late), rep.gpu, f"wait send {label}", **tags
            )
        return bool(sends)

    def barrier(self, rep: StageReplica, step_no: int, when: str, tags: dict):
        """Process: at optimizer step ``step_no``, ``when`` the runtime's ``step_barrier`` says
        (``"before_update"`` or ``"after_update"``), wait until every rank of ``rep``'s
        pipeline replica (each of its tensor ranks) has arrived; a rank arrives once, whatever
        the stage chunks it holds (its step runs them all, :mod:`sim.engine.step`)."""
        if self.runtime.step_barrier != when:
            return
        ranks = len(self.inp.program) * self.inp.simulated_tensor_ranks
        done = self._barriers.arrive((rep.replica, step_no), ranks)
        yield from self.compute.wait(done, rep.gpu, f"barrier step {step_no}", **tags)
