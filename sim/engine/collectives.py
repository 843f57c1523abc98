"""Data-parallel collectives over the ``w`` replicas of a stage: all-reduce, reduce-scatter,
all-gather, as NCCL runs them within one server.

Rings (NCCL's channels, :func:`~sim.comm.rings.ring_set`): the ``w`` GPUs of the
communicator get a set of rings over their NVLinks, each with the bandwidth it reserved on its
links (NCCL ``src/graph/search.cc``), or, where they have no NVLink ring, one ring whose hops are
routed through the communicator's GPUs, switches and hosts only (:meth:`~sim.hardware.topology.
Topology.ring`). The collective's ``B`` bytes are split over the rings in proportion to their
bandwidth, and all rings run at once (NVIDIA/nccl#299).

Ring algorithm (Patarasuk & Yuan 2009; NCCL's ring), on each ring: an all-reduce of its ``b``
bytes is ``2(w-1)`` steps, a reduce-scatter or an all-gather ``w-1`` steps, and in every step
each GPU sends ``b/w`` bytes to the next one, all hops at once. A step therefore takes the
slowest hop's :func:`~sim.hardware.transfer.transfer_time_s` for ``b/w`` bytes at the hop's rate
(the ring's reserved bandwidth; for the single routed ring, NCCL's rate of its links shared by
the hops that cross them, :func:`~sim.hardware.transfer.ring_hop_bandwidths`: ~20 of 25 GB/s per
NVLink, NCCL ``src/graph/topo.h``; raw copies get more), and the collective ends with its
slowest ring (:func:`~sim.comm.hierarchical.ring_set_time_s`). The bus bandwidth NCCL reports
(nccl-tests ``doc/PERFORMANCE.md``: ``algbw = B / t``; ``busbw = algbw * 2(n-1)/n`` for
all-reduce, ``algbw * (n-1)/n`` for reduce-scatter and all-gather) tends to the rings' summed
bandwidth for large ``B``: 120 GB/s over the 8 GPUs of a DGX-1 (two rings of 40 and two of 20
GB/s), against ~130 GB/s measured (NVIDIA/nccl#258). The collective holds every link of its
rings for its whole duration, one hold for all rings (a link two rings share is not held twice),
so it contends with sends and swaps on those links (links are FIFO: see
:mod:`sim.engine.links`).

What a collective takes is its plan's :meth:`~sim.comm.hierarchical.CollectivePlan.time_s`:
on GPUs that run NCCL, NCCL's own cost model (:mod:`sim.comm.nccl`) with the rings' bus
bandwidth; with a measured table of the communicator's size (``sim calibrate``: gloo on CPU),
the table; else the rings with the links' latencies, as above. The same plan times the
tensor-parallel, data-parallel and ZeRO collectives.

Across servers the data-parallel collectives are hierarchical (:mod:`sim.comm.hierarchical`);
with tensor parallelism every tensor rank ``k`` of a stage has its own data-parallel
communicator (rank ``k`` of every replica). The reduction that overlaps the last backward (DDP's
buckets) is :mod:`sim.engine.buckets`; the tensor-parallel collectives are
:mod:`sim.engine.tensor_collectives`.

Mirrored runs (:mod:`sim.engine.symmetry`): only replica 0's tensor rank 0 joins (of an
expert-data-parallel group too); a collective starts when the simulated members have joined, runs its plan over every member
(the time of the whole communicator) and holds the links :class:`~sim.engine.symmetry.HeldLinks`
says (those of the simulated GPUs and between switches).

Tied gradients (:meth:`Collectives.join_tied`): the word embedding kept on the first and the
last stage has its gradient all-reduced between those two GPUs at every step
(``PipelineRuntime.tied_grad_bytes``), before or after the data-parallel reduction of all the
rank's stage chunks (:mod:`sim.engine.step`); so do the parameters a model shares between layers
on several ranks (``PipelineRuntime.tied_groups``). Under FSDP a profile may reduce each rank's
shard of them only (``PipelineRuntime.tied_fsdp_shard``: Megatron FSDP).
"""

from __future__ import annotations

import math
from functools import partial

import simpy

from sim.comm.hierarchical import RING_STEPS, CollectivePlan, collective_plan, ring_time_s
from sim.engine.buckets import reduce_buckets, serial_bucket_bytes
from sim.engine.inputs import SimInput
from sim.engine.joined import JoinedCollectives
from sim.engine.links import DENSE, EXPERT, Links
from sim.engine.rendezvous import Rendezvous
from sim.engine.replicas import StageReplica
from sim.engine.sm_share import SmShare
from sim.engine.symmetry import HeldLinks
from sim.events import EventKind
from sim.parallel.folding import expert_dp_group

TIED_ALLREDUCE = "tied allreduce"
"""Name prefix of a shared or tied parameter group's all-reduce event (``tied allreduce s<stage>``),
logged by :meth:`Collectives.join_tied`."""

__all__ = [
    "RING_STEPS",
    "Collectives",
    "bus_bandwidth_Bps",
    "ring_time_s",
]


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


class Collectives:
    """The collectives of one run: replicas join, the last one to join starts the ring.

    Args:
        env: the simulation environment.
        inp: the configuration (placement, width, bucket size).
        links: the link resources the ring holds.
        share: the SMs the overlapped collectives take from compute
            (:mod:`sim.engine.sm_share`); None: they take none.
    """

    def __init__(
        self, env: simpy.Environment, inp: SimInput, links: Links, share: SmShare | None = None
    ):
        self.env = env
        self.inp = inp
        self.links = links
        self.share = share
        self._meet = Rendezvous(env)
        self._overlapped: dict[tuple, simpy.Event] = {}
        self._bucketed: dict[tuple, list] = {}
        self._grads_done: dict[tuple, list[simpy.Event]] = {}
        self._rings: dict[tuple, CollectivePlan] = {}
        self.held = HeldLinks(inp)
        self._joined = JoinedCollectives(env, inp, links, self.held)

    def _all_bytes(self, rep: StageReplica) -> float:
        plan = rep.plan
        return plan.grad_bytes if plan.dp_grad_bytes is None else plan.dp_grad_bytes

    def expert_share(self, rep: StageReplica) -> float:
        """Fraction of ``rep``'s parameters (and gradients) that are routed experts, with
        expert parallelism (0 without)."""
        return rep.cost.expert_grad_share if self.inp.layout.ep > 1 else 0.0

    def gather_share(self, rep: StageReplica) -> float:
        """Bytes of the parameter all-gather after a sharded step per byte of the reduction
        (:attr:`StagePlan.dp_gather_bytes`; 1 unless parameters are gathered quantized)."""
        total, gather = self._all_bytes(rep), rep.plan.dp_gather_bytes
        return 1.0 if gather is None or total <= 0 else gather / total

    def nbytes(self, rep: StageReplica) -> float:
        """Bytes reduced over all replicas: ``dp_grad_bytes``, else ``grad_bytes``, less the
        routed experts' share with expert parallelism (:meth:`expert_nbytes`)."""
        return self._all_bytes(rep) * (1.0 - self.expert_share(rep))

    def serial_buckets(self, rep: StageReplica) -> tuple[float, ...]:
        """Bytes of each bucket of ``rep``'s all-reduce at the step, reduced one after another
        (:attr:`PipelineRuntime.dp_serial_bucket_bytes`, :func:`serial_bucket_bytes`); one
        bucket of :meth:`nbytes` without it or with sharded optimizer state."""
        limit = 0.0 if rep.plan.dp_sharded else self.inp.runtime.dp_serial_bucket_bytes
        return serial_bucket_bytes(self.nbytes(rep), limit)

    def expert_nbytes(self, rep: StageReplica) -> float:
        """Bytes of routed-expert gradients, reduced over the expert-data-parallel group only
        (the replicas ``r`` with the same ``r mod ep``; :mod:`sim.parallel.expert`): 0 without
        expert parallelism or when that group is one replica."""
        if self.inp.layout.ep < 2 or len(self.expert_members(rep)) < 2:
            return 0.0
        return self._all_bytes(rep) * self.expert_share(rep)

    def expert_members(self, rep: StageReplica) -> tuple[tuple[int, int], ...]:
        """``(replica, tensor rank)`` of the GPUs of ``rep``'s expert-data-parallel group (the
        folded expert mesh's, :func:`sim.parallel.folding.expert_dp_group`: the replicas with
        ``rep``'s ``r mod ep`` and tensor rank without folding)."""
        lay, k = self.inp.layout, rep.tp_rank
        if lay.etp is None:  # unfolded: the replicas with rep's r mod ep
            return tuple((r, k) for r in range(rep.replica % lay.ep, self.inp.dp_width, lay.ep))
        return expert_dp_group(lay, rep.replica, k)

    def overlaps(self, rep: StageReplica) -> bool:
        """Whether ``rep``'s gradient reduction runs in buckets during its last backward: an
        all-reduce, or a reduce-scatter when its optimizer state is sharded
        (:attr:`StagePlan.dp_sharded`) but its backwards do not reduce-scatter themselves
        (``scatter_bytes``: ZeRO-2/3, PatrickStar)."""
        return (
            self.inp.dp_width > 1
            and self.inp.dp_bucket_bytes > 0
            and rep.plan.fsdp is None
            and rep.plan.scatter_bytes <= 0
            and self.nbytes(rep) > 0
        )

    def bucket_bytes(self, rep: StageReplica) -> float:
        """Bytes of ``rep``'s gradient buckets: ``dp_bucket_bytes``, or, where only stage 0
        buckets (:attr:`PipelineRuntime.bucket_stages` ``"first"``) or none does (``"none"``),
        all of another stage's gradients in one bucket (``inf``)."""
        stages = self.inp.runtime.bucket_stages
        if stages == "none" or (stages == "first" and rep.stage != 0):
            return math.inf
        return self.inp.dp_bucket_bytes

    def start_overlapped(
        self,
        rep: StageReplica,
        step_no: int,
        duration_s: float,
        tags: dict,
        grads_done: simpy.Event | None = None,
    ) -> None:
        """``rep`` starts now the backward (of ``duration_s`` of compute) that ends step
        ``step_no``; when every replica of the stage has, the bucketed all-reduce starts
        (bucket ``k`` is ready on all of them once the last one has computed it).
        ``grads_done``: the end of ``rep``'s backward, the tensor- and expert-parallel
        exchanges that follow its compute included (:meth:`~sim.engine.actions.Actions.
        backward`); the last bucket waits for it on every member (its gradients, the chunk's
        first layers', are computed after the layers' all-to-alls and all-gathers: module
        doc of :mod:`sim.engine.buckets`)."""
        parts: list[tuple[tuple, int, float, tuple | None]] = [
            ((rep.stage, rep.tp_rank, step_no), self.inp.simulated_replicas, self.nbytes(rep), None)
        ]
        if self.expert_nbytes(rep) > 0:
            group_of = self.expert_members(rep)
            key = ("expert", rep.stage, step_no, group_of[0])
            parts.append((key, self.held.members(group_of), self.expert_nbytes(rep), group_of))
        for key, size, nbytes, members in parts:
            joined = self._bucketed.setdefault(key, [])
            joined.append((rep, tags))
            ends = self._grads_done.setdefault(key, [])
            if grads_done is not None:
                ends.append(grads_done)
            start = partial(self._buckets, rep, nbytes, (duration_s, ends), joined, members)
            self._overlapped[key] = self._meet.arrive(key, size, start)

    def finish_overlapped(self, rep: StageReplica, step_no: int) -> simpy.Event | None:
        """The end of the bucketed all-reduce of ``rep``'s stage at step ``step_no``, if one
        was started (:meth:`start_overlapped`), and of its expert part if any."""
        done = self._overlapped.get((rep.stage, rep.tp_rank, step_no))
        if done is None:
            return None
        members = self.expert_members(rep)
        expert = self._overlapped.get(("expert", rep.stage, step_no, members[0]))
        return done if expert is None else self.env.all_of([done, expert])

    def _buckets(
        self,
        rep: StageReplica,
        nbytes: float,
        backward: tuple[float, list[simpy.Event]],
        joined: list,
        replicas: tuple[int, ...] | None,
        done: simpy.Event,
    ):
        """The bucketed reduction (:func:`~sim.engine.buckets.reduce_buckets`) of ``nbytes``
        over ``rep``'s stage from now, over the backward's compute seconds, for the replicas
        that ``joined`` (``(rep, tags)`` each), ending with ``done``; ``backward``: the compute
        seconds and the members' backward ends (the last bucket waits for them all);
        ``replicas``: the communicator's (None: all; else an expert group)."""
        duration_s, ends = backward
        kind = EventKind.REDUCE_SCATTER if rep.plan.dp_sharded else EventKind.ALLREDUCE
        plan = self.ring(rep.stage, rep.tp_rank, replicas)
        sizes = (nbytes, self.bucket_bytes(rep))
        window = (self.env.now, duration_s)
        return reduce_buckets(
            self.env,
            self.links,
            plan,
            kind,
            sizes,
            window,
            joined,
            done,
            self.held(plan),
            self.share,
            DENSE if replicas is None else EXPERT,
            self.env.all_of(ends) if ends else None,
        )

    def join(self, rep: StageReplica, step_no: int, tags: dict, kind: str, share: float = 1.0):
        """Process: join the ``kind`` collective of ``rep``'s stage at step ``step_no`` (of
        :meth:`nbytes` x ``share``); returns when every replica has joined and the ring has
        finished."""
        yield from self.join_keyed(rep, step_no, self.nbytes(rep) * share, kind, tags)

    def join_keyed(self, rep: StageReplica, key: object, size: float, kind: str, tags: dict):
        """Process: join the ``kind`` collective of ``size`` bytes that ``rep``'s stage runs
        under ``key`` (a step number, or an action such as ``"0F3"`` for the per-action
        all-gathers and reduce-scatters of partitioned parameters, ZeRO-3 / PatrickStar);
        returns when every replica has joined and the ring has finished."""
        yield from self._joined.join(
            rep,
            (rep.stage, rep.tp_rank, key, kind),
            self.inp.simulated_replicas,
            self.ring(rep.stage, rep.tp_rank),
            kind=kind,
            nbytes=size,
            name=f"{kind} s{rep.stage}",
            tags=tags,
        )

    def join_tied(self, rep: StageReplica, step_no: int, tags: dict):
        """Process: the all-reduces of the gradients tied between stages
        (:meth:`PipelineRuntime.all_tied`: Megatron's word embedding between the first and the
        last stage; parameters a model shares across stages) that ``rep``'s replica and tensor
        rank run at step ``step_no``, one after another; nothing for a stage holding none, or
        when every holder sits on one GPU. Under FSDP with ``tied_fsdp_shard`` each moves the
        rank's shard, ``1/shard`` of the bytes (assumption: evenly sharded)."""
        shard = rep.plan.fsdp.shard if rep.plan.fsdp and self.inp.runtime.tied_fsdp_shard else 1
        for index, (stages, size) in enumerate(self.inp.runtime.all_tied(self.inp.stages)):
            if size > 0 and rep.stage in stages:
                yield from self._join_tied_group(rep, step_no, tags, index, stages, size / shard)

    def _join_tied_group(self, rep, step_no: int, tags: dict, index: int, stages, size: float):
        r, k = rep.replica, rep.tp_rank
        gpus = tuple(dict.fromkeys(f"gpu{self.inp.gpu_index(r, s, k)}" for s in stages))
        if len(gpus) < 2:
            return
        yield from self._joined.join(
            rep,
            ("tied", index, r, k, step_no),
            len(gpus),
            self._joined.plan(gpus),
            kind=EventKind.ALLREDUCE,
            nbytes=size,
            name=f"{TIED_ALLREDUCE} s{rep.stage}",
            tags=tags,
        )

    def join_stage(self, rep: StageReplica, key: object, nbytes: float, name: str, tags: dict):
        """Process: ``rep`` joins the all-reduce of ``nbytes`` under ``key`` over every GPU of
        its stage (each replica's every tensor rank: Megatron-Core's tensor-and-data-parallel
        group with context parallelism, whose ranks are the stage's ``dp x cp`` replicas times
        its ``t`` tensor ranks: :mod:`sim.parallel.router_bias`), logged as ``name``; nothing
        when the stage has one GPU."""
        members = tuple(
            (r, k) for r in range(self.inp.dp_width) for k in range(self.inp.tensor_parallel)
        )
        if len(members) < 2:
            return
        gpus = tuple(f"gpu{self.inp.gpu_index(r, rep.stage, k)}" for r, k in members)
        yield from self._joined.join(
            rep,
            ("stage", rep.stage, key),
            self.held.members(members),
            self._joined.plan(gpus),
            kind=EventKind.ALLREDUCE,
            nbytes=nbytes,
            name=name,
            tags=tags,
        )

    def ring(self, s: int, k: int = 0, replicas: tuple | None = None) -> CollectivePlan:
        """The data-parallel communicator of tensor rank ``k`` of stage ``s`` (rank ``k`` of
        every replica, or of ``replicas``: replica indices, or ``(replica, tensor rank)``
        pairs of a folded expert group): its rings
        (:func:`~sim.comm.hierarchical.collective_plan`) and the links they hold."""
        members = tuple(range(self.inp.dp_width)) if replicas is None else replicas
        cached = self._rings.get((s, k, members))
        if cached is None:
            gpus = tuple(
                f"gpu{self.inp.gpu_index(x, s, k)}"
                if isinstance(x, int)
                else f"gpu{self.inp.gpu_index(x[0], s, x[1])}"
                for x in members
            )
            # one plan per communicator key, as the logs' byte digests expect (not shared by GPUs)
            cached = self._rings[(s, k, members)] = collective_plan(self.inp.topology, gpus)
        return cached

    def join_expert(
        self, rep: StageReplica, step_no: int, tags: dict, kind: str, share: float = 1.0
    ):
        """Process: the ``kind`` collective of ``rep``'s routed-expert gradients (or, after a
        sharded step, parameters: ``share`` of those bytes) over its expert-data-parallel group
        at step ``step_no``."""
        size = self.expert_nbytes(rep) * share
        yield from self.join_expert_keyed(rep, step_no, size, kind, tags)

    def join_expert_keyed(self, rep: StageReplica, key: object, size: float, kind: str, tags):
        """Process: the ``kind`` collective of ``size`` bytes over ``rep``'s
        expert-data-parallel group under ``key`` (a step number, or an action for ZeRO-3's
        per-action gathers and reduce-scatters of partitioned experts)."""
        members = self.expert_members(rep)
        yield from self._joined.join(
            rep,
            ("expert", kind, rep.stage, key, members[0]),
            self.held.members(members),
            self.ring(rep.stage, rep.tp_rank, members),
            kind=kind,
            nbytes=size,
            name=f"{kind} experts s{rep.stage}",
            tags=tags,
        )
