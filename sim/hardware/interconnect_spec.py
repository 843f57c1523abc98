"""The ``links:``, ``network:`` and ``collectives:`` keys of a hardware description: the
physical links inside a server, the rail-optimized network between servers, and measured
collective times."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from sim.hardware.comm_tables import CollectiveTable
from sim.hardware.fabric import RailFatTree
from sim.hardware.spec_fields import Bandwidth, Bytes, LinkKind, Seconds


class LinkSpec(BaseModel):
    """A physical connection between two nodes (both directions unless ``directed``)."""

    model_config = ConfigDict(extra="forbid")

    a: str = Field(description="One end: 'gpu<i>', a host name or a switch name.")
    b: str = Field(description="The other end (the destination when directed).")
    bandwidth: Bandwidth = Field(
        gt=0,
        description="Per-direction bandwidth of the whole connection (all `count` links "
        "together), e.g. '48 GB/s'.",
    )
    latency: Seconds = Field(
        default=10e-6,
        ge=0,
        description="Fixed cost per transfer crossing this link, e.g. '10 us'. The default is "
        "the ~10 us per copy of hardware.md §6 (an unverified estimate).",
    )
    kind: LinkKind = Field(default="link", description="Technology, e.g. 'nvlink' or 'pcie'.")
    count: int = Field(
        default=1,
        ge=1,
        description="Number of bundled physical links (NV2 = 2); sets NCCL's rate over NVLink "
        "(count x gpu.nccl_nvlink_bandwidth).",
    )
    directed: bool = Field(
        default=False, description="Only the direction a -> b (default: both directions)."
    )
    nccl_bandwidth: Bandwidth | None = Field(
        default=None,
        gt=0,
        description="Per-direction bandwidth NCCL's p2p and collectives achieve over this "
        "connection; default: `count` x gpu.nccl_nvlink_bandwidth for NVLink/NVSwitch links when "
        "that is given, else `bandwidth`.",
    )


class NetworkSpec(BaseModel):
    """The network between the servers of a multi-server description: one NIC per GPU, GPU
    ``i`` of every server on rail ``i``, leaf and spine switches (:mod:`sim.hardware.fabric`)."""

    model_config = ConfigDict(extra="forbid")

    nic_bandwidth: Bandwidth = Field(
        gt=0,
        description="Per-direction bandwidth of each GPU's NIC and of each switch port, e.g. "
        "'50 GB/s' (400 Gb/s NDR) or '25 GB/s' (200 Gb/s HDR).",
    )
    latency: Seconds = Field(
        default=1e-6,
        ge=0,
        description="Fixed cost per network link crossed, e.g. '1 us' (NIC and switch port "
        "latencies are below 1 us on InfiniBand; the preset says its source). NCCL's own "
        "network latency (sim.comm.nccl) times NCCL's sends and collectives.",
    )
    servers_per_leaf: int = Field(
        default=32,
        ge=1,
        description="Servers per scalable unit, i.e. per rail leaf switch (DGX SuperPOD: 20 "
        "DGX A100, 32 DGX H100).",
    )
    oversubscription: float = Field(
        default=1.0,
        ge=1.0,
        description="A leaf's downlink bandwidth over its uplink bandwidth (1: a full fat "
        "tree; 2: half as many uplinks as servers).",
    )
    technology: str = Field(
        default="", description="What the network is, e.g. 'InfiniBand NDR 400 Gb/s'."
    )
    nccl_nic_bandwidth: Bandwidth | None = Field(
        default=None,
        gt=0,
        description="The rate NCCL's graph search gives a GPU's path to its NIC: the NIC's "
        "speed, or the GPU's PCIe link when slower as NCCL reads it (gen4 x16 24 GB/s, gen5 "
        "x16 48 GB/s: NCCL src/graph/xml.h kvDictPciGen, width x speed / 80); default: "
        "nic_bandwidth. NCCL's sends and collectives cross the NIC at this rate.",
    )
    source: str = Field(
        default="",
        description="Where the figures above come from (datasheet, reference architecture, "
        "NCCL source), each figure without one labelled 'assumption'; sim hardware show "
        "prints it in its sources table. Empty: the figures are labelled an assumption.",
    )
    nccl_p2p_channels_per_peer: int | None = Field(
        default=None,
        ge=1,
        description="NCCL's p2p channels per network peer, each carrying at most 14 GB/s "
        "(sim.comm.p2p_net): 2 up to NCCL 2.28 (an overlay sets it for software that old); "
        "default: NCCL >= 2.29.2's count from nccl_nic_bandwidth (4 at 48 GB/s, 8 at 96).",
    )

    def fabric(self, servers: int, gpus_per_server: int) -> RailFatTree:
        """The :class:`~sim.hardware.fabric.RailFatTree` this describes for ``servers``."""
        return RailFatTree(
            servers,
            gpus_per_server,
            self.nic_bandwidth,
            self.latency,
            self.servers_per_leaf,
            self.oversubscription,
            self.technology,
            self.nccl_nic_bandwidth,
            self.source,
            self.nccl_p2p_channels_per_peer,
        )


class CollectiveTableSpec(BaseModel):
    """Measured times of one collective over ``ranks`` members (sim.hardware.comm_tables)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["allreduce", "all_gather", "reduce_scatter", "alltoall"] = Field(
        description="The collective (``alltoall``: a balanced all-to-all, sim.comm.alltoall)."
    )
    ranks: int = Field(ge=2, description="Communicator size it was measured with.")
    sizes: list[Bytes] = Field(
        min_length=1,
        description="Increasing message sizes, nccl-tests' B (all-reduce buffer, all-gather "
        "output, reduce-scatter input, all-to-all send buffer per rank), e.g. '1 MiB'.",
    )
    times: list[Seconds] = Field(
        min_length=1, description="Median time at each size, e.g. '120 us'."
    )
    source: str = Field(default="", description="Where and how it was measured.")
    servers: int = Field(
        default=1,
        ge=1,
        description="Servers the measured communicator spanned (1: inside one server); the "
        "table holds only for communicators of `ranks` over that many servers.",
    )

    def table(self) -> CollectiveTable:
        """The :class:`~sim.hardware.comm_tables.CollectiveTable`.

        Raises:
            ValueError: sizes not increasing or lengths differ.
        """
        return CollectiveTable(
            self.kind, self.ranks, tuple(self.sizes), tuple(self.times), self.source, self.servers
        )
