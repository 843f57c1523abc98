"""NCCL's rate of one send/receive between two GPUs of different servers: its p2p channels.

NCCL moves a send to a peer on another server over ``p2pnChannelsPerPeer`` channels (each one
CTA and one proxy connection), and one channel does not fill a fast NIC. NCCL itself sizes the
channel count from a per-channel figure: ``NCCL_P2P_PER_CHANNEL_NET_BW`` = 14 GB/s, "we use at
least 1 channel per NIC, and more if needed to meet the bw requirement" (NVIDIA/nccl@5067397
``src/graph/paths.cc`` 918, 943-951: ``max(netCount, divUp(netBw, 14))``, then rounded up to a
power of two, ``ncclTopoComputeP2pChannels`` 977-989, halved only when a communicator has more
peers than a round of its p2p channels holds). That rule arrived in NCCL 2.29.2
(commit ebd1e929, release note: "Improves the default number of channels per net peer for
all-to-all, send, and recv to achieve better performance"). Up to 2.28 the count was 2 ("start
from 2 channels per NIC and reduce with scale", nccl@v2.28.9-1 ``paths.cc`` 836-850: ``max(
netCountByBw, 2)`` with one NIC per GPU, halved only when ``2 x nRanks > 4 x p2pnChannels``), and
the 2.29.2 note says that count was too few.

So a send to a network peer moves at ``min(NIC rate, channels x 14 GB/s)``: with NCCL >= 2.29.2
the NIC's rate on every preset (DGX B200 48 GB/s: 4 channels, 56; DGX B300 96: 8, 112), with
NCCL <= 2.28 at 28 GB/s. Assumption: a channel moved the same 14 GB/s under 2.28 (the figure
is NCCL's own sizing constant, not a measurement; NCCL's default 128 KiB network chunk,
``NCCL_P2P_NET_CHUNKSIZE``, which Megatron-Bridge raises for its Llama pipelines, where this
figure says nothing). Many peers at once (an all-to-all) share the NIC instead: this is the
rate of one peer's send, :func:`sim.engine.links.Links.duration_s`'s pipeline sends.

Which communicator a send runs on matters too: NCCL caps the channels per peer by the
communicator's own channel count and its number of ranks. PyTorch runs a lone ``isend`` /
``irecv`` on a two-rank communicator of the pair (pytorch/pytorch@0007e752
``torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp`` ``pointToPoint``: "For single P2P,
preserve the old two-rank behavior", ``getKeySendRecv``; assumption: the containers'
PyTorch keeps this for a group created lazily, without a ``device_id``; Megatron-Bridge v0.3.0
``training/initialize.py`` 570-578 passes no ``device_id``, so no eager communicator), but a
``batch_isend_irecv`` (Megatron's ``batch_p2p_comm``) on the group's communicator: the
pipeline group of ``p`` ranks. Up to 2.28 the 2 channels halve while ``2 x nRanks >
4 x p2pnChannels`` (nccl@v2.28.9-1 ``paths.cc`` 846); from 2.29.2 the per-peer count
halves while ``count x ceil(nRanks / 8) > p2pnChannels`` (nccl@v2.29.2-1 ``paths.cc`` 896,
``NCCL_MAX_DEV_WORK_P2P_PER_BATCH`` 8, ``device.h`` 384), where ``p2pnChannels`` is the
communicator's channel count (``ncclTopoComputeP2pChannels``), :func:`comm_channels`
(:func:`group_channels_per_peer`). For two ranks neither rule changes the count above.
"""

from __future__ import annotations

import math

PER_CHANNEL_Bps = 14e9
"""``NCCL_P2P_PER_CHANNEL_NET_BW`` default, 14 GB/s (NVIDIA/nccl@5067397 ``src/graph/paths.cc``
918): what NCCL takes one p2p channel over the network to carry."""


def channels_per_peer(nic_Bps: float, nics: int = 1) -> int:
    """NCCL >= 2.29.2's p2p channels per network peer for a GPU with ``nics`` NICs of
    ``nic_Bps`` bytes/s in all (NCCL's rate to them): ``max(nics, ceil(nic / 14 GB/s))``
    rounded up to a power of two (``paths.cc`` 943-951, 989).

    Raises:
        ValueError: ``nic_Bps`` not positive or ``nics`` below 1.

    >>> channels_per_peer(48e9), channels_per_peer(96e9), channels_per_peer(25e9)
    (4, 8, 2)
    """
    if nic_Bps <= 0 or nics < 1:
        raise ValueError("nic_Bps must be > 0 and nics >= 1")
    n = max(nics, math.ceil(nic_Bps / 1e9 / (PER_CHANNEL_Bps / 1e9)))
    return 1 << (n - 1).bit_length()


def comm_channels(nic_Bps: float) -> int:
    """NCCL's channel count (``comm->nChannels``, which is ``p2pnChannels``) of a communicator
    whose ranks each sit on their own server behind one NIC of ``nic_Bps`` bytes/s, GPUs of
    compute capability 9.0 or more: the ring search puts the NIC's rate on one channel,
    ``ncclTopoDupChannels`` splits it in two when it carries 25 GB/s or more (nccl@v2.28.9-1
    ``src/graph/search.cc`` 961-975), ``ncclTopoPostset`` doubles the channels
    (``src/graph/connect.cc`` 452) and doubles them again when a channel carries more than
    45 GB/s between servers (472-474). Assumption: the search's rate is the NIC's (48 and 96
    GB/s are in its sm100 speed list, ``search.cc`` 987). A published log agrees at 400 Gb/s:
    a two-rank communicator of GH200s on two servers builds 4 channels (NVIDIA/nccl#1291,
    "Channel 00/04").

    Raises:
        ValueError: ``nic_Bps`` not positive.

    >>> comm_channels(48e9), comm_channels(96e9), comm_channels(24e9)
    (4, 8, 2)
    """
    if nic_Bps <= 0:
        raise ValueError("nic_Bps must be > 0")
    rate_GBps, n = nic_Bps / 1e9, 1
    if rate_GBps >= 25.0:
        rate_GBps, n = rate_GBps / 2, 2
    n *= 2
    return 2 * n if rate_GBps > 45.0 else n


def group_channels_per_peer(nic_Bps: float, ranks: int, channels_2_28: int | None = None) -> int:
    """NCCL's p2p channels per network peer on a communicator of ``ranks`` ranks, each on its
    own server (module doc): ``channels_2_28`` (NCCL <= 2.28's starting count, 2) halved
    while ``count x ranks > 4 x p2pnChannels``; None: NCCL >= 2.29.2's
    :func:`channels_per_peer` halved while ``count x ceil(ranks / 8) > p2pnChannels``,
    ``p2pnChannels`` = :func:`comm_channels`.

    Raises:
        ValueError: ``ranks`` below 2, or as :func:`channels_per_peer`.

    >>> group_channels_per_peer(48e9, 16, 2), group_channels_per_peer(48e9, 16)
    (1, 2)
    >>> group_channels_per_peer(48e9, 2, 2), group_channels_per_peer(96e9, 2)
    (2, 8)
    """
    if ranks < 2:
        raise ValueError("a communicator of sends has 2 ranks or more")
    p2p = comm_channels(nic_Bps)
    if channels_2_28 is not None:
        n = channels_2_28
        while n * ranks > 4 * p2p and n > 1:
            n //= 2
        return min(1 << (max(n, 1) - 1).bit_length(), p2p)
    n = channels_per_peer(nic_Bps)
    while n * math.ceil(ranks / 8) > p2p and n > 1:
        n //= 2
    return n


def peer_rate_Bps(nic_Bps: float, channels: int | None = None) -> float:
    """Bytes/s of one NCCL send to a peer on another server: ``min(nic_Bps, channels x 14
    GB/s)``; ``channels`` None: NCCL >= 2.29.2's count (:func:`channels_per_peer`).

    Raises:
        ValueError: ``nic_Bps`` not positive or ``channels`` below 1.

    >>> peer_rate_Bps(48e9, 2) / 1e9, peer_rate_Bps(48e9) / 1e9
    (28.0, 48.0)
    """
    if channels is None:
        channels = channels_per_peer(nic_Bps)
    if channels < 1:
        raise ValueError("channels must be >= 1")
    return min(nic_Bps, channels * PER_CHANNEL_Bps)
