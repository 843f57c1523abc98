"""nccl-tests on the model: the times the engine predicts for ``sendrecv_perf`` and
``all_reduce_perf`` over a set of GPUs, for comparison with measured bus bandwidths.

``sendrecv_perf`` on ``n`` GPUs (nccl-tests ``src/sendrecv.cu``): every rank sends ``B`` bytes
to the next rank and receives from the previous one, all at once; ``busbw = algbw = B / t``.
``all_reduce_perf``: one all-reduce of ``B`` bytes, split over the communicator's rings
(NCCL's channels, :func:`~sim.comm.rings.ring_set`); ``busbw = B / t * 2(n-1)/n``
(nccl-tests ``doc/PERFORMANCE.md``). Both run on the engine's own :class:`~sim.engine.links.
Links` and rings (:mod:`sim.engine.collectives`), so they contend, route and move at NCCL's rate
of each link (:data:`~sim.engine.links.NCCL_KINDS`) as a training run does.

On GPUs that run NCCL (a compute capability in the hardware description) both are NCCL's own
cost model (:mod:`sim.comm.nccl`: the algorithm and protocol it chooses by size, their
latency and bandwidth; the rings' bus bandwidth). Not modelled: the host's launch of each
kernel (with ``-g 8`` one thread launches 8), and the number of channels NCCL gives each p2p
peer (``src/enqueue.cc`` halves it as the communicator grows; its effect on bandwidth depends
on a per-channel rate no public source gives).
"""

from __future__ import annotations

import simpy

from sim.comm.hierarchical import collective_plan
from sim.engine.collectives import bus_bandwidth_Bps
from sim.engine.links import Links
from sim.events import EventKind, Stream
from sim.hardware.topology import Topology


def sendrecv_time_s(topology: Topology, gpus: tuple[str, ...], nbytes: float) -> float:
    """Seconds until every ``gpus[i] -> gpus[i+1 mod n]`` send of ``nbytes`` has ended, all
    started at once (each a p2p pair: :meth:`~sim.hardware.topology.Topology.route`)."""
    env = simpy.Environment()
    links = Links(env, topology, [])
    n = len(gpus)
    for i, src in enumerate(gpus):
        dst = gpus[(i + 1) % n]
        if dst != src:
            env.process(
                links.transfer(src, dst, nbytes, EventKind.TRANSFER, f"{src}->{dst}", Stream.SEND)
            )
    env.run()
    return env.now


def allreduce_time_s(topology: Topology, gpus: tuple[str, ...], nbytes: float) -> float:
    """Seconds of one all-reduce of ``nbytes`` over ``gpus`` as the engine times it
    (:func:`~sim.comm.hierarchical.collective_plan`): split over their rings
    (:func:`~sim.comm.rings.ring_set`: NVLink rings with reserved bandwidth, else one ring
    routed through the communicator only), the slowest ring's time; hierarchical across
    servers."""
    return collective_plan(topology, gpus).time_s(nbytes, EventKind.ALLREDUCE)


def sendrecv_busbw_Bps(topology: Topology, gpus: tuple[str, ...], nbytes: float) -> float:
    """Predicted ``sendrecv_perf`` bus bandwidth (= algorithm bandwidth), bytes/s."""
    return bus_bandwidth_Bps(
        EventKind.TRANSFER, len(gpus), nbytes, sendrecv_time_s(topology, gpus, nbytes)
    )


def allreduce_busbw_Bps(topology: Topology, gpus: tuple[str, ...], nbytes: float) -> float:
    """Predicted ``all_reduce_perf`` bus bandwidth, bytes/s."""
    return bus_bandwidth_Bps(
        EventKind.ALLREDUCE, len(gpus), nbytes, allreduce_time_s(topology, gpus, nbytes)
    )
