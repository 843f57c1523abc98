"""Bounds of a grid point computed without simulating it: a memory lower bound, a throughput
upper bound.

The planner (:mod:`sim.plan.planner`) prunes with them, so they must hold for every point, whatever
partition the partitioner picks and whatever the engine's queues do. Both use only sums over
stages, which do not depend on the partition, and the averaging argument (the largest of
``p`` numbers is at least their mean).

**Memory.** The engine charges each stage replica's model states on the GPU (weights of every
version, gradients, optimizer state) and its runtime reserve (CUDA context, cuBLAS workspace,
NCCL buffers of each peer) at t = 0 and keeps them (:meth:`sim.engine.pipeline.Engine.run`),
so a GPU's peak is at least its stage's static bytes plus that reserve. Per parameter, a policy
keeps at least its :meth:`~sim.memory.base.MemoryPolicy.min_state_bytes_per_param` on the GPU
(each class says: ``none``, ``recompute``, ``cpu_swap``: every state; ``d2d_swap`` and
``d2d_swap+recompute``: one weight version and the rest; ``zero_offload``: the 16-bit weights;
``zero3``: a ``1/w`` shard, 0 with ``:offload``; ``chunked``, ``auto``: 0; one policy per
stage: the least of its stages'; with FP8 parameters, ``precision_options.param_gather``, less
the 16-bit weights they replace; with DeepSpeed's ``BF16_Optimizer``, whose optimizer state is
partitioned over the ``w`` replicas, less ``(1 - 1/w)`` of that state,
:func:`sim.framework.deepspeed_bf16.bf16_plan`). Where every stash stays on the GPU
(:meth:`~sim.memory.base.MemoryPolicy.keeps_every_stash`: ``none``), a stage with its ``n_s``
in-flight micro-batches (the schedule's own :func:`~sim.schedules.analysis.peak_in_flight`)
holds ``n_s x act_s``, and DistributedDataParallel's buckets hold one more copy of the
gradients (:func:`sim.memory.reserve.ddp_bucket_bytes`). Summed over the ``p`` stages of a
replica, the parameters and stashes add up to the (tensor-rank) trace's totals ``P`` and ``A``,
whatever the boundaries, so some GPU peaks at least at

``(P x bytes_per_param + max(min_s(n_s) x A, S)) / p + reserve``

where ``S`` is what the optimizer steps of the stages allocate while they run, after the
activations are freed (the step moment of :mod:`sim.memory.step_moment`: ``step_transient``
bytes per gradient byte of the trainable parameters' gradients, ``FrameworkMemory.
step_transient x grad x T``, :func:`~sim.memory.step_moment.step_copy_bytes`; DeepSpeed's ``FP16_Optimizer``: 4 per gradient byte; ``1/w`` of
it where the framework shards the optimizer state), counted where every state and stash stays
on the GPU, without FSDP and with an optimizer step; else 0.

**Memory, once resolved.** A point that passes is resolved (partition, placement, plans) before
it is simulated; then each rank's bound is exact in its parts
(:func:`~sim.plan.resolved_bound.resolved_memory_excess`): the bytes the engine charges at
t = 0 for every stage chunk on it (``static_gpu_bytes + overhead_bytes``) and the most kept
stash its action list holds at once (``resident_act_bytes`` stays from a forward to its
backward; a swap only moves the rest; with one stage, ``n_s`` in-flight micro-batches), and a
rank whose sum exceeds its GPU's capacity is not simulated.

**Throughput.** Each rank runs its stage's actions one at a time: a forward or backward on the
compute stream, then its tensor-parallel collectives, which the rank waits for
(:class:`~sim.engine.tensor_collectives.TensorCollectives`); full or selective recompute runs its
forward seconds before each backward (the policy's
:meth:`~sim.memory.base.MemoryPolicy.bound_recompute_mode`). So a rank is busy at least ``m x (F_s + B_s + R_s +
C_s)`` seconds per optimizer step (``C_s``: the collectives' uncontended time, with full
recompute those its forwards run again too,
:meth:`BoundModel.layer_comm_s`; stalls, pipeline transfers, data-parallel reductions and the
step only add to it). Each term is a sum over the stage's layers, so with ``w_l`` the work of
layer ``l`` (its ``fwd + bwd``, recompute and collectives, :meth:`BoundModel.layer_work_s`) a
stage is busy ``m x sum of its w_l``. A stage is a contiguous run of layers, so whatever the
partition, the busiest stage has at least the smallest largest part of any split of the layers
into ``p`` contiguous parts (:func:`min_bottleneck_s`; at least the mean ``(T + R + C) / p``
and the largest layer). With ``v > 1`` chunks per rank a rank's chunks are not contiguous: it
has at least the mean and the largest layer. So the iteration takes at least ``m x`` that, and
the throughput is at most ``m x b x w`` samples over it (the "no bubble" bound).

What it assumes: the engine measures an iteration between optimizer-step ends
(:func:`sim.metrics.steady_window`) and each rank starts the next iteration when its own step
ends, so the bound needs the busiest rank's work of one iteration inside that window. For a
flushed schedule every backward of an iteration needs the forward of the rank that stepped
last, so all backwards (with their recompute and collectives) provably fall inside: the window
is at least ``m x max_s (B_s + R_s + C_s)``; the forwards fall inside unless a rank downstream
of the busiest one finishes its step more than the busiest rank's forwards later than it.
The property tests (``tests/test_planner.py``) hold the bound to full simulation over every
schedule and memory policy; the tighter flushed-pipeline bound ``(m - 1) x bottleneck + T``
is not used, because it needs that assumption for the whole fill and drain.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from sim.comm.hierarchical import collective_plan
from sim.compute.routing import Routing
from sim.framework.tied_embedding import share_head_weight
from sim.memory.framework_memory import FrameworkMemory
from sim.memory.layer_work import trace_work, with_framework_stash
from sim.memory.reserve import nccl_peers
from sim.memory.states import version_bytes_per_param
from sim.memory.step_moment import step_copy_bytes
from sim.parallel.decoder_shard import DecoderShard
from sim.parallel.groups import tensor_groups
from sim.parallel.megatron import aggregate
from sim.plan.resolved_bound import peak_resident_bytes, resolved_memory_excess
from sim.plan.split_bounds import RankTotals, min_bottleneck_s, weighted_bound
from sim.point.config import PointConfig
from sim.point.memory import point_memory
from sim.schedules.analysis import peak_in_flight
from sim.trace.schema import Trace, dtype_bytes, layer_kind


@dataclass(frozen=True)
class PointBounds:
    """A point's bounds: ``memory_bytes`` (some GPU peaks at least this high, bytes) and
    ``throughput_samples_per_s`` (the simulated throughput is at most this)."""

    memory_bytes: float
    throughput_samples_per_s: float


def _trace_key(point: PointConfig) -> tuple:
    """What a point's rank trace depends on (:meth:`BoundModel.totals` caches per key)."""
    return (
        point.model,
        point.microbatch_size,
        point.tensor_parallel,
        point.sequence_parallel,
        point.expert_parallel,
        point.context_parallel,
        point.context_parallel_comm,
        point.routing,
        point.framework,
        point.precision,
    )


class BoundModel:
    """Bounds of the points of one prepared experiment, with the per-(model, b, t, sp) trace
    totals and per-(schedule, p, m) in-flight counts cached (each is shared by many points).

    Args:
        prep: the loaded experiment (:class:`sim.point.experiment.Prepared`).
    """

    def __init__(self, prep) -> None:
        self.prep = prep
        self._totals: dict[tuple, RankTotals] = {}
        self._flight: dict[tuple, tuple[tuple[int, ...], int]] = {}
        self._comm: dict[tuple, tuple[float, ...]] = {}
        self._busiest: dict[tuple, float] = {}
        self._plans: dict[tuple[str, ...], Any] = {}

    @cached_property
    def capacity_bytes(self) -> float:
        """The largest GPU capacity of the hardware, in bytes."""
        return max(g.memory_bytes for g in self.prep.topology.gpus)

    def totals(self, point: PointConfig) -> RankTotals:
        """The tensor-rank trace of ``point`` summed (cached).

        Raises:
            ValueError: the trace cannot be brought to the point's micro-batch size or split
                ``tensor_parallel`` ways (the point is then left to the simulator to report).
        """
        key = _trace_key(point)
        if key not in self._totals:
            self._totals[key] = self._rank_totals(point)
        return self._totals[key]

    def _rank_totals(self, point: PointConfig) -> RankTotals:
        sharded = self.prep.rank_trace(point, point.microbatch_size)
        memory = self._memory(point, sharded.trace.dtype)
        routing = sharded.routing if isinstance(sharded, DecoderShard) else Routing()
        works = trace_work(sharded.trace, point.layout, routing, memory.work)
        trace: Trace = with_framework_stash(sharded.trace, works)
        if point.framework_profile.ties(trace):
            # stored once where both ends share a rank (Framework.tie): left out at every
            # depth, which keeps these totals a lower bound
            trace = share_head_weight(trace, point.tensor_parallel)
        layers = trace.layers
        per_elem = dtype_bytes(trace.dtype)
        groups: dict[tuple[float, float], int] = {}
        for x in layers:
            key = (x.param_bytes / per_elem, x.act_bytes)
            groups[key] = groups.get(key, 0) + 1
        rec = {
            "full": [x.full_recompute_s if layer_kind(x.name) == "block" else 0.0 for x in layers],
            "selective": [
                x.fwd_s * x.attn_core_flops / x.flops
                if x.attn_core_act_bytes and x.attn_core_flops and x.flops
                else 0.0
                for x in layers
            ],
        }
        return RankTotals(
            params=sum(x.param_bytes for x in layers) / per_elem,
            trainable_params=sum(x.trainable for x in layers) / per_elem,
            act_bytes=sum(x.act_bytes for x in layers),
            compute_s=sum(x.fwd_s + x.bwd_s for x in layers),
            max_layer_s=max(x.fwd_s + x.bwd_s for x in layers),
            layers=len(layers),
            state=self._memory(point, trace.dtype).state(
                trace.dtype, self.prep.exp.training.optimizer
            ),
            groups=tuple((pp, a, n) for (pp, a), n in groups.items()),
            layer_recompute_s=tuple((k, tuple(v)) for k, v in rec.items()),
            layer_seconds=tuple(x.fwd_s + x.bwd_s for x in layers),
            layer_comm=tuple(aggregate(c.fwd + c.bwd) for c in sharded.comm),
            layer_recompute_comm=tuple(
                aggregate(c.fwd) if layer_kind(x.name) == "block" else ()
                for x, c in zip(layers, sharded.comm, strict=True)
            ),
        )

    def layer_comm_s(self, point: PointConfig, recompute: bool = False) -> tuple[float, ...]:
        """Per layer of one rank, the seconds per micro-batch of its tensor-parallel
        collectives (``recompute``: those full recompute runs again): each is timed as the
        engine times it (:meth:`~sim.comm.hierarchical.CollectivePlan.time_s`, uncontended)
        on the fastest of the point's tensor-parallel groups, and the rank waits for it before
        its next action (:class:`~sim.engine.tensor_collectives.TensorCollectives`). Zeros for
        ``t = 1``, and where the point's framework overlaps them with their GEMMs
        (:meth:`~sim.framework.base.Framework.tp_overlap`): an overlapped collective may add
        nothing to its action, so the bound counts none."""
        tot = self.totals(point)
        if point.tensor_parallel == 1 or _tp_overlapped(point):
            return (0.0,) * tot.layers
        key = (*_trace_key(point), point.stages, point.dp_width, recompute)
        if key not in self._comm:
            replicas = point.dp_width * point.context_parallel
            plans = self.tp_plans(point.stages, replicas, point.tensor_parallel)
            self._comm[key] = tuple(
                sum(c * min(pl.time_s(nb, kind) for pl in plans) for kind, nb, c in ops)
                for ops in (tot.layer_recompute_comm if recompute else tot.layer_comm)
            )
        return self._comm[key]

    def layer_work_s(self, point: PointConfig) -> tuple[float, ...]:
        """Per layer of one rank, the seconds per micro-batch its stage is busy with it
        (module doc): ``fwd + bwd``, the recompute every layer surely runs
        (:meth:`~sim.memory.base.MemoryPolicy.bound_recompute_mode`), its collectives and,
        with full recompute, the collectives the recompute runs again."""
        tot = self.totals(point)
        mode = point.policy.bound_recompute_mode()
        rec = dict(tot.layer_recompute_s).get(mode or "", (0.0,) * tot.layers)
        comm = self.layer_comm_s(point)
        if mode == "full":
            again = self.layer_comm_s(point, recompute=True)
            comm = tuple(c + a for c, a in zip(comm, again, strict=True))
        return tuple(x + r + c for x, r, c in zip(tot.layer_seconds, rec, comm, strict=True))

    def tp_plans(self, p: int, w: int, t: int) -> list:
        """The collective plans of the distinct tensor-parallel groups of ``(p, w, t)``
        (:func:`sim.parallel.groups.tensor_groups`; cached per GPU set).

        Raises:
            ValueError: the groups do not fit in the servers.
        """
        topo = self.prep.topology
        out = []
        for row in tensor_groups(topo, p, w, t):
            for group in row:
                gpus = tuple(f"gpu{g}" for g in group)
                if gpus not in self._plans:
                    self._plans[gpus] = collective_plan(topo, gpus)
                out.append(self._plans[gpus])
        return out

    def flight(self, point: PointConfig) -> tuple[tuple[int, ...], int]:
        """``(in-flight micro-batches per stage, fewest weight versions)`` (cached)."""
        key = (
            point.schedule,
            point.stages,
            point.microbatches,
            point.virtual_stages,
            point.framework,
        )
        if key not in self._flight:
            sched = point.framework_profile.make_schedule(
                point.schedule_class, point.stages, point.microbatches, point.virtual_stages
            )
            its = self.prep.exp.training.iterations or sched.steady_state_iterations()
            n = tuple(peak_in_flight(sched.shared_program(its)))
            v = min(sched.weight_versions(s) for s in range(sched.num_stages))
            self._flight[key] = (n, v)
        return self._flight[key]

    def memory_bytes(self, point: PointConfig) -> float:
        """A lower bound of the largest GPU peak of ``point``, in bytes (module doc)."""
        tot = self.totals(point)
        n, versions = self.flight(point)
        policy = point.policy
        p, w = point.stages, point.dp_width * point.context_parallel  # replicas (engine's)
        vb = version_bytes_per_param(point.schedule_class.master_copy_versions, tot.state)
        per_param = policy.min_state_bytes_per_param(tot.state, w, versions, vb)
        shard = point.dp_shard * point.context_parallel
        fsdp = point.framework_profile.runs_fsdp(point.layout)
        if fsdp:  # FSDP: every state 1/shard (the experts' fewer ways: a bound)
            per_param = tot.state.total / shard
        opts = self.prep.exp.training.precision_options
        if point.precision and opts is not None and opts.param_gather:
            per_param = max(0.0, per_param - versions * tot.state.weight)  # quantized instead
        all_none = policy.keeps_every_stash()
        all_none = all_none and point.virtual_stages == 1  # (a rank's in-flight count mixes chunks)
        gpus = self.prep.topology.gpus
        working = all(g.reserve.working for g in gpus)
        memory = self._memory(point, self.prep.traces[point.model].dtype)
        if memory.hp_grad_bytes > 0 and point.dp_width > 1:  # BF16_Optimizer: state 1/w
            share = 1.0 - 1.0 / point.dp_width  # (sim.framework.deepspeed_bf16.bf16_plan)
            per_param = max(0.0, per_param - tot.state.optimizer * share)
        bucket = memory.bucket_copy and memory.reduce_bucket_bytes <= 0  # (flat_reduce: one)
        if not fsdp and all_none and w > 1 and working and bucket:
            per_param += tot.state.grad  # DDP buckets (module doc)
        peers = nccl_peers(p - 1, p, w)
        reserve = min(g.reserve.runtime_bytes(peers, gemm_streams=int(working)) for g in gpus)
        acts = min(n) * tot.act_bytes if all_none else 0.0
        if not fsdp and all_none and self.prep.exp.training.optimizer_step:
            share = 1.0  # the shard's where it shards (sim.framework.step_work.shard_optimizer)
            if point.framework_profile.distributed_optimizer.value and point.dp_width >= 2:
                share = 1.0 / point.dp_width
            grads = tot.state.grad * tot.trainable_params
            step = step_copy_bytes(memory.step_transient, grads, share)
            acts = max(acts, step)  # the step moment, after the activations are freed
        uniform = (tot.params * per_param + acts) / p
        if not all_none or len(set(n)) == 1:
            bound = uniform + reserve
        else:
            bound = max(uniform, weighted_bound(tot, per_param, n)) + reserve
        return max(bound, self.floor_bytes(point))

    def floor_bytes(self, point: PointConfig) -> float:
        """Where the partition is known before resolving (``partition: uniform`` or fixed
        ``boundaries``), the largest GPU floor of the rank model
        (:attr:`sim.memory.rank_memory.RankMemory.floor_bytes` of
        :func:`sim.point.memory.point_memory`, the model ``sim memory`` reports); else 0.

        Raises:
            InputError: the point cannot be resolved (the planner then simulates it, and the
                simulator reports why).
        """
        opts = self.prep.exp.options
        if opts.partition != "uniform" and opts.boundaries is None:
            return 0.0
        return max(r.floor_bytes for r in point_memory(self.prep, point).ranks)

    def _memory(self, point: PointConfig, dtype: str) -> FrameworkMemory:
        """The point's framework memory layout (:meth:`~sim.framework.base.Framework.memory`)."""
        gpu = self.prep.topology.gpus[0].model
        fsdp = point.framework_profile.runs_fsdp(point.layout)
        return point.framework_profile.memory(dtype, gpu, self.prep.exp.memory, fsdp=fsdp)

    def iteration_s(self, point: PointConfig) -> float:
        """A lower bound of the simulated iteration time of ``point``, in seconds: ``m`` times
        the least work the busiest rank can have (module doc)."""
        p = point.stages
        key = (
            *_trace_key(point),
            p,
            point.dp_width,
            point.policy.bound_recompute_mode(),
            point.virtual_stages == 1,
        )
        if key not in self._busiest:
            work = self.layer_work_s(point)
            if point.virtual_stages == 1:
                self._busiest[key] = min_bottleneck_s(work, p)
            else:
                self._busiest[key] = max(sum(work) / p, max(work))
        return point.microbatches * self._busiest[key]

    def bounds(self, point: PointConfig) -> PointBounds:
        """Both bounds of ``point``.

        Raises:
            ValueError: see :meth:`totals`.
        """
        samples = point.microbatches * point.microbatch_size * point.dp_width
        return PointBounds(self.memory_bytes(point), samples / self.iteration_s(point))


__all__ = [
    "BoundModel",
    "peak_resident_bytes",
    "PointBounds",
    "RankTotals",
    "min_bottleneck_s",
    "resolved_memory_excess",
    "weighted_bound",
]


def _tp_overlapped(point: PointConfig) -> bool:
    """Whether ``point``'s framework runs its tensor-parallel collectives beside their GEMMs
    (False where it refuses the layout: resolving the point says why)."""
    try:
        return (
            point.framework_profile.tp_overlap(point.tensor_parallel, point.sequence_parallel)
            is not None
        )
    except (KeyError, ValueError):
        return False
