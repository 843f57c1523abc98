"""CPU Adam on the host: the rate a training process gets and the pool it shares.

The offloading systems update their host-resident optimizer state with an OpenMP loop:
DeepSpeedCPUAdam (deepspeedai/DeepSpeed ``csrc/adam/cpu_adam.cpp``, ``Step``: ``#pragma omp
parallel for`` over each tile, at the ZeRO-Offload release 41db1c2f0 and today) and PatrickStar's
copy of it (Tencent/PatrickStar@2384535 ``patrickstar/ops/csrc/adam/cpu_adam.cpp``, called by
``FP16Adam.ds_cpu_adam_update``). Its threads are not bound to the socket of the process's GPU:

* one process alone runs on every core of the server: ZeRO-Offload's single-GPU runs use the
  whole host (Ren et al., ATC'21 §6.2.4, Table 4: CPU-Adam over the DGX-2's two 24-core sockets);
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
PatrickStar's ranks instead step on their own teams (``StagePlan.host_optimizer_thread_share``
= ``1 / pool_sharers``, :mod:`sim.memory.chunked`): each at its threads' share of the server's
rate, beside the others, with no turn to wait for and no whole rate to borrow while the others
copy (an assumption that the rate follows the threads: Table 4's loop moves 40 % of the
DGX-2's peak DRAM bandwidth, below).

**The rate** (:data:`REN_TABLE4`, :func:`rate_from_latencies`, :func:`dram_scaled_rate`). The one
published micro-measurement of the kernel is ZeRO-Offload's Table 4 ("Adam latency (s) for
PyTorch (PT) and CPU-Adam", Ren et al., USENIX ATC'21, arXiv:2101.06840): DeepSpeed's CPU-Adam
over 1 to 10 billion parameters on a DGX-2 host, 2 Intel Xeon Platinum 8168 with 1.5 TB of
DDR4-2666 (Table 2). Read as a rate by least squares through the origin over its five sizes it
is 3.675e9 parameters/s per server, 1.84e9 per socket (the 10B row alone: 3.89e9; the 8B row:
3.32e9). The loop streams 28 bytes per parameter (the fp32 weight, momentum and variance loaded
and stored, the gradient loaded: :data:`sim.memory.zero_offload.ADAM_HOST_BYTES`) and does a
few vector operations on each (AVX-512 at 16 lanes, ``csrc/adam/cpu_adam.cpp`` ``Step``), so it
is taken as bound by DRAM bandwidth: another socket's rate is the DGX-2 socket's scaled by the
sockets' peak DRAM bandwidth (channels x transfers/s x 8 bytes, from the CPU's datasheet),
:func:`dram_scaled_rate`. PatrickStar's build of the same loop on AMD runs without SIMD flags
(``patrickstar/ops/op_builder/builder.py``@2384535 ``simd_width``: only ``genuineintel`` gets
``-D__AVX256__``/``-D__AVX512__``); the scalar loop is taken as bound by DRAM bandwidth too
(an assumption: no published measurement of it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sim.hardware.topology import Topology
from sim.memory.context import StageContext

REN_TABLE4 = ((1e9, 0.22), (2e9, 0.51), (4e9, 1.03), (8e9, 2.41), (10e9, 2.57))
"""``(parameters, seconds)`` of DeepSpeed's CPU-Adam step on a DGX-2 host (2x Xeon Platinum 8168,
6 channels of DDR4-2666 each): Ren et al., ATC'21, Table 4, column CPU-Adam (module doc)."""

DGX2_SOCKET_DRAM_BPS = 6 * 2666e6 * 8
"""Peak DRAM bandwidth of one Xeon Platinum 8168: 6 channels of DDR4-2666 (Intel ARK), 128 GB/s."""


def rate_from_latencies(table: Iterable[tuple[float, float]]) -> float:
    """Parameters per second of a step whose ``(parameters, seconds)`` measurements are
    ``table``: the least-squares fit of ``seconds = parameters / rate`` through the origin,
    ``sum(p^2) / sum(p * t)``.

    Raises:
        ValueError: an empty table or one with no positive time.

    >>> round(rate_from_latencies(REN_TABLE4) / 1e9, 3)
    3.675
    """
    rows = list(table)
    pt = sum(p * t for p, t in rows)
    if not rows or pt <= 0:
        raise ValueError("a CPU-Adam latency table needs at least one positive (parameters, s) row")
    return sum(p * p for p, _ in rows) / pt


def dram_scaled_rate(socket_dram_Bps: float, sockets: int = 2) -> float:
    """CPU-Adam parameters per second of one socket with ``socket_dram_Bps`` of peak DRAM
    bandwidth: the DGX-2's rate (:data:`REN_TABLE4`, over its ``sockets`` sockets) times the
    ratio of the sockets' peak bandwidths (module doc).

    >>> round(dram_scaled_rate(8 * 3200e6 * 8) / 1e9, 3)  # EPYC 7742: 8 x DDR4-3200
    2.941
    """
    return rate_from_latencies(REN_TABLE4) / sockets * socket_dram_Bps / DGX2_SOCKET_DRAM_BPS


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
