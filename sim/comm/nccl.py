"""NCCL's own cost model of a collective: latency plus bandwidth per algorithm and protocol,
and the choice of the fastest for each message size.

Source: NCCL 2.20.3 (``makefiles/version.mk``), ``src/graph/tuning.cc`` at commit
``b6475625fbcaa2c3c0e50eed2fa1255d7514d4a2``: ``ncclTopoTuneModel`` fills, for every collective,
algorithm ``a`` and protocol ``p``, a latency ``lat[a][p]`` (us) and an algorithm bandwidth
``bw[a][p]`` (GB/s); ``ncclTopoGetAlgoTime`` predicts ``time = lat + nBytes / (1000 * bw)`` (us),
and ``getAlgoInfo`` (``src/enqueue.cc``) runs the algorithm and protocol of least predicted
time. Here, with ``n`` ranks on ``N`` servers and the ring's bus bandwidth ``B`` (what NCCL
calls ``nChannels * bwIntra``: :func:`~sim.comm.rings.ring_set`'s summed NCCL rates, or the
bus bandwidth of the hierarchical plan across servers):

* **bandwidth** (bus, GB/s): ring Simple ``B``; ring LL ``min(llMaxBw, B/4)`` for all-reduce or
  several servers, ``B/3`` otherwise; ring LL128 ``min(0.92 B, nCh * perChMaxRingLL128)``
  (``0.7`` instead of ``0.92`` with one GPU per server); tree (all-reduce only)
  ``min(0.92 B, nCh * perChMaxTree)``, then LL ``min(/3.8, llMaxBw)``, LL128
  ``min(x 7/9 (one server) or 120/128, nCh * perChMaxTreeLL128)``; NVLS (NVLink SHARP, only
  where the hardware says so) ``B``. Algorithm bandwidth = bus bandwidth ``x n / nsteps`` (ring;
  ``nsteps`` = ``2(n-1)`` all-reduce, ``n-1`` all-gather / reduce-scatter), ``x 1/2`` (tree),
  ``x 5/6`` (NVLS). A tree's bandwidth is further multiplied by ``treeCorrectionFactor`` by
  message size (64 B .. 256 MiB, powers of two).
* **latency** (us): ``baseLat[a][p]`` plus, for a ring, ``(nsteps - nInterSteps) * intraLat +
  nInterSteps * interLat`` (``nInterSteps`` = ``2N`` all-reduce, ``N-1`` all-gather /
  reduce-scatter, 0 on one server; ``intraLat`` at least the network post overhead across
  servers); for a tree ``2 ((n/N - 1) intraLat + log2(N) interLat)``; NVLS ``intraLat`` (+
  ``interLat`` across servers). ``intraLat = hwLat[NVLink or PCI][a][p]`` by the intra-server
  path, ``interLat = hwLat[NET][a][p]``. A ring Simple all-reduce across servers whose
  ``nBytes / (nCh n) >= 64`` has its latency x1.4 (x1.9 before Ampere): "plateau effect".
* **enabled**: LL128 only on NVLink paths of sm70 / sm80 / sm90 GPUs; NVLS only on one server.

``nCh`` (the ring graph's channel count, which caps LL128 and the tree per channel) follows
``src/graph/search.cc`` (``ncclTopoCompute``, ``ncclTopoDupChannels``): the fastest speed of
``speedArrayIntra`` (``sm90SpeedArrayIntra`` on Hopper) a ring can carry, as many channels of it
as the bus bandwidth holds (at most 16), doubled (speed halved) when the speed is 25 GB/s or
more (on Hopper: 50 GB/s or more, or 4 channels or fewer). This is :func:`channels`; the caps
it feeds rarely bind inside a server (they do on rings of PCIe or on one slow NVLink).

Not modelled (NCCL's model omits them too): how many channels NCCL launches for a small
message (``src/enqueue.cc`` lowers it below ``nc * nThreads * threadThreshold`` bytes), the
host's enqueue and launch of the kernel (a host cost, not the device time modelled here), and
CollNet. Everything above
is NCCL's own number; nothing is fitted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.events import EventKind

NCCL_SOURCE = (
    "NCCL 2.20.3 src/graph/tuning.cc (commit b6475625fbcaa2c3c0e50eed2fa1255d7514d4a2): "
    "ncclTopoTuneModel / ncclTopoGetAlgoTime"
)

RING, TREE, NVLS, NVLS_TREE = "ring", "tree", "nvls", "nvls_tree"
LL, LL128, SIMPLE = "LL", "LL128", "Simple"
PROTOCOLS = (LL, LL128, SIMPLE)
NVLINK, PCI, NET = "nvlink", "pci", "net"

BASE_LAT_US: dict[tuple[str, str], float] = {
    (TREE, LL): 6.8,
    (TREE, LL128): 14.0,
    (TREE, SIMPLE): 0.0,
    (RING, LL): 6.6,
    (RING, LL128): 14.0,
    (RING, SIMPLE): 8.4,
    (NVLS, SIMPLE): 0.0,
    (NVLS_TREE, SIMPLE): 0.0,
}
"""``baseLat`` (us), tuning.cc: Tree ``{6.8, 14.0, 0}``, Ring ``{6.6, 14.0, 8.4}``, NVLS and
NVLS Tree 0."""

HW_LAT_US: dict[str, dict[tuple[str, str], float]] = {
    NVLINK: {
        (TREE, LL): 0.6,
        (TREE, LL128): 1.25,
        (TREE, SIMPLE): 28.0,
        (RING, LL): 0.6,
        (RING, LL128): 1.9,
        (RING, SIMPLE): 3.4,
        (NVLS, SIMPLE): 23.0,
        (NVLS_TREE, SIMPLE): 23.0,
    },
    PCI: {
        (TREE, LL): 1.0,
        (TREE, LL128): 1.9,
        (TREE, SIMPLE): 28.0,
        (RING, LL): 1.0,
        (RING, LL128): 2.5,
        (RING, SIMPLE): 5.7,
        (NVLS, SIMPLE): 0.0,
        (NVLS_TREE, SIMPLE): 0.0,
    },
    NET: {
        (TREE, LL): 5.0,
        (TREE, LL128): 8.5,
        (TREE, SIMPLE): 28.0,
        (RING, LL): 2.7,
        (RING, LL128): 4.0,
        (RING, SIMPLE): 14.0,
        (NVLS, SIMPLE): 18.0,
        (NVLS_TREE, SIMPLE): 14.0,
    },
}
"""``hwLat[NVLINK|PCI|NET][algorithm][protocol]`` (us), tuning.cc."""

VOLTA, AMPERE, HOPPER = 0, 1, 2
LL_MAX_BW = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (87.7, 22.5, 19.0))
"""``llMaxBws[arch][servers: 1, 2, 4+]`` (GB/s); across servers the row is the CPU vendor's
(Intel 0, AMD 1); Intel is assumed here."""
PER_CH_MAX_RING_LL128 = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 36.7))
PER_CH_MAX_TREE_LL128 = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0))
PER_CH_MAX_TREE = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0))
"""``perChMax{RingLL128,TreeLL128,Tree}Bws[arch][servers: 1, 2, 4+]`` (GB/s per channel)."""

TREE_CORRECTION = {
    LL: (1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.7, 0.7, 0.7, 0.7, 0.6, 0.5)
    + (0.4, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.0, 1.0, 1.0),
    LL128: (1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.8, 0.8, 0.7, 0.6, 0.6)
    + (0.6, 0.6, 0.6, 0.6, 0.8, 0.9, 0.9, 0.9, 0.9, 1.0, 1.0),
    SIMPLE: (0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5)
    + (0.5, 0.5, 0.5, 0.6, 0.7, 0.8, 0.7, 0.7, 0.8, 0.9, 0.9),
}
"""``treeCorrectionFactor[protocol][log2(nBytes / 64)]``, 64 B .. 256 MiB, tuning.cc."""

SPEEDS_INTRA = (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0)
SPEEDS_INTRA_SM90 = (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 6.0, 3.0)
"""``speedArrayIntra`` / ``sm90SpeedArrayIntra`` (GB/s per channel), src/graph/search.cc."""
SPEEDS_INTER: tuple[float, ...] = (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0)
SPEEDS_INTER += (9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2, 0.24, 0.12)
SPEEDS_INTER_SM90: tuple[float, ...] = (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5)
SPEEDS_INTER_SM90 += (15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12)
SPEEDS_INTER_SM100: tuple[float, ...] = (96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0)
SPEEDS_INTER_SM100 += (22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12)
"""``speedArrayInter`` / ``sm90SpeedArrayInter`` (GB/s per channel), src/graph/search.cc: the
speeds a graph with network nodes may take. ``sm100SpeedArrayInter`` (Blackwell, ``ccMin >=
100``) is NCCL 2.30.7's (NVIDIA/nccl@5067397 src/graph/search.cc:1064-1065; 2.20.3 predates
Blackwell): it starts at 96 GB/s, so an 800 Gb/s NIC read as 96 GB/s gets a 96 GB/s channel
(then doubled at 48) where the sm90 array capped it at 48 (doubled at 24)."""
MAX_CHANNELS = 16
"""The ring graph's most channels: ``MAXCHANNELS / 2`` (src/init.cc)."""
NET_OVERHEAD_US = 1.0
"""``getNetOverhead``: 1 us per network step on Intel CPUs (2 on AMD; Intel assumed), x3 for
Simple."""
P2P_LL_THRESHOLD = 16384
"""``NCCL_P2P_LL_THRESHOLD`` default in bytes (src/enqueue.cc ``NCCL_PARAM(P2pLLThreshold)``)."""
P2P_FIFO_BYTES = (1 << 19) * 8
"""Bytes a point-to-point send can leave in one channel's FIFO before its receive is posted:
``p2pChunkSize * NCCL_STEPS`` with ``NCCL_P2P_NVL_CHUNKSIZE`` 512 KiB on an all-NVLink
communicator and ``NCCL_STEPS`` 8, within ``DEFAULT_BUFFSIZE`` 4 MiB (src/init.cc
``computeBuffSizes``; over PCIe or the network the chunk is 128 KiB, 1 MiB in all: not used
here). Assumption: one channel's worth, though NCCL may spread a send over several."""


@dataclass(frozen=True)
class Communicator:
    """What NCCL's tuning sees of a communicator.

    Attributes:
        ranks: ``n``, GPUs in the communicator.
        servers: ``N``, servers they span.
        bus_Bps: the ring's bus bandwidth in bytes/s (``nChannels * bw``; module doc).
        intra: ``"nvlink"`` or ``"pci"``: the path between GPUs of one server.
        compute_capability: the GPUs' (7.0 V100, 8.0 A100, 9.0 H100).
        nvls: NVLink SHARP is available (NVSwitch gen3 with multicast; one server only).
        max_ring_Bps: the widest single ring's bandwidth in bytes/s (NCCL's ``maxBw``, which
            bounds a channel's speed); default ``bus_Bps``.
        nics: NICs per server the communicator's graph uses across servers (one per member
            GPU on a rail-optimised network; :func:`inter_graph`); 0 on one server.
        nic_Bps: NCCL's bandwidth of one GPU's path to its NIC in bytes/s (the least of the
            NIC's speed and the PCIe link NCCL reads: :func:`inter_graph`).
        local_Bps: the bus bandwidth of the members of one server among themselves (their
            rings over NVLink), in bytes/s: the intra-node side of NVLS Tree.
    """

    ranks: int
    servers: int
    bus_Bps: float
    intra: str
    compute_capability: float
    nvls: bool = False
    max_ring_Bps: float | None = None
    nics: int = 0
    nic_Bps: float = 0.0
    local_Bps: float | None = None

    @property
    def arch(self) -> int:
        """Index of NCCL's per-architecture tables: Volta, Ampere (and sm8x), Hopper."""
        cc = self.compute_capability
        return HOPPER if cc >= 9.0 else AMPERE if cc >= 8.0 else VOLTA

    @property
    def size_index(self) -> int:
        """Column of NCCL's per-server-count tables: 1, 2, or 4+ servers."""
        return self.servers - 1 if self.servers <= 2 else 2


@dataclass(frozen=True)
class Choice:
    """One algorithm and protocol, its predicted latency and algorithm bandwidth.

    Attributes:
        algorithm: ``ring``, ``tree`` or ``nvls``.
        protocol: ``LL``, ``LL128`` or ``Simple``.
        latency_s: seconds.
        bandwidth_Bps: algorithm bandwidth in bytes/s (``nBytes / (time - latency)``).
        time_s: ``latency_s + nbytes / bandwidth_Bps`` for the message it was chosen for.
    """

    algorithm: str
    protocol: str
    latency_s: float
    bandwidth_Bps: float
    time_s: float


def inter_graph(nics: int, nic_Bps: float, compute_capability: float) -> tuple[int, float]:
    """``(channels, GB/s per channel)`` of NCCL's ring graph across servers.

    NCCL's search (src/graph/search.cc ``ncclTopoCompute``, 2.20.3) starts at the fastest
    speed of ``speedArrayInter`` (``sm90SpeedArrayInter`` on Hopper, ``sm100SpeedArrayInter``
    on Blackwell) not above
    ``maxBw``, the best GPU-to-NIC path (the NIC's speed, or the PCIe link when slower: NCCL
    reads gen4 x16 as 24 GB/s, gen5 x16 as 48), and finds one channel per NIC (each channel
    enters and leaves a server through one NIC; rail-optimised, GPU ``i``'s NIC), so ``nics``
    channels at that speed; ``ncclTopoDupChannels`` then doubles the channels at half the
    speed when the speed is 25 GB/s or more, except on sm90+ below 50 GB/s with more than 4
    channels (and never beyond 16). The bus bandwidth ``channels x speed`` is what
    ``ncclTopoTuneModel`` uses across more than 2 servers (``bwInter``; ``bwIntra``, equal for
    a ring, on 2).

    Raises:
        ValueError: ``nics`` below 1.
    """
    if nics < 1:
        raise ValueError("a graph across servers needs at least one NIC per server")
    speeds = SPEEDS_INTER_SM90 if compute_capability >= 9.0 else SPEEDS_INTER
    speeds = SPEEDS_INTER_SM100 if compute_capability >= 10.0 else speeds
    speed = next((s for s in speeds if s <= nic_Bps / 1e9), speeds[-1])
    n = min(nics, MAX_CHANNELS)
    keeps = compute_capability > 8.0 and speed < 50.0 and n > 4
    if speed >= 25.0 and not keeps:
        doubled = min(2 * n, MAX_CHANNELS)
        speed /= -(-doubled // n)
        n = doubled
    return n, speed


def channels(comm: Communicator) -> int:
    """NCCL's ring channel count for ``comm`` (module doc; src/graph/search.cc); across
    servers that of :func:`inter_graph`."""
    if comm.servers > 1 and comm.nics > 0:
        return inter_graph(comm.nics, comm.nic_Bps, comm.compute_capability)[0]
    speeds = SPEEDS_INTRA_SM90 if comm.arch == HOPPER else SPEEDS_INTRA
    bus = comm.bus_Bps / 1e9
    widest = (comm.max_ring_Bps or comm.bus_Bps) / 1e9
    speed = next((s for s in speeds if s <= min(widest, bus)), speeds[-1])
    n = max(1, min(MAX_CHANNELS, int(bus // speed)))
    hopper_keeps = comm.arch == HOPPER and speed < 50.0 and n > 4
    if speed >= 25.0 and not hopper_keeps:
        n = min(2 * n, MAX_CHANNELS)
    return n


def steps(kind: str, n: int) -> int:
    """Ring steps of a collective over ``n`` ranks: ``2(n-1)`` all-reduce, ``n-1`` others."""
    return 2 * (n - 1) if kind == EventKind.ALLREDUCE else n - 1


def _bus_GBps(comm: Communicator, kind: str, algo: str, proto: str) -> float:
    """NCCL's bus bandwidth of ``algo``/``proto`` in GB/s, 0 when disabled (module doc)."""
    bus, a, k = comm.bus_Bps / 1e9, comm.arch, comm.size_index
    nch, ll_max = channels(comm), LL_MAX_BW[a][k]
    ll128_ok = comm.intra == NVLINK and comm.compute_capability in (7.0, 8.0, 9.0)
    if proto == LL128 and not ll128_ok:
        return 0.0
    if algo == RING:
        if proto == LL:
            few = comm.servers > 1 or kind == EventKind.ALLREDUCE
            return min(ll_max, bus / 4 if few else bus / 3)
        if proto == LL128:
            ppn = comm.ranks / comm.servers
            return min(bus * (0.7 if ppn < 2 else 0.92), nch * PER_CH_MAX_RING_LL128[a][k])
        return bus
    if algo == TREE:
        if kind != EventKind.ALLREDUCE:
            return 0.0
        tree = min(bus * 0.92, nch * PER_CH_MAX_TREE[a][k])
        if proto == LL:
            return min(tree / 3.8, ll_max)
        if proto == LL128:
            factor = 7.0 / 9.0 if comm.servers == 1 else 120.0 / 128.0
            return min(tree * factor, nch * PER_CH_MAX_TREE_LL128[a][k])
        return tree
    if algo == NVLS_TREE:
        ok = comm.nvls and comm.servers > 1 and kind == EventKind.ALLREDUCE and comm.nics > 0
        if not ok or proto != SIMPLE or comm.arch != HOPPER:
            return 0.0
        nch, speed = inter_graph(comm.nics, comm.nic_Bps, comm.compute_capability)
        inter = nch * speed / (1 if comm.servers <= 2 else 2)
        return min((comm.local_Bps or comm.bus_Bps) / 1e9, inter)
    ok = comm.nvls and comm.servers == 1 and proto == SIMPLE and comm.arch == HOPPER
    return bus if ok else 0.0


def _latency_us(comm: Communicator, kind: str, algo: str, proto: str, nbytes: float) -> float:
    """NCCL's latency of ``algo``/``proto`` in us (module doc)."""
    n, servers = comm.ranks, comm.servers
    intra = HW_LAT_US[comm.intra][(algo, proto)]
    inter = HW_LAT_US[NET][(algo, proto)]
    base = BASE_LAT_US[(algo, proto)]
    if algo == NVLS:
        return intra + (inter if servers > 1 else 0.0)
    if algo == NVLS_TREE:
        return base + intra + 2 * int(math.log2(servers)) * inter
    if algo == TREE:
        return base + 2 * ((n // servers - 1) * intra + int(math.log2(servers)) * inter)
    nsteps = steps(kind, n)
    inter_steps = (
        0 if servers == 1 else (2 * servers if kind == EventKind.ALLREDUCE else servers - 1)
    )
    if servers > 1:
        intra = max(intra, NET_OVERHEAD_US * (3 if proto == SIMPLE else 1))
    lat = base + (nsteps - inter_steps) * intra + inter_steps * inter
    plateau = nbytes / (channels(comm) * n) >= 64
    if servers > 1 and proto == SIMPLE and kind == EventKind.ALLREDUCE and plateau:
        lat *= 1.4 if comm.compute_capability >= 8.0 else 1.9
    return lat


def _algo_GBps(comm: Communicator, kind: str, algo: str, proto: str, nbytes: float) -> float:
    """Algorithm bandwidth in GB/s, with the tree's size correction; 0 when disabled."""
    bus = _bus_GBps(comm, kind, algo, proto)
    if algo == RING:
        return bus * comm.ranks / steps(kind, comm.ranks)
    if algo in (NVLS, NVLS_TREE):
        return bus * 5.0 / 6.0
    log_size = max(0, int(nbytes) >> 6).bit_length() - 1 if nbytes >= 64 else 0
    corr = TREE_CORRECTION[proto]
    return bus * 0.5 * (corr[log_size] if log_size < len(corr) else 1.0)


def candidates(comm: Communicator, kind: str, nbytes: float) -> list[Choice]:
    """Every enabled algorithm and protocol for a ``kind`` collective of ``nbytes`` (nccl-tests'
    ``B``: the all-reduce buffer, the all-gather output, the reduce-scatter input), in NCCL's
    order (tree, ring, NVLS; LL, LL128, Simple).

    Raises:
        ValueError: ``kind`` is not a collective, or ``comm`` has fewer than 2 ranks.
    """
    if kind not in (EventKind.ALLREDUCE, EventKind.ALL_GATHER, EventKind.REDUCE_SCATTER):
        raise ValueError(f"NCCL's tuning model has no collective {kind!r}")
    if comm.ranks < 2:
        raise ValueError("a collective over one rank costs nothing; nothing to tune")
    out = []
    for algo in (TREE, RING, NVLS, NVLS_TREE):
        for proto in PROTOCOLS:
            if (algo, proto) not in BASE_LAT_US:
                continue
            bw = _algo_GBps(comm, kind, algo, proto, nbytes) * 1e9
            if bw <= 0:
                continue
            lat = _latency_us(comm, kind, algo, proto, nbytes) * 1e-6
            out.append(Choice(algo, proto, lat, bw, lat + nbytes / bw))
    return out


def choose(comm: Communicator, kind: str, nbytes: float) -> Choice:
    """The algorithm and protocol NCCL runs: least predicted time, the first on ties (NCCL's
    ``getAlgoInfo``: strictly less replaces). See :func:`candidates`."""
    best = None
    for c in candidates(comm, kind, nbytes):
        if best is None or c.time_s < best.time_s:
            best = c
    assert best is not None  # ring Simple is always enabled
    return best


def p2p_time_s(intra: str, bandwidth_Bps: float, nbytes: float) -> float:
    """Seconds of one NCCL send/receive of ``nbytes`` over a path of ``bandwidth_Bps``
    (NCCL's rate of its links) whose kind is ``intra`` (``nvlink``, ``pci`` or ``net``).

    NCCL sends with LL up to ``NCCL_P2P_LL_THRESHOLD`` = 16 KiB (src/enqueue.cc), Simple above.
    Its tuning model has no send/receive entry; the latency taken here is one ring step of that
    protocol, ``baseLat[ring][p] + hwLat[hw][ring][p]`` (derived from tuning.cc, an
    assumption), and LL moves at a third of the path's rate (as a ring LL all-gather does).
    """
    proto = LL if nbytes <= P2P_LL_THRESHOLD else SIMPLE
    lat_us = BASE_LAT_US[(RING, proto)] + HW_LAT_US[intra][(RING, proto)]
    rate = bandwidth_Bps / 3 if proto == LL else bandwidth_Bps
    return lat_us * 1e-6 + nbytes / rate
