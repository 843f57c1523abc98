"""The parts one run is composed of, and who shares what with whom.

:func:`compose` builds, for one :class:`~sim.engine.inputs.SimInput`, the simulation
environment, the memory ledger, the event log and every part that runs processes in it: the
links (:mod:`sim.engine.links`), each GPU's compute stream (:mod:`sim.engine.streams`) slowed
by the SMs of overlapped collectives (:mod:`sim.engine.sm_share`), the memory policy's copies
(:mod:`sim.engine.traffic`), the data-parallel, tensor-parallel and group collectives, the host
threads (:mod:`sim.engine.host`), the framework's exchanges, FSDP's units, the optimizer step,
the stage sends and the partitioned states. The action processes (:mod:`sim.engine.actions`),
the overlapped pairs (:mod:`sim.engine.pairs`) and the run itself (:mod:`sim.engine.pipeline`)
use them.
"""

from __future__ import annotations

from dataclasses import dataclass

import simpy

from sim.engine.collectives import Collectives
from sim.engine.exchanges import Exchanges
from sim.engine.fsdp import FsdpRuns
from sim.engine.groups import GroupCollectives
from sim.engine.host import HostThreads
from sim.engine.inputs import SimInput
from sim.engine.links import Links
from sim.engine.partitioned import PartitionedStates
from sim.engine.sends import StageSends
from sim.engine.sm_share import SmShare
from sim.engine.step import RankStep
from sim.engine.streams import ComputeStream
from sim.engine.tensor_collectives import TensorCollectives
from sim.engine.traffic import MemoryTraffic
from sim.events import EventLog
from sim.ledger import Ledger

HOST_POOL = "host"
"""Ledger name of the server's host DRAM: one pool shared by every socket's ranks."""


@dataclass(frozen=True)
class RunParts:
    """The composed parts of one run (module doc); each attribute is the part of that name."""

    env: simpy.Environment
    ledger: Ledger
    log: EventLog
    links: Links
    compute: ComputeStream
    traffic: MemoryTraffic
    collectives: Collectives
    tensor: TensorCollectives
    groups: GroupCollectives
    hosts: HostThreads
    exchanges: Exchanges
    fsdp: FsdpRuns
    stepper: RankStep
    sends: StageSends
    partitioned: PartitionedStates


def p2p_ranks(inp: SimInput) -> int:
    """Ranks of the NCCL communicator the stage sends run on: the pipeline's ranks when the
    exchanges are batched (:attr:`~sim.engine.inputs.PipelineRuntime.batched_p2p`) and each
    of replica 0's ranks is on its own server (what :func:`sim.comm.p2p_net.comm_channels`
    derives); else 2 (lone sends; assumption: a group with several GPUs on one server keeps
    the two-rank figure, its channels not derived)."""
    ranks = len(inp.program)
    if not inp.runtime.batched_p2p or ranks < 2:
        return 2
    servers = {inp.topology.server_of(inp.gpu_index(0, s)) for s in range(len(inp.costs))}
    return ranks if len(servers) == ranks else 2


def compose(inp: SimInput) -> RunParts:
    """A new environment and the parts of a run of ``inp`` in it (module doc); the ledger
    and the log know every GPU's and host's capacity (bytes), the host DRAMs as one pool."""
    env = simpy.Environment()
    topo = inp.topology
    caps = {g.name: g.memory_bytes for g in topo.gpus}
    caps.update({h.name: h.dram_bytes for h in topo.hosts})
    ledger = Ledger(caps, pools={HOST_POOL: tuple(h.name for h in topo.hosts)})
    log = EventLog(capacity_bytes=caps)
    links = Links(env, topo, log.events, p2p_ranks(inp))
    sms = {g.name: g.compute.sm_count if g.compute is not None else None for g in topo.gpus}
    share = SmShare(env, sms)  # SMs the overlapped data-parallel collectives take
    compute = ComputeStream(env, log.events, share)
    traffic = MemoryTraffic(env, links, ledger, compute, inp.microbatches)
    collectives = Collectives(env, inp, links, share)
    tensor = TensorCollectives(env, inp, links)
    groups = GroupCollectives(env, inp, links)
    hosts = HostThreads(env, inp.host_overhead, inp.host_syncs)
    exchanges = Exchanges(env, inp, compute, hosts, tensor)
    parts = (exchanges, traffic, collectives, compute, ledger)
    fsdp = FsdpRuns(env, inp, links, ledger, compute)
    stepper = RankStep(env, inp, (*parts, hosts), fsdp=fsdp)
    sends = StageSends(env, inp, links, ledger, exchanges)
    partitioned = PartitionedStates(env, inp, (ledger, traffic, collectives, compute))
    return RunParts(
        env, ledger, log, links, compute, traffic, collectives, tensor, groups, hosts,
        exchanges, fsdp, stepper, sends, partitioned,
    )  # fmt: skip
