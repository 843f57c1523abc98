"""CPU Adam on the host: the rate a training process gets and the pool it shares.

The offloading systems update their host-resident optimizer state with an OpenMP loop:
DeepSpeedCPUAdam (deepspeedai/DeepSpeed ``csrc/adam/cpu_adam.cpp``, ``Step``: ``#pragma omp
parallel for`` over each tile, at the ZeRO-Offload release 41db1c2f0 and today) and PatrickStar's
copy of it (Tencent/PatrickStar@2384535 ``patrickstar/ops/csrc/adam/cpu_adam.cpp``, called by
``FP16Adam.ds_cpu_adam_update``). Its threads are not bound to the socket of the process's GPU:

* one process alone runs on every core of the server: ZeRO-Offload's single-GPU runs use the
  whole host (Ren et al., ATC'21 §6, Table 3: CPU-Adam over the DGX-2's two 24-core sockets);
* several processes split the cores: PatrickStar's launcher gives each ``cores / GPU_NUM``
  OpenMP threads (``examples/run_transformers.sh``: ``TNUM = wc / GPU_NUM``,
  ``OMP_NUM_THREADS=${TNUM}``); DeepSpeed leaves OpenMP's default (every core) to each process,
  so their threads share the cores by time slicing.

Either way the server's processes that step at the same time share the update rate of all its
sockets. pipesim gives every process of a server one CPU-Adam pool (:func:`adam_pool`) whose
rate is the sum of its sockets' ``adam_params_per_s`` (:func:`server_adam_rate`); steps that
meet in the pool run one after another at the full rate, so they all end when an even split
of the rate would end them (the engine's ``adam@<pool>`` resource, :mod:`sim.engine.traffic`).
With one socket per server, or ranks spread evenly over the sockets, the ends are those of
per-socket pools; a process alone on a two-socket server steps twice as fast as on one socket.
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.hardware.topology import Topology
from sim.memory.context import StageContext


def server_hosts(topology: Topology, gpu_index: int) -> tuple[str, ...]:
    """Host sockets of the server of GPU ``gpu_index`` (the hosts of its GPUs), sorted."""
    members = topology.servers[topology.server_of(gpu_index)]
    return tuple(sorted({topology.gpu(g).host for g in members}))


def server_adam_rate(topology: Topology, gpu_index: int) -> float:
    """CPU-Adam rate (parameters per second) of the server of GPU ``gpu_index``: the sum of
    its sockets' ``adam_params_per_s`` (module doc)."""
    return sum(topology.host(h).adam_params_per_s for h in server_hosts(topology, gpu_index))


def adam_rate(ctx: StageContext) -> float:
    """CPU-Adam rate of the stage replica's server, parameters per second (module doc)."""
    return server_adam_rate(ctx.topology, ctx.gpu_index)


def adam_pool(ctx: StageContext) -> str:
    """Name of the CPU-Adam pool of the stage replica's server: ``server<i>``."""
    return f"server{ctx.topology.server_of(ctx.gpu_index)}"


def pool_sharers(contexts: Sequence[StageContext], ctx: StageContext) -> int:
    """Stage replicas of ``contexts`` on ``ctx``'s server: their host steps share its pool."""
    pool = adam_pool(ctx)
    return sum(1 for c in contexts if adam_pool(c) == pool)
