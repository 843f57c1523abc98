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
