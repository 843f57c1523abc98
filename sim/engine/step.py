"""The optimizer step of one rank, over every stage chunk it holds.

A rank's program has one STEP action per stage chunk it holds (``v`` of them with interleaved
or V-shaped schedules, together at the end of the iteration: :func:`step_group`). The rank
runs them as one step, in the order the frameworks do:

1. its last sends (blocking exchanges) and the memory policy's write-backs;
2. the data-parallel gradient reduction of each chunk, in program order (the end of its
   bucketed all-reduce, or its all-reduce or reduce-scatter, and its routed experts' over
   their group), then, where the framework runs it, one all-reduce over the rank's tensor
   group of the gradients its chunks keep whole but compute from their own tokens
   (``PipelineRuntime.tp_grad_elem_bytes``, :mod:`sim.parallel.finalize_grads`), and the tied
   all-reduce (``PipelineRuntime.tied_grad_bytes``) on the ranks of the first and the last
   chunk, before or after them (``tied_after_dp``); then, for a rank whose chunks hold MoE
   routers with an expert bias, their counts' all-reduce over every GPU of its stage and the
   bias update kernels (:mod:`sim.parallel.router_bias`, :meth:`RankStep.router_bias`);
3. the step barrier ``before_update``, once for the rank;
4. the update of each chunk (step copies, host step, optimizer kernel, the all-gather of
   sharded parameters, or, with ``PipelineRuntime.param_gather``, its deferral to the next
   forward: :mod:`sim.engine.param_gather`);
5. the barrier ``after_update``, once; the host's step sync.

Sources: Megatron-LM ``megatron/core/distributed/finalize_model_grads.py::
finalize_model_grads`` (``finish_grad_sync`` of every model chunk, then
``_allreduce_non_tensor_model_parallel_grads`` over the tensor group, then
``_allreduce_embedding_grads`` over the embedding group, the first and the last pipeline rank
with ``ignore_virtual=True``), called once per rank with the list of its chunks at the end of
``megatron/core/pipeline_parallel/schedules.py::forward_backward_pipelining_with_interleaving``;
then one ``optimizer.step()`` over all chunks (``megatron/training/training.py::train_step``:
the found-inf and grad-norm all-reduces over the model-parallel group, then the update). torch
pipelining likewise: ``schedule.step()`` runs every chunk's backward, then one
``optimizer.step()``. A barrier that every chunk joined on its own would wait on the rank's own
next chunk, which runs only after it: a deadlock.
"""

from __future__ import annotations

import simpy

from sim.comm.hierarchical import collective_plan
from sim.engine.collectives import Collectives
from sim.engine.exchanges import Exchanges
from sim.engine.fsdp import FsdpRuns
from sim.engine.host import HostThreads
from sim.engine.inputs import SimInput
from sim.engine.param_gather import ParamGathers
from sim.engine.replicas import StageReplica
from sim.engine.step_host import shard_tensors, step_host_s
from sim.engine.streams import ComputeStream
from sim.engine.tensor_collectives import TensorCollectives
from sim.engine.traffic import MemoryTraffic
from sim.events import Event, EventKind, MemCategory, Stream
from sim.ledger import Ledger
from sim.memory.step_moment import step_transient_bytes
from sim.parallel.router_bias import ROUTER_BIAS, update_bytes, update_s
from sim.schedules.action import STEP, Action, flatten

FINALIZE_TP = "non-tensor-parallel-grads"
"""Label of the tensor-group all-reduce after the data-parallel reduction (Megatron's timer
``non-tensor-parallel-grads-all-reduce``); its event is ``tp allreduce {FINALIZE_TP} <stage>STEP<k>``
on stream ``tp`` (:meth:`RankStep.run`)."""


class RankStep:
    """The optimizer steps of one run (module doc).

    Args:
        env: the simulation environment.
        inp: the configuration (width, runtime).
        parts: the engine's ``(exchanges, traffic, collectives, compute, ledger, hosts)``.
        fsdp: the engine's FSDP collectives (:mod:`sim.engine.fsdp`), for the stages that
            shard by FSDP.
    """

    def __init__(
        self,
        env: simpy.Environment,
        inp: SimInput,
        parts: tuple[Exchanges, MemoryTraffic, Collectives, ComputeStream, Ledger, HostThreads],
        fsdp: FsdpRuns | None = None,
    ):
        self.env = env
        self.inp = inp
        self.fsdp = fsdp
        self.exchanges, self.traffic, self.collectives, self.compute, self.ledger, self.hosts = (
            parts
        )
        self.tensor: TensorCollectives = self.exchanges.tensor  # the step's tensor-group all-reduce
        self._tiny_s: float | None = None
        self.gathers = ParamGathers(env, inp, self.collectives, self.compute)

    def run(self, reps: list[StageReplica], k: int):
        """Process: step ``k`` of the rank whose chunks are ``reps`` (its stage replicas, in
        the order of their STEP actions), steps 1 to 5 of the module doc."""
        rt, head = self.inp.runtime, reps[0]
        tags = [rep.tags(None, k) for rep in reps]
        if self.exchanges.active:
            yield from self.exchanges.drain(head, f"{head.stage}STEP{k}", tags[0])
        for rep, t in zip(reps, tags, strict=True):
            yield from self.traffic.wait_writebacks(rep, t)
        if not rt.tied_after_dp:
            for rep, t in zip(reps, tags, strict=True):
                yield from self.collectives.join_tied(rep, k, t)
        for rep, t in zip(reps, tags, strict=True):
            yield from self._reduce(rep, k, t)
        yield from self._tensor_grads(reps, k, tags[0])
        if rt.tied_after_dp:
            for rep, t in zip(reps, tags, strict=True):
                yield from self.collectives.join_tied(rep, k, t)
        yield from self.router_bias(reps, k, tags[0])
        yield from self.exchanges.barrier(head, k, "before_update", tags[0])
        for rep, t in zip(reps, tags, strict=True):
            yield from self._update(rep, k, t)
        yield from self._host_step(reps, k, tags[0])
        yield from self.exchanges.barrier(head, k, "after_update", tags[0])
        self.hosts.sync(head.gpu, "step")

    def _reduce(self, rep: StageReplica, k: int, tags: dict):
        """Process: the data-parallel gradient reduction of ``rep``'s chunk at step ``k``,
        holding the plan's flat bucket (``reduce_bucket_bytes``, DeepSpeed's: at any width,
        :mod:`sim.memory.flat_reduce`) while it runs."""
        if rep.plan.fsdp is not None and self.fsdp is not None:
            yield from self.fsdp.at_step(rep, k, tags)
            return
        held = rep.plan.reduce_bucket_bytes
        self.ledger.change(self.env.now, rep.gpu, held, MemCategory.WORKING, f"reduce {k}")
        yield from self._reduce_grads(rep, k, tags)
        self.ledger.change(self.env.now, rep.gpu, -held, MemCategory.WORKING, f"reduce {k} done")

    def _reduce_grads(self, rep: StageReplica, k: int, tags: dict):
        """Process: :meth:`_reduce`'s collectives (overlapped buckets, serial buckets, the
        expert group's)."""
        overlapped = self.collectives.finish_overlapped(rep, k)
        if overlapped is not None:
            yield overlapped
        elif self.inp.dp_width > 1 and rep.plan.scatter_bytes <= 0:
            kind = EventKind.REDUCE_SCATTER if rep.plan.dp_sharded else EventKind.ALLREDUCE
            for i, size in enumerate(self.collectives.serial_buckets(rep)):
                key = k if i == 0 else f"{k}#{i}"  # buckets one after another
                yield from self.collectives.join_keyed(rep, key, size, kind, tags)
            if self.collectives.expert_nbytes(rep) > 0:
                yield from self.collectives.join_expert(rep, k, tags, kind)

    def tensor_grad_bytes(self, reps: list[StageReplica]) -> float:
        """Bytes of the rank's tensor-group all-reduce after the data-parallel reduction: its
        chunks' :attr:`~sim.engine.stage_cost.StageCost.tp_summed_params` flattened into one
        buffer of ``tp_grad_elem_bytes`` each (``_flatten_dense_tensors`` over the model
        chunks, Megatron-LM@d98e8a64 ``finalize_model_grads.py`` l.435-474); a chunk under
        FSDP contributes its shard (``grad._local_tensor``, l.460-461: ``1/shard`` of them,
        assumption: evenly sharded); 0 with one tensor rank."""
        elem = self.inp.runtime.tp_grad_elem_bytes
        if elem <= 0 or self.inp.tensor_parallel < 2:
            return 0.0
        return sum(
            rep.cost.tp_summed_params * elem / (rep.plan.fsdp.shard if rep.plan.fsdp else 1)
            for rep in reps
        )

    def _tensor_grads(self, reps: list[StageReplica], k: int, tags: dict):
        """Process: the tensor-group all-reduce of :meth:`tensor_grad_bytes` of the rank whose
        chunks are ``reps`` at step ``k`` (none when 0), logged as
        ``tp allreduce`` :data:`FINALIZE_TP` ``<stage>STEP<k>``."""
        nbytes = self.tensor_grad_bytes(reps)
        if nbytes > 0:
            label = f"{FINALIZE_TP} {reps[0].stage}STEP{k}"
            yield from self.tensor.join(reps[0], label, ((EventKind.ALLREDUCE, nbytes, 1),), tags)

    def router_bias(self, reps: list[StageReplica], k: int, tags: dict):
        """Process: the router expert-bias update of the rank whose chunks are ``reps`` at step
        ``k`` (:mod:`sim.parallel.router_bias`; none without such routers): the all-reduce of
        their stacked fp32 counts over every GPU of the stage, logged as ``allreduce``
        :data:`~sim.parallel.router_bias.ROUTER_BIAS` ``<stage>STEP<k>``, then the update
        kernels on the compute stream (``optimizer`` event ``... update``)."""
        experts = tuple(e for rep in reps for e in rep.cost.router_bias_experts)
        if not experts:
            return
        head, label = reps[0], f"{ROUTER_BIAS} {reps[0].stage}STEP{k}"
        name = f"{EventKind.ALLREDUCE} {label}"
        yield from self.collectives.join_stage(head, k, update_bytes(experts), name, tags)
        gpu = self.inp.topology.gpu(self.inp.gpu_index(head.replica, head.stage, head.tp_rank))
        seconds = update_s(experts, gpu.compute) if gpu.compute is not None else 0.0
        yield from self.compute.run(
            head.gpu, EventKind.OPTIMIZER, f"{label} update", seconds, **tags
        )

    def _update(self, rep: StageReplica, k: int, tags: dict):
        """Process: the update of ``rep``'s chunk at step ``k``: step copies, host step (its
        copies back tile by tile during it with ``host_step_tiles``), the optimizer kernel (holding ``step_transient`` bytes per gradient byte,
        :func:`~sim.memory.step_moment.step_transient_bytes`, as ``sim memory`` counts it), then the
        all-gather of its parameters when its optimizer state is sharded (``dp_sharded``, or
        ``step_gather`` after an all-reduce)."""
        plan = rep.plan
        if plan.host_optimizer_s > 0 and plan.host_step_chunks > 0:
            yield from self._chunked_update(rep, k, tags)
            return
        for t in plan.step_transfers_before:
            yield from self.traffic.copy(t, tags)
        if plan.host_optimizer_s > 0 and plan.host_step_tiles > 0:
            yield from self.traffic.tiled_step(rep, tags)  # copies overlap the host step
        else:
            if plan.host_optimizer_s > 0:
                yield from self.traffic.host_step(rep, tags)
            for t in plan.step_transfers_after:
                yield from self.traffic.copy(t, tags)
        held = step_transient_bytes(self.inp.runtime.step_transient, plan)
        self.ledger.change(self.env.now, rep.gpu, held, MemCategory.WORKING, f"step {k}")
        if plan.optimizer_s > 0 and plan.host_optimizer_s <= 0 and not plan.dp_sharded:
            yield from self._overflow_check(rep, k, tags)
        yield from self.compute.run(
            rep.gpu, EventKind.OPTIMIZER, f"{rep.stage}STEP{k}", plan.optimizer_s, **tags
        )
        self.ledger.change(self.env.now, rep.gpu, -held, MemCategory.WORKING, f"step {k} done")
        gathers = plan.dp_sharded or plan.step_gather  # a partitioned update
        if self.inp.dp_width > 1 and gathers and plan.gather_bytes <= 0 and not plan.fsdp:
            if self.gathers.active:  # under the next forward (sim.engine.param_gather)
                self.gathers.defer([rep], k)
                return
            share = self.collectives.gather_share(rep)
            yield from self.collectives.join(rep, k, tags, EventKind.ALL_GATHER, share)
            if self.collectives.expert_nbytes(rep) > 0:
                yield from self.collectives.join_expert(rep, k, tags, EventKind.ALL_GATHER, share)

    def _chunked_update(self, rep: StageReplica, k: int, tags: dict):
        """Process: the update of ``rep``'s chunks at step ``k`` as PatrickStar runs it
        (``host_step_chunks``): the GPU step first (hybrid Adam visits its GPU margin chunks
        first, ``FP32ChunkReadBuffer.access_from_cache``: ``cached_chunk_num <
        margin_chunk_num_for_gpu_adam``), then the host chunks one by one
        (:meth:`~sim.engine.traffic.MemoryTraffic.chunked_step`), whose first blocking copy
        waits for the GPU step. Its optimizer state is sharded and its parameters are
        broadcast at use, so nothing is gathered after."""
        plan = rep.plan
        yield from self.compute.run(
            rep.gpu, EventKind.OPTIMIZER, f"{rep.stage}STEP{k}", plan.optimizer_s, **tags
        )
        yield from self.traffic.chunked_step(rep, tags)

    def _host_step(self, reps: list[StageReplica], k: int, tags: dict):
        """Process: the framework's host work once per iteration around the step
        (``runtime.step_host``, :mod:`sim.engine.step_host`) over the parameter tensors of every
        chunk of the rank: the host first waits for everything issued, then the device idles
        for :func:`~sim.engine.step_host.step_host_s`. Logged as ``host_wait``; the host is
        synced after."""
        work, head = self.inp.runtime.step_host, reps[0]
        if work.empty:
            return
        tensors = [sum(rep.cost.param_tensors) for rep in reps]
        optimizer = sum(
            shard_tensors(n, self.inp.dp_width) if rep.plan.dp_sharded else n
            for n, rep in zip(tensors, reps, strict=True)
        )
        sharded = any(rep.plan.dp_sharded for rep in reps)
        wait_s = step_host_s(
            self.hosts.overhead_of(head.gpu), work, sum(tensors), optimizer, sharded,
            self._tiny_all_reduce_s(),
        )  # fmt: skip
        if wait_s > 0:
            yield from self._host_only(head.gpu, wait_s, f"host step {k}", tags)

    def _tiny_all_reduce_s(self) -> float:
        """Seconds of an all-reduce of 8 bytes over every GPU of the job (a scalar the
        framework reduces and reads at its step)."""
        if self._tiny_s is None:
            inp = self.inp
            gpus = sorted({
                inp.gpu_index(r, s, k) for r in range(inp.dp_width) for s in range(inp.stages)
                for k in range(inp.tensor_parallel)
            })  # fmt: skip
            plan = collective_plan(inp.topology, tuple(f"gpu{g}" for g in gpus))
            self._tiny_s = plan.time_s(8.0, EventKind.ALLREDUCE)
        return self._tiny_s

    def _overflow_check(self, rep: StageReplica, k: int, tags: dict):
        """Process: a serial overflow check (``runtime.overflow_check_ops`` ops and a blocking
        read per parameter tensor of ``rep``'s chunk): the host first waits for everything
        issued, then the device idles while the host walks the tensors
        (:meth:`~sim.hardware.host_ops.HostOverhead.serial_reads_s`; the check's memory traffic is
        in the optimizer kernel's time). Logged as ``host_wait``; the host is synced after.
        DeepSpeed runs it in ``FP16_Optimizer`` only: not with ZeRO (sharded or offloaded
        steps, whose optimizers check one flat partition)."""
        ops = self.inp.runtime.overflow_check_ops
        vectors, matrices = rep.cost.param_tensors
        if ops <= 0 or vectors + matrices <= 0:
            return
        check_s = self.hosts.overhead_of(rep.gpu).serial_reads_s(vectors, matrices, ops)
        if check_s > 0:
            name = f"host overflow check {rep.stage}STEP{k}"
            yield from self._host_only(rep.gpu, check_s, name, tags)

    def _host_only(self, gpu: str, busy_s: float, name: str, tags: dict):
        """Process: ``gpu``'s host first waits for everything issued, then works ``busy_s``
        seconds while the device idles; logged as ``host_wait`` event ``name``; the host is
        synced after."""
        self.hosts.wait(gpu)
        start = self.env.now
        yield self.env.timeout(max(0.0, self.hosts.clock(gpu).t - start) + busy_s)
        self.compute.events.append(
            Event(EventKind.HOST_WAIT, gpu, Stream.COMPUTE, name, start, self.env.now, **tags)
        )
        self.hosts.wait(gpu)


def step_group(order: tuple[Action, ...], i: int) -> tuple[Action, ...]:
    """The STEP actions of the rank step at position ``i`` of a rank's ``order``: the run of
    consecutive STEPs with ``order[i]``'s step number, one per stage chunk, when ``i`` starts
    it; empty when ``i`` continues one (an earlier position ran it).

    Example:
        >>> from sim.schedules.action import Action
        >>> order = tuple(map(Action.from_str, ["0B3", "0STEP0", "2STEP0", "0F4"]))
        >>> [str(a) for a in step_group(order, 1)], step_group(order, 2)
        (['0STEP0', '2STEP0'], ())
    """
    k = order[i].microbatch
    prev = order[i - 1] if i else None
    if prev is not None and prev.op == STEP and prev.microbatch == k:
        return ()
    j = i
    while j < len(order) and order[j].op == STEP and order[j].microbatch == k:
        j += 1
    return order[i:j]


def step_ends(order: tuple[Action, ...]) -> dict[Action, int]:
    """``{backward: step number}`` for each backward (B or W) that is the last of its stage
    before that stage's STEP: the gradients of that stage are complete when it ends. With one
    stage per rank that is the backward right before the STEP."""
    out: dict[Action, int] = {}
    last: dict[int, Action] = {}
    for a in flatten(order):
        if a.op in ("B", "W"):
            last[a.stage] = a
        elif a.op == STEP and a.stage in last:
            out[last.pop(a.stage)] = a.microbatch
    return out
