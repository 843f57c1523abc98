"""DualPipe's overlap: a forward chunk and a backward chunk interleaved so that one's
all-to-alls run under the other's compute.

DeepSeek-V3 (arXiv:2412.19437, §3.2.1, Fig. 4) pairs a forward and a backward chunk on a rank
and rearranges their components (attention, dispatch, MLP, combine) so that the
communication of one hides under the computation of the other; torch 2.13 emits such pairs as
``OVERLAP_F_B`` actions (``ScheduleDualPipeV``) and leaves their execution to a custom function
(``_PipelineScheduleRuntime.register_custom_function``; its default runs the two serially, and
no 1F1B-with-overlap schedule ships in 2.13). With overlap on (``sweep.ep_overlap``), the
engine runs such a pair as two chains on the rank:

* each chain is its action's compute split evenly around its exchanges (an assumption: the
  engine has per-stage, not per-layer, times): for ``n`` exchanges (the expert- and
  context-parallel :class:`~sim.parallel.ops.GroupOp` s of the action, taken in per-layer order:
  round-robin over the aggregated ops) the compute is ``n + 1`` equal segments, each followed
  by one exchange;
* the two chains share the rank's compute stream (one segment at a time, first come first
  served) and run their exchanges, which block only their own chain, meanwhile; every member
  of the group runs the same pair, so the group's exchanges still meet;
* while exchanges and compute run at once, compute runs on the SMs the communication leaves:
  DeepSeek-V3 reserves 20 of the H800's 132 SMs for it (§3.2.2), so compute progresses at
  ``(sm - 20) / sm`` of its speed while an exchange of the pair runs (its uncontended time,
  :data:`COMM_SMS`; the compute model's GPU SM count) and at full speed otherwise.
"""

from __future__ import annotations

from collections.abc import Iterator

import simpy

from sim.engine.fifo_link import FifoLink
from sim.engine.groups import GroupCollectives
from sim.engine.replicas import StageReplica
from sim.engine.streams import ComputeStream
from sim.events import EventKind
from sim.parallel.ops import GroupOp
from sim.schedules.action import Action

COMM_SMS = 20
"""SMs DeepSeek-V3's communication kernels take while they overlap compute (arXiv:2412.19437
§3.2.2: "only 20 SMs are sufficient to fully utilize the bandwidths of IB and NVLink")."""


def exchange_order(ops: tuple[GroupOp, ...]) -> Iterator[GroupOp]:
    """Each repetition of ``ops`` as a single exchange, in per-layer order (round-robin over
    the aggregated ops: dispatch, combine, dispatch, combine ...)."""
    most = max((op.count for op in ops), default=0)
    for i in range(most):
        for op in ops:
            if i < op.count:
                yield GroupOp(op.group, op.kind, op.nbytes, 1, op.pairs, op.hidden_s, op.routed)


def slowdown(sm_count: int | None, comm_sms: int | None = None) -> float:
    """Compute time factor while communication holds ``comm_sms`` (default
    :data:`COMM_SMS`) of ``sm_count`` SMs (1 when the SM count is unknown).

    Example:
        >>> slowdown(132), slowdown(148, 16)
        (1.1785714285714286, 1.121212121212121)
    """
    comm = COMM_SMS if comm_sms is None else comm_sms
    if not sm_count or sm_count <= comm:
        return 1.0
    return sm_count / (sm_count - comm)


class PairOverlap:
    """The two chains of one ``OVERLAP_F_B`` pair on one rank (module doc).

    Args:
        env: the simulation environment.
        compute: the compute streams (logs the segments).
        groups: the group exchanges.
        factor: compute time factor of overlapped segments (:func:`slowdown`).
        delay_wgrad: Megatron's ``delay_wgrad_compute`` (:meth:`body`).
        orders: the run's memo of :meth:`_order`, shared by its pairs (None: this pair's own).
    """

    def __init__(
        self,
        env: simpy.Environment,
        compute: ComputeStream,
        groups: GroupCollectives,
        factor: float = 1.0,
        delay_wgrad: bool = False,
        orders: dict | None = None,
    ):
        self.env = env
        self.compute_stream = compute
        self.groups = groups
        self.factor = factor
        self.delay_wgrad = delay_wgrad
        self.stream = FifoLink(env, "pair")  # simpy.Resource(env, 1)'s schedule, less work
        self.busy_until = 0.0
        self._orders: dict[int, tuple[tuple[GroupOp, ...], list[GroupOp]]] = (
            {} if orders is None else orders
        )

    def compute(self, gpu: str, kind: str, name: str, duration_s: float, **tags):
        """Process: ``duration_s`` of other compute of the pair (a recompute) on the shared
        stream, slowed while an exchange runs, as a chain's segments."""
        req = self.stream.request()
        yield req
        dur = self.stretched(duration_s, self.busy_until - self.env.now)
        yield from self.compute_stream.run(gpu, kind, name, dur, **tags)
        self.stream.release(req)

    def body(
        self,
        rep: StageReplica,
        a: Action,
        duration_s: float,
        ops: tuple[GroupOp, ...],
        tags,
        wgrad_s: float = 0.0,
    ):
        """Process: the chain of action ``a``: ``duration_s`` of compute split around the
        exchanges ``ops`` (module doc). With :attr:`delay_wgrad` and a backward's weight
        gradient ``wgrad_s`` (of ``duration_s``), each segment's share of it leaves the chain:
        it waits on the stream beside the segment's exchange instead of before it (Megatron's
        ``delay_wgrad_compute``: the expert wgrad runs while ``dispatch_bwd`` is in flight)."""
        seq = self._order(ops)
        late = wgrad_s / (len(seq) + 1) if self.delay_wgrad and seq else 0.0
        seg = duration_s / (len(seq) + 1) - late
        aside, label = [], str(a)
        for i, op in enumerate([*seq, None]):
            name = label if not seq else f"{label}.{i}"
            yield from self._segment(rep, name, seg, tags)
            if late > 0:
                aside.append(self.env.process(self._segment(rep, f"{name}w", late, tags)))
            if op is not None:
                end = self.env.now + self.groups.op_seconds(rep, op)
                self.busy_until = max(self.busy_until, end)
                yield from self.groups.join(rep, f"{label}#{i}", (op,), tags)
        if aside:
            yield self.env.all_of(aside)

    def _order(self, ops: tuple[GroupOp, ...]) -> list[GroupOp]:
        """:func:`exchange_order` of ``ops``, memoised by the tuple object (an action's ops are
        the same every micro-batch; the same exchanges let the groups reuse their costs)."""
        hit = self._orders.get(id(ops))
        if hit is None or hit[0] is not ops:
            hit = self._orders[id(ops)] = (ops, list(exchange_order(ops)))
        return hit[1]

    def _segment(self, rep: StageReplica, name: str, work_s: float, tags):
        """Process: ``work_s`` of the pair's compute on the shared stream."""
        req = self.stream.request()
        yield req
        dur = self.stretched(work_s, self.busy_until - self.env.now)
        yield from self.compute_stream.run(rep.gpu, EventKind.COMPUTE, name, dur, **tags)
        self.stream.release(req)

    def stretched(self, work_s: float, comm_left_s: float) -> float:
        """Seconds of ``work_s`` of compute that starts while an exchange has ``comm_left_s``
        to run: at ``1/factor`` of full speed while it runs, full speed after."""
        slow = max(0.0, comm_left_s) / self.factor  # work done while the exchange runs
        if work_s <= slow:
            return work_s * self.factor
        return max(0.0, comm_left_s) + (work_s - slow)
