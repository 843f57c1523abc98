"""How many thread blocks (CTAs, one per channel) an NCCL collective launches: the SMs it
takes from compute that runs beside it.

Source: NCCL at commit ``5067397c2676d5aed50042fc39e5c8ee96eb0027`` (github NVIDIA/nccl):

* a collective's kernel runs one CTA per channel; ``src/enqueue.cc`` (the algorithm's channel
  count after ``getAlgoInfo``) takes ``nc = comm->nChannels`` for ring and tree, lowered only
  for a message below ``nc * nThreads * threadThreshold`` bytes (not modelled: the data-parallel
  buckets this serves are tens of MiB), and ``comm->nvlsChannels`` for NVLS (on several servers
  at most ``nChannels``);
* ``comm->nChannels`` is the ring graph's channel count (``src/graph/search.cc``,
  :func:`sim.comm.nccl.channels`) doubled: ``ncclTopoPostset`` (``src/graph/connect.cc``,
  "Duplication should be complete now": ``min(MAXCHANNELS, nChannels * 2)``), doubled again on
  sm90 and newer across servers when the graph's per-channel speed ``bwIntra`` is above 45 GB/s
  and fewer than 16 channels remain ("Use 4 compute channels per search channel");
  ``MAXCHANNELS`` is 64 (``src/include/device.h``); ``NCCL_MIN_CTAS`` / ``NCCL_MAX_CTAS``
  are unset by default (``src/init.cc``) and bound nothing;
* ``comm->nvlsChannels`` (``src/transport/nvls.cc`` ``ncclNvlsTuning``): 16 on sm90
  (``NVLS_NCHANNELS_SM90``), on sm100 and newer 24 on one server (``NVLS_NCHANNELS_SM100_NVL``)
  and 32 across servers (``NVLS_NCHANNELS_SM100``).
"""

from __future__ import annotations

from sim.comm import nccl
from sim.hardware.gpu_spec import model_capability

MAX_CHANNELS = 64
"""``MAXCHANNELS`` (NCCL ``src/include/device.h``)."""
NVLS_CHANNELS_SM90, NVLS_CHANNELS_SM100_NVL, NVLS_CHANNELS_SM100 = 16, 24, 32
"""``NVLS_NCHANNELS_SM90``, ``_SM100_NVL`` (one server), ``_SM100`` (NCCL src/transport/nvls.cc)."""
FAST_CHANNEL_GBPS = 45.0
"""``bwIntra`` above which NCCL doubles the channels again across servers on sm90+ (connect.cc)."""


def capability(model: str) -> float | None:
    """Compute capability of a GPU ``model`` for counting CTAs: the GPU spec's table by name
    prefix (:func:`sim.hardware.gpu_spec.model_capability`), Blackwell included where presets
    leave the field unset (:data:`sim.hardware.gpu_spec.NOT_DEFAULTED`); None if it does not
    know it."""
    return model_capability(model)


def comm_channels(comm: nccl.Communicator) -> int:
    """NCCL's ``comm->nChannels`` for ``comm`` (module doc): the ring graph's channels doubled,
    and doubled again across servers on sm90+ when a channel runs above 45 GB/s.

    Example:
        >>> from sim.comm.nccl import Communicator
        >>> comm_channels(Communicator(64, 8, 8 * 48e9, "nvlink", 10.0, nics=8, nic_Bps=100e9))
        32
    """
    n = min(MAX_CHANNELS, 2 * nccl.channels(comm))
    if comm.servers > 1 and comm.nics > 0 and comm.compute_capability >= 9.0 and n < 16:
        speed_GBps = nccl.inter_graph(comm.nics, comm.nic_Bps, comm.compute_capability)[1]
        if speed_GBps > FAST_CHANNEL_GBPS:
            n = min(MAX_CHANNELS, 2 * n)
    return n


def ctas(comm: nccl.Communicator, algorithm: str) -> int:
    """Thread blocks (one per channel, each on its own SM) a large collective of ``algorithm``
    (:data:`sim.comm.nccl.RING`, ``TREE``, ``NVLS``, ``NVLS_TREE``) launches on each GPU of
    ``comm`` (module doc)."""
    n = comm_channels(comm)
    if algorithm in (nccl.NVLS, nccl.NVLS_TREE):
        if comm.compute_capability < 10.0:
            nvls = NVLS_CHANNELS_SM90
        else:
            nvls = NVLS_CHANNELS_SM100 if comm.servers > 1 else NVLS_CHANNELS_SM100_NVL
        return min(nvls, n) if comm.servers > 1 and algorithm == nccl.NVLS else nvls
    return n
