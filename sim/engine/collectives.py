"""Data-parallel collectives over the ``w`` replicas of a stage: all-reduce, reduce-scatter,
all-gather, as NCCL runs them within one server.

Ring algorithm (Patarasuk & Yuan 2009; NCCL's ring): the ``w`` GPUs of the communicator form a
ring (:meth:`~sim.hardware.topology.Topology.ring`, each hop routed through the communicator's
GPUs, switches and hosts only); an all-reduce of ``B`` bytes is ``2(w-1)`` steps, a
reduce-scatter or an all-gather ``w-1`` steps, and in every step each GPU sends ``B/w`` bytes to
the next one, all hops at once. A step therefore takes the slowest hop's
:func:`~sim.hardware.topology.transfer_time_s` for ``B/w`` bytes at NCCL's rate of its links
(:func:`~sim.hardware.topology.ring_hop_bandwidths`: ~20 of 25 GB/s per NVLink, NCCL
``src/graph/topo.h``; raw copies get more), and the bus bandwidth NCCL
reports (nccl-tests ``doc/PERFORMANCE.md``: ``algbw = B / t``; ``busbw = algbw * 2(n-1)/n`` for
all-reduce, ``algbw * (n-1)/n`` for reduce-scatter and all-gather) tends to the slowest hop's
bandwidth for large ``B``. The collective holds every link of the ring for its whole duration,
so it contends with sends and swaps on those links (links are FIFO: see
:mod:`sim.engine.links`).

Overlap (PyTorch DDP, ``bucket_cap_mb=25``): the all-reduce of a backward that ends an
optimizer step runs in buckets of ``SimInput.dp_bucket_bytes`` while the backward computes.
Gradients are assumed to become ready at a uniform rate over the backward (an assumption: the
engine has per-stage, not per-layer, times), so bucket ``k`` of ``n`` is ready at
``start + dur * bytes_up_to_k / B``; buckets are reduced one after another (one NCCL stream), and
the optimizer step waits for the last one: only the tail is exposed. Within a hold of several
buckets (more than :data:`MAX_HOLDS` buckets), the buckets still run back to back as each
becomes ready; only contention with other traffic is resolved per hold instead of per bucket.
"""

from __future__ import annotations

import math

import simpy

from sim.engine.inputs import SimInput, StageReplica
from sim.engine.links import Links
from sim.events import Event, EventKind, Stream
from sim.hardware.topology import Link, ring_hop_bandwidths, transfer_time_s

RING_STEPS: dict[str, int] = {
    EventKind.ALLREDUCE: 2,
    EventKind.REDUCE_SCATTER: 1,
    EventKind.ALL_GATHER: 1,
}
"""Ring steps per ``w - 1`` of each collective (Patarasuk & Yuan; NCCL ring)."""


def ring_time_s(routes: list[tuple[Link, ...]], nbytes: float, kind: str) -> float:
    """Uncontended seconds of a ring collective of ``nbytes`` over ``len(routes)`` members.

    Args:
        routes: the ring's hops, ``routes[i]`` from member ``i`` to member ``i + 1 (mod w)``.
        nbytes: bytes of the buffer every member holds (the gradients), ``B``.
        kind: ``allreduce`` (``2(w-1)`` steps), ``reduce_scatter`` or ``all_gather``
            (``w-1`` steps).

    Returns:
        ``steps * max_i transfer_time_s(routes[i], B / w, bandwidth_i)``, ``bandwidth_i`` from
        :func:`~sim.hardware.topology.ring_hop_bandwidths` (hop ``i``'s bottleneck, shared
        with the other hops that cross it); 0 for one member.
    """
    w = len(routes)
    if w < 2:
        return 0.0
    bws = ring_hop_bandwidths(routes)
    step_s = max(
        transfer_time_s(route, nbytes / w, bw) for route, bw in zip(routes, bws, strict=True)
    )
    return RING_STEPS[kind] * (w - 1) * step_s


def bus_bandwidth_Bps(kind: str, members: int, nbytes: float, time_s: float) -> float:
    """NCCL's bus bandwidth of a collective that moved ``nbytes`` in ``time_s``.

    nccl-tests ``doc/PERFORMANCE.md``: ``algbw = nbytes / time_s``; ``busbw = algbw *
    2(n-1)/n`` for an all-reduce, ``algbw * (n-1)/n`` for a reduce-scatter or all-gather,
    ``algbw`` for a send/receive (``kind="transfer"``).
    """
    algbw = nbytes / time_s
    if kind == EventKind.TRANSFER:
        return algbw
    return algbw * RING_STEPS[kind] * (members - 1) / members


MAX_HOLDS = 4
"""Most link holds one bucketed all-reduce is simulated with (a 20 GB stage has 800 buckets of
25 MiB; simulating each would dominate the run)."""


def hold_groups(n: int) -> list[tuple[int, int]]:
    """``(first, last)`` bucket indices of each link hold: one per bucket up to
    :data:`MAX_HOLDS`; beyond, the last bucket alone and the others in ``MAX_HOLDS - 1``
    contiguous groups of nearly equal count."""
    if n <= MAX_HOLDS:
        return [(k, k) for k in range(n)]
    groups, head = [], n - 1
    for g in range(MAX_HOLDS - 1):
        lo, hi = head * g // (MAX_HOLDS - 1), head * (g + 1) // (MAX_HOLDS - 1) - 1
        groups.append((lo, hi))
    return groups + [(n - 1, n - 1)]


def buckets(nbytes: float, bucket_bytes: float) -> list[float]:
    """Sizes of the DDP buckets of ``nbytes`` of gradients: full buckets, the rest last."""
    if bucket_bytes <= 0 or nbytes <= bucket_bytes:
        return [nbytes]
    n = math.ceil(nbytes / bucket_bytes)
    return [bucket_bytes] * (n - 1) + [nbytes - bucket_bytes * (n - 1)]


class Collectives:
    """The collectives of one run: replicas join, the last one to join starts the ring.

    Args:
        env: the simulation environment.
        inp: the configuration (placement, width, bucket size).
        links: the link resources the ring holds.
    """

    def __init__(self, env: simpy.Environment, inp: SimInput, links: Links):
        self.env = env
        self.inp = inp
        self.links = links
        self._groups: dict[tuple, list] = {}
        self._overlapped: dict[tuple[int, int], list] = {}
        self._rings: dict[int, tuple[list[tuple[Link, ...]], tuple[str, ...]]] = {}

    @staticmethod
    def nbytes(rep: StageReplica) -> float:
        """Bytes reduced per replica: ``dp_grad_bytes``, else ``grad_bytes``."""
        plan = rep.plan
        return plan.grad_bytes if plan.dp_grad_bytes is None else plan.dp_grad_bytes

    def overlaps(self, rep: StageReplica) -> bool:
        """Whether ``rep``'s gradient all-reduce runs in buckets during its last backward."""
        return (
            self.inp.dp_width > 1
            and self.inp.dp_bucket_bytes > 0
            and not rep.plan.dp_sharded
            and self.nbytes(rep) > 0
        )

    def start_overlapped(
        self, rep: StageReplica, step_no: int, duration_s: float, tags: dict
    ) -> None:
        """``rep`` starts now the backward (of ``duration_s``) that ends step ``step_no``; when
        every replica of the stage has, the bucketed all-reduce starts (bucket ``k`` is ready on
        all of them once the last one has computed it)."""
        key = (rep.stage, step_no)
        group = self._overlapped.get(key)
        if group is None:
            group = self._overlapped[key] = [self.env.event(), 0, []]
        group[1] += 1
        group[2].append((rep, tags))
        if group[1] == self.inp.dp_width:
            self.env.process(
                self._buckets(
                    rep.stage, self.nbytes(rep), self.env.now, duration_s, group[2], group[0]
                )
            )

    def finish_overlapped(self, rep: StageReplica, step_no: int) -> simpy.Event | None:
        """The end of the bucketed all-reduce of ``rep``'s stage at step ``step_no``, if one
        was started (:meth:`start_overlapped`)."""
        group = self._overlapped.get((rep.stage, step_no))
        return None if group is None else group[0]

    def _buckets(
        self,
        s: int,
        nbytes: float,
        start_s: float,
        duration_s: float,
        members: list,
        done: simpy.Event,
    ):
        """Process: reduce the buckets in order, each once it is ready and the previous one is
        done; consecutive buckets share one hold of the ring's links when there are more than
        :data:`MAX_HOLDS` (the last bucket always has its own: it is the exposed tail)."""
        routes, names = self.ring(s)
        links = [lk for route in routes for lk in route]
        sizes = buckets(nbytes, self.inp.dp_bucket_bytes)
        n = len(sizes)
        full_s = ring_time_s(routes, sizes[0], EventKind.ALLREDUCE)
        last_s = ring_time_s(routes, sizes[-1], EventKind.ALLREDUCE)

        def ready(k: int) -> float:  # bucket k is computed once its bytes and all before are
            return start_s + duration_s * (sizes[0] * (k + 1) / nbytes if k < n - 1 else 1.0)

        for first, last in hold_groups(n):
            if ready(first) > self.env.now:
                yield self.env.timeout(ready(first) - self.env.now)
            reqs = yield from self.links.acquire(links)
            begin = self.env.now
            # buckets first..last back to back as each becomes ready (equal sizes but the
            # last bucket, which is alone): end_k = max(end_k-1, ready_k) + cost_k, solved
            cost = last_s if last == n - 1 else full_s
            end = max(begin + (last - first + 1) * cost, ready(last) + cost)
            yield self.env.timeout(end - begin)
            self.links.release(reqs)
            label = f"b{first}" if first == last else f"b{first}-{last}"
            size = sum(sizes[first : last + 1])
            for rep, tags in members:
                self.links.events.append(
                    Event(
                        EventKind.ALLREDUCE,
                        rep.gpu,
                        Stream.COMM,
                        f"allreduce s{s} {label}",
                        begin,
                        self.env.now,
                        nbytes=size,
                        links=names,
                        **tags,
                    )
                )
        done.succeed()

    def join(self, rep: StageReplica, step_no: int, tags: dict, kind: str):
        """Process: join the ``kind`` collective of ``rep``'s stage at step ``step_no`` (of
        :meth:`nbytes`); returns when every replica has joined and the ring has finished."""
        yield from self.join_keyed(rep, step_no, self.nbytes(rep), kind, tags)

    def join_keyed(self, rep: StageReplica, key: object, size: float, kind: str, tags: dict):
        """Process: join the ``kind`` collective of ``size`` bytes that ``rep``'s stage runs
        under ``key`` (a step number, or an action such as ``"0F3"`` for the per-action
        all-gathers and reduce-scatters of partitioned parameters, ZeRO-3 / PatrickStar);
        returns when every replica has joined and the ring has finished."""
        key = (rep.stage, key, kind)
        group = self._groups.setdefault(key, [self.env.event(), 0])
        group[1] += 1
        if group[1] == self.inp.dp_width:
            del self._groups[key]
            self.env.process(self._ring(rep.stage, size, kind, group[0]))
        start = self.env.now
        yield group[0]
        self.links.events.append(
            Event(
                kind,
                rep.gpu,
                Stream.COMM,
                f"{kind} s{rep.stage}",
                start,
                self.env.now,
                nbytes=size,
                links=self.ring(rep.stage)[1],
                **tags,
            )
        )

    def ring(self, s: int) -> tuple[list[tuple[Link, ...]], tuple[str, ...]]:
        """Stage ``s``'s ring: its hops' routes (through the communicator only) and the names
        of the links they hold, in name order."""
        cached = self._rings.get(s)
        if cached is None:
            topo, w = self.inp.topology, self.inp.dp_width
            gpus = tuple(f"gpu{self.inp.placement[r][s]}" for r in range(w))
            comm = frozenset(gpus)
            order = topo.ring(gpus)
            routes = [
                topo.route(a, b, within=comm)
                for a, b in zip(order, order[1:] + order[:1], strict=True)
            ]
            names = tuple(sorted({lk.name for route in routes for lk in route}))
            cached = self._rings[s] = (routes, names)
        return cached

    def _ring(self, s: int, nbytes: float, kind: str, done: simpy.Event):
        routes, _ = self.ring(s)
        yield from self.links.hold(
            [lk for route in routes for lk in route], ring_time_s(routes, nbytes, kind)
        )
        done.succeed()
