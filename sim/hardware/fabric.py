"""The network between servers: a rail-optimised two-level fat tree, one NIC per GPU.

NVIDIA's DGX SuperPOD reference architectures (DGX A100 SuperPOD RA, "compute fabric"; DGX
H100 SuperPOD RA, RA-11333-001) build the compute network from *scalable units* (SU: 20 DGX
A100 or 32 DGX H100 servers) and make it **rail-optimised**: the NIC of GPU ``i`` of every
server of an SU goes to the SU's leaf switch ``i`` (rail ``i``), so GPU ``i`` reaches GPU ``i``
of any server of its SU through one switch; every leaf has uplinks to every spine switch, which
joins the SUs and the rails (a full fat tree when the uplinks carry as much as the downlinks).

:class:`RailFatTree` is that network, with:

* ``servers_per_leaf`` servers per SU: leaf ``leaf<u>.<i>`` is rail ``i`` of SU ``u``; server
  ``n`` is in SU ``n // servers_per_leaf``;
* each GPU's NIC as one link each way ``gpu<g> <-> leaf<u>.<i>`` at ``nic_Bps`` (GPUDirect
  RDMA: the NIC's PCIe hop is not a separate link);
* ``K = ceil(servers_per_leaf / oversubscription)`` uplinks per leaf, one to each spine
  ``spine<k>``, each at ``nic_Bps``: the leaf's downlinks carry ``oversubscription`` times its
  uplinks (1: non-blocking). A spine here stands for one plane of the spine layer: with more
  leaves than a switch has ports, the physical spine is itself a group of switches (a third
  tier); that plane is taken as non-blocking;
* routing by destination, D-mod-K: traffic to a GPU of server ``n`` leaves its source leaf on
  uplink ``(n mod servers_per_leaf) mod K``, as InfiniBand's destination-based forwarding
  tables spread destinations over the uplinks (OpenSM's ``ftree`` routing engine; Zahavi,
  "D-Mod-K Routing Providing Non-Blocking Traffic for Shift Permutations on Real Life Fat
  Trees", 2010). So every GPU's NIC and every leaf and spine port is one link of the engine,
  and concurrent transfers and collectives that cross the same port contend for it.

A GPU reaches a GPU of the same rail and SU in 2 links (NIC up, NIC down), anything else in 4
(NIC, leaf uplink, spine downlink, NIC). Names carry units; bandwidths are bytes/s per
direction, latencies seconds per link crossed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

NETWORK = "network"
"""Link kind of every fabric link (:class:`~sim.hardware.parts.Link`)."""


@dataclass(frozen=True)
class RailFatTree:
    """A rail-optimised leaf/spine network joining ``servers`` servers (module doc).

    Attributes:
        servers: servers joined.
        gpus_per_server: GPUs (and NICs, rails) per server.
        nic_Bps: per-direction bandwidth of each NIC and each switch port, bytes/s.
        latency_s: seconds per network link crossed.
        servers_per_leaf: servers per scalable unit (one leaf switch per rail and SU).
        oversubscription: a leaf's downlink bandwidth over its uplink bandwidth (1: full
            fat tree).
        technology: what the links are (e.g. ``"InfiniBand NDR 400 Gb/s"``), for people.
        nccl_nic_Bps: the rate NCCL's graph search gives a GPU's path to its NIC (the NIC's
            speed or the GPU's PCIe link if slower, :func:`sim.comm.nccl.inter_graph`), the
            NIC links' NCCL rate; None: ``nic_Bps``.
        source: where the NIC, switch and latency figures come from (the description's
            ``network.source``), for people; "" when the description gives none.
        nccl_p2p_channels: NCCL's p2p channels per network peer (2 up to NCCL 2.28); None:
            NCCL >= 2.29.2's count from the NIC rate (:mod:`sim.comm.p2p_net`).

    Raises:
        ValueError: a count below 1, a bandwidth or oversubscription not positive.

    Example:
        >>> tree = RailFatTree(64, 8, 50e9, 1e-6, servers_per_leaf=32)
        >>> tree.route_names(3, 8 * 5 + 3)  # rail 3, same SU: one switch
        ('gpu3->leaf0.3', 'leaf0.3->gpu43')
        >>> tree.route_names(3, 8 * 40 + 3)  # another SU: up to spine 40 mod 32 = 8
        ('gpu3->leaf0.3', 'leaf0.3->spine8', 'spine8->leaf1.3', 'leaf1.3->gpu323')
    """

    servers: int
    gpus_per_server: int
    nic_Bps: float
    latency_s: float
    servers_per_leaf: int = 32
    oversubscription: float = 1.0
    technology: str = ""
    nccl_nic_Bps: float | None = None
    source: str = ""
    nccl_p2p_channels: int | None = None

    def __post_init__(self) -> None:
        if min(self.servers, self.gpus_per_server, self.servers_per_leaf) < 1 or (
            self.nccl_p2p_channels is not None and self.nccl_p2p_channels < 1
        ):
            raise ValueError(
                "servers, gpus_per_server, servers_per_leaf and nccl_p2p_channels must be >= 1"
            )
        if self.nic_Bps <= 0 or self.oversubscription <= 0 or self.latency_s < 0:
            raise ValueError("nic_Bps and oversubscription must be > 0, latency_s >= 0")

    @property
    def units(self) -> int:
        """Scalable units (leaf groups): ``ceil(servers / servers_per_leaf)``."""
        return -(-self.servers // self.servers_per_leaf)

    @property
    def uplinks(self) -> int:
        """Uplinks per leaf, one per spine: ``ceil(servers_per_leaf / oversubscription)``."""
        return max(1, math.ceil(self.servers_per_leaf / self.oversubscription - 1e-9))

    @property
    def num_gpus(self) -> int:
        return self.servers * self.gpus_per_server

    def leaf(self, server: int, rail: int) -> str:
        """Name of the leaf switch of ``rail`` in ``server``'s scalable unit."""
        return f"leaf{server // self.servers_per_leaf}.{rail}"

    def switches(self) -> list[str]:
        """Every leaf (SU-major, then rail) and spine switch name."""
        leaves = [f"leaf{u}.{i}" for u in range(self.units) for i in range(self.gpus_per_server)]
        return leaves + [f"spine{k}" for k in range(self.uplinks)]

    def link_ends(self) -> list[tuple[str, str]]:
        """``(src, dst)`` of every directed fabric link: each GPU's NIC both ways, then each
        leaf's uplinks both ways."""
        out = []
        g = self.gpus_per_server
        for gpu in range(self.num_gpus):
            leaf = self.leaf(gpu // g, gpu % g)
            out += [(f"gpu{gpu}", leaf), (leaf, f"gpu{gpu}")]
        for u in range(self.units):
            for i in range(g):
                for k in range(self.uplinks):
                    out += [(f"leaf{u}.{i}", f"spine{k}"), (f"spine{k}", f"leaf{u}.{i}")]
        return out

    def route_names(self, src_gpu: int, dst_gpu: int) -> tuple[str, ...]:
        """Names (``"src->dst"``) of the links from GPU ``src_gpu`` to GPU ``dst_gpu`` of
        another server (module doc: 2 links within a rail and SU, else 4, D-mod-K uplink).

        Raises:
            ValueError: both GPUs are in the same server (their traffic stays inside it).
        """
        g, spl = self.gpus_per_server, self.servers_per_leaf
        sa, sb = src_gpu // g, dst_gpu // g
        if sa == sb:
            raise ValueError(f"gpu{src_gpu} and gpu{dst_gpu} are in the same server")
        up, down = self.leaf(sa, src_gpu % g), self.leaf(sb, dst_gpu % g)
        a, b = f"gpu{src_gpu}", f"gpu{dst_gpu}"
        if up == down:
            return (f"{a}->{up}", f"{up}->{b}")
        spine = f"spine{(sb % spl) % self.uplinks}"
        return (f"{a}->{up}", f"{up}->{spine}", f"{spine}->{down}", f"{down}->{b}")
