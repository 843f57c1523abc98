"""Expert-parallel dispatch and combine by DeepEP's and Hybrid-EP's kernels, as their authors
measured them.

DeepEP (deepseek-ai/DeepEP) and Hybrid-EP (NVIDIA's, DeepEP branch ``hybrid-ep``; Megatron-Core's
``flex`` dispatcher backends) move a rank's routed tokens with their own kernels on a few SMs,
over NVLink inside a server (or an NVL72 rack) and RDMA between servers. Their READMEs report a
*bottleneck bandwidth*: the bytes one GPU moves over its NVLink (or its NIC) divided by the
kernel's time. The cost of an all-to-all (:data:`~sim.comm.alltoall.AllToAllCost`) is then
``max over ranks and directions of (NVLink bytes / (e_nvl x R_nvl), RDMA bytes / (e_rdma x
R_nic))`` plus the routes' latency, where a rank's NVLink bytes are what it sends to (or
receives from) the members its route reaches without a network link, ``R`` the rate of the
first (last) link of those routes, and ``e`` the measured bandwidth over the measuring system's
link rate (:data:`MEASURED`): an efficiency carried to other GPUs of the same kind (an
assumption). Measurements (the project's ``research/gpus/microbench.md`` §4 quotes them):

* DeepEP normal kernels on H800 (NVLink ~160 GB/s, CX7 400 Gb/s ~50 GB/s), 20 SMs:
  intranode EP 8 dispatch 153 GB/s, combine 158 GB/s; internode EP 16 43 / 43, EP 32 58 / 57,
  EP 64 51 / 50 GB/s (DeepEP ``README.md`` at 2be0d4f, now ``docs/legacy.md``);
* DeepEP (torch API) on B200, EP 8, 16 / 32 SMs: BF16 dispatch 348 / 619, combine 302 / 524
  GB/s; Hybrid-EP at 16 SMs, "Only Kernel Time", 734.95 / 673.84 (DeepEP@94a9f8f6
  ``docs/README_Hybrid-EP.md``; B200 NVLink 900 GB/s per direction; the same table's "Torch
  API" 535.94 / 530.86 is not used: *measurement type* below);
* Hybrid-EP on GB200 NVL72, kernel only, 16 / 32 SMs: 8 ranks BF16 dispatch 750 / 764,
  combine 684 / 737; 36 ranks 613 / 632 and 543 / 597 GB/s (same file);
* Hybrid-EP on H100 with IB (CX7 400 Gb/s), 64 ranks, 16 SMs, "Kernel Only": BF16 dispatch
  49.97, combine 49.77 GB/s (the RDMA row; the same table's "Torch API" 41.24 / 46.57 is not
  used: *measurement type* below).

**Measurement type.** Hybrid-EP's tables give two types. "Torch API" times the whole Python call
with CUDA events; "Only Kernel Time" takes the ``dispatch_kernel`` / ``combine_kernel`` from a
Kineto trace. The B200 table came in with deepseek-ai/DeepEP@6ad6896 (2025-09-25), when the
benchmark (``tests/test_mnnvlink_hybridep.py`` lines 187-199) timed ``buffer.dispatch`` without a
handle. That call scatters the top-k to a routing map, all-gathers it, runs the preprocessing
kernel, syncs on ``.item()`` (``deep_ep/hybrid_ep_buffer.py`` lines 143-219), runs the dispatch
kernel and then D2D-copies the received rows and probabilities out of the NVLink buffer
(``csrc/hybrid_ep.cu`` lines 419-462). The combine D2D-copies its input into the buffer first
(lines 662-672). At 94a9f8f6 the test still labels the type that way (``tests/test_hybrid_ep.py``
lines 359-366: ``dispatch_kernel + d2d + misc``). Megatron-Core calls ``dispatch_with_permute`` /
``combine_with_unpermute`` (NVIDIA/Megatron-LM@d98e8a64 ``fused_a2a.py`` lines 419-435, 454-460,
489-494, 507-514). Inside one NVLink domain these run no D2D copy: the permute kernel reads the
NVLink buffer straight into the experts' layout, and the unpermute kernel writes into the combine
buffer (DeepEP@94a9f8f6 ``executor/executor.cu`` ``dispatch_postprocess`` lines 309-387,
``combine_preprocess`` lines 389-431; at a484936 line 219 the code comment says "Use permute kernel
to avoid standalone D2D memory copy"). pipesim prices the all-gather, the preprocessing, the sync
and the permute kernels apart (:mod:`sim.compute.hybridep`). The kernel-only figure is therefore
the one that counts each piece once, and every Hybrid-EP row here is kernel-only. The H100 RDMA
table came in with deepseek-ai/DeepEP@1dddd19 (2025-11-18, ``docs/Hybrid-EP_Implementation.md``),
whose ``tests/test_hybrid_ep.py`` times the "Torch API" the same way (lines 256-257 and 271-272:
``buffer.dispatch`` / ``buffer.combine`` without a handle) and the kernel-only figure from the
trace's ``dispatch_kernel`` / ``combine_kernel`` (lines 314-322). Across NVLink domains
(``num_of_nodes > 1``: the group over the ranks per NVLink domain, ``deep_ep/hybrid_ep_buffer.py``
line 83 at 94a9f8f6), ``Executor::dispatch_preprocess`` (``executor/executor.cu`` lines 183-217 at
94a9f8f6) ``cudaMemcpyAsync``-copies the input rows, and with probabilities
(``forward_dispatch_api``) the fp32 probabilities, into the RDMA buffer before the dispatch kernel;
``dispatch_with_permute`` calls it (``csrc/hybrid_ep/hybrid_ep.cu`` lines 323-324), so Megatron's
path runs it. That copy is a memory-bound kernel on the sending rank, priced apart
(:func:`sim.compute.hybridep.rdma_stage`), not in this module's rate.

**Probabilities in the measured bytes.** Both kernels of these benchmarks carried fp32
probabilities (``dispatch`` with ``topk_weights``, ``combine`` with the dispatched probs:
deepseek-ai/DeepEP@41cad94 ``tests/test_hybrid_ep.py`` lines 313-319 and 396-401), each token
with its NVLink domain's ``experts_per_rank x ranks_per_node`` of them to every destination
(:func:`sim.compute.hybridep.dispatch_payload`), while the bandwidth counts the hidden bytes
alone. Hybrid-EP's link bytes per counted byte were therefore
:func:`bench_payload`: ``1 + 4 x 8 x R / (7168 x 2)`` (8 local experts, hidden 7168 in bf16,
``R`` ranks per domain: 8 in the B200 and H100 tables, 8 to 36 in the GB200 one), and its
efficiencies here are of link bytes: the measured figure times that. Each Hybrid-EP
exchange then brings its own payload in its pairs (the forward dispatch its probabilities,
:mod:`sim.parallel.decoder_comm`; the combine none). Assumption: the combine's probabilities
(the dispatch's backward in training) are as many as the dispatch's.

Dispatch and combine run at different rates; a :class:`~sim.parallel.ops.GroupOp` does not
say which it is, so the mean of the two is used (an assumption). Hybrid-EP's NVLink efficiency
on Blackwell is the 8-rank one scaled by its measured fall with the group's ranks inside the
NVLink domain (:mod:`sim.comm.hybridep_ranks`: 0.819 at 36 ranks, 32 SMs).

**Each token once per destination.** These kernels send a token once to every rank that holds
at least one of its experts (``is_token_in_rank``; the receiving rank expands it to its local
experts), and between servers once to every server (``is_token_in_rdma_rank``; forwarded over
NVLink inside it). Their benchmarks count exactly those bytes: DeepEP's tests take
``recv_x.numel() * 2`` (one row per token and receiving rank) as NVLink bytes and
``num_rdma_token_sent * hidden * 2`` (one per token and remote server) as RDMA bytes
(deepseek-ai/DeepEP ``tests/test_intranode.py``, ``tests/test_internode.py``; Hybrid-EP's
``dispatched_hidden.numel() * 2``), so the measured bandwidths are of those bytes. An
all-to-all whose pairs are the routed copies of balanced top-``k`` routing over ``E`` experts
(:attr:`~sim.parallel.ops.GroupOp.routed`) therefore moves, from a rank to a group of ``m`` of
the destination's experts (a rank's, or a remote server's), the share of tokens that choose at
least one of them: ``1 - C(E - m, k) / C(E, k)`` (``k`` distinct experts drawn uniformly:
Megatron-Bridge's performance recipes route with ``moe_router_force_load_balancing``, random
logits; :func:`hit_share`), where the copies count ``k m / E`` rows per token. A pair's bytes
are scaled by that ratio: per rank inside a server (NVLink), per server between servers (RDMA;
the NVLink forwarding inside the receiving server runs beside it and is not counted).
Megatron-Core's ``alltoall`` dispatcher sends every copy (NCCL: :mod:`sim.comm.alltoall`).
Group-limited routing (DeepSeek-V3's ``moe_router_group_topk``) would reach fewer servers and
is not modelled (uniform routing over all experts).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from sim.comm.alltoall import routed_pairs
from sim.comm.hybridep_ranks import rank_factor
from sim.hardware.formats import FP32_BYTES
from sim.hardware.topology import Topology

NETWORK = "network"


@dataclass(frozen=True)
class Measured:
    """One published measurement of a dispatcher.

    Attributes:
        backend: ``deepep`` or ``hybridep``.
        family: the GPU family it ran on (``hopper``, ``blackwell``).
        link: ``nvl`` or ``rdma``.
        sms: SMs the kernels used.
        dispatch_Bps, combine_Bps: bottleneck bandwidths measured.
        link_Bps: the link rate they are a share of (per direction).
        source: where.
    """

    backend: str
    family: str
    link: str
    sms: int
    dispatch_Bps: float
    combine_Bps: float
    link_Bps: float
    source: str

    @property
    def efficiency(self) -> float:
        """Mean of dispatch and combine over the link rate."""
        return (self.dispatch_Bps + self.combine_Bps) / 2 / self.link_Bps


_GB = 1e9
_DEEPEP = "deepseek-ai/DeepEP README.md @2be0d4f (docs/legacy.md @dd758caf)"
_HYBRID = "deepseek-ai/DeepEP@94a9f8f6 docs/README_Hybrid-EP.md"
MEASURED: tuple[Measured, ...] = (  # Hybrid-EP rows: kernel only (module doc)
    Measured("deepep", "hopper", "nvl", 20, 153 * _GB, 158 * _GB, 160 * _GB, _DEEPEP),
    Measured("deepep", "hopper", "rdma", 20, 51 * _GB, 50 * _GB, 50 * _GB, _DEEPEP + " (EP 64)"),
    Measured("deepep", "blackwell", "nvl", 16, 348 * _GB, 302 * _GB, 900 * _GB, _HYBRID),
    Measured("deepep", "blackwell", "nvl", 32, 619 * _GB, 524 * _GB, 900 * _GB, _HYBRID),
    Measured("hybridep", "blackwell", "nvl", 16, 734.95 * _GB, 673.84 * _GB, 900 * _GB, _HYBRID),
    Measured("hybridep", "blackwell", "nvl", 32, 764 * _GB, 737 * _GB, 900 * _GB, _HYBRID),
    Measured("hybridep", "hopper", "rdma", 16, 49.97 * _GB, 49.77 * _GB, 50 * _GB, _HYBRID),
)
"""The measurements (module doc); ``hopper`` rows stand for H100/H200/H800, ``blackwell`` for
B200/B300/GB200/GB300 (an assumption for the GPUs not measured)."""


def efficiency(backend: str, family: str, link: str, sms: int) -> float:
    """The measured efficiency of ``backend`` on ``link`` for a GPU ``family`` at ``sms``
    SMs: linear between the two measurements around ``sms`` (the nearest outside them); the
    other family's where this one has none for the link; DeepEP's where the backend has none.

    Example:
        >>> round(efficiency("deepep", "blackwell", "nvl", 20), 3)
        0.43
    """
    rows = [m for m in MEASURED if m.backend == backend and m.link == link]
    rows = rows or [m for m in MEASURED if m.backend == "deepep" and m.link == link]
    mine = [m for m in rows if m.family == family] or rows
    mine = sorted(mine, key=lambda m: m.sms)
    lo = [m for m in mine if m.sms <= sms]
    hi = [m for m in mine if m.sms >= sms]
    if not lo:
        return hi[0].efficiency
    if not hi:
        return lo[-1].efficiency
    a, b = lo[-1], hi[0]
    if a.sms == b.sms:
        return a.efficiency
    w = (sms - a.sms) / (b.sms - a.sms)
    return a.efficiency + w * (b.efficiency - a.efficiency)


BENCH_ROW_BYTES = 7168 * 2
"""Bytes of a token's row in Hybrid-EP's benchmark (``HIDDEN_DIM`` 7168 in bf16,
DeepEP@41cad94 ``tests/test_hybrid_ep.py`` line 12)."""
BENCH_LOCAL_EXPERTS = 8
"""Experts per rank in Hybrid-EP's benchmark (``NUM_LOCAL_EXPERTS``, same file line 16)."""
BENCH_PROB_BYTES = FP32_BYTES
"""Bytes of one routing probability the benchmark carried: fp32 ``topk_weights`` (same file
lines 313-319), as HybridEP requires (:data:`sim.compute.hybridep.PROB_BYTES`)."""


def bench_payload(ranks: int) -> float:
    """Bytes Hybrid-EP's benchmark moved per counted byte with ``ranks`` ranks per NVLink
    domain (clamped to the 8 to 36 measured): ``1 + 4 x 8 x R / 14336`` (module doc).

    Example:
        >>> round(bench_payload(8), 4), round(bench_payload(64), 4)
        (1.0179, 1.0804)
    """
    r = min(max(ranks, 8), 36)
    return 1.0 + BENCH_PROB_BYTES * BENCH_LOCAL_EXPERTS * r / BENCH_ROW_BYTES


def family_of(topology: Topology, gpu: str) -> str:
    """``blackwell`` or ``hopper`` (the default) from the GPU's name (B200, GB200, B300 ...)."""
    name = topology.gpu(int(gpu[3:])).model.upper() if gpu.startswith("gpu") else ""
    return "blackwell" if "B200" in name or "B300" in name else "hopper"


def hit_share(experts: int, top_k: int, held: int) -> float:
    """Share of tokens that choose at least one of ``held`` given experts when each picks
    ``top_k`` distinct of ``experts`` uniformly: ``1 - C(E - m, k) / C(E, k)`` (module doc).

    Example:
        >>> round(hit_share(4, 2, 2), 4)  # 1 - C(2, 2) / C(4, 2) = 1 - 1/6
        0.8333
    """
    return 1.0 - math.comb(experts - held, top_k) / math.comb(experts, top_k)


def dedup_scales(
    topology: Topology, gpus: Sequence[str], routed: tuple[int, int] | None
) -> tuple[float, list[float]]:
    """``(inside a server, per member)``: the factors turning routed copies into the bytes a
    deduplicating dispatcher moves (module doc), ``hit_share(E, k, m) / (k m / E)`` with ``m``
    the experts of a rank (NVLink pairs), and for each member the factor of its server's
    experts (the network pairs that reach it); 1 without ``routed``."""
    n = len(gpus)
    if routed is None:
        return 1.0, [1.0] * n
    experts, k = routed
    per = experts // n

    def scale(m: int) -> float:
        return hit_share(experts, k, m) / (k * m / experts)

    servers = [topology.server_of(int(g[3:])) for g in gpus]
    return scale(per), [scale(per * servers.count(s)) for s in servers]


def nvlink_members(topology: Topology, gpus: Sequence[str]) -> int:
    """Members of the group in the first member's server (its NVLink domain: an NVL72 rack is
    one server), the ranks :func:`~sim.comm.hybridep_ranks.rank_factor` takes."""
    first = topology.server_of(int(gpus[0][3:]))
    return sum(1 for g in gpus if topology.server_of(int(g[3:])) == first)


def dispatch_cost(backend: str, sms: int, routed: tuple[int, int] | None = None):
    """The all-to-all cost (:data:`~sim.comm.alltoall.AllToAllCost`) of ``backend``'s kernels
    on ``sms`` SMs (module doc); ``routed``: ``(experts, top_k)`` where the pairs are routed
    copies (:attr:`~sim.parallel.ops.GroupOp.routed`), sent once per rank and per server."""

    def cost(topology: Topology, gpus: Sequence[str], pairs) -> float:
        fam = family_of(topology, gpus[0])
        eff = {link: efficiency(backend, fam, link, sms) for link in ("nvl", "rdma")}
        if backend == "hybridep":  # link bytes per counted byte of its benchmark (module doc)
            ranks = nvlink_members(topology, gpus) if fam == "blackwell" else 8
            eff["nvl"] *= bench_payload(ranks)
            eff["rdma"] *= bench_payload(8)
        if backend == "hybridep" and fam == "blackwell":  # more NVLink peers: hybridep_ranks
            eff["nvl"] *= rank_factor(nvlink_members(topology, gpus), sms)
        n, worst, latency = len(gpus), 0.0, 0.0
        sent = [[0.0, 0.0] for _ in range(n)]  # [nvl seconds, rdma seconds] per rank
        got = [[0.0, 0.0] for _ in range(n)]
        rank_scale, server_scale = dedup_scales(topology, gpus, routed)
        for i, j, nb, route in routed_pairs(topology, gpus, pairs):
            net = [lk for lk in route if lk.kind == NETWORK]
            k = 1 if net else 0
            nb *= server_scale[j] if net else rank_scale
            out_rate = (net[0] if net else route[0]).rate_Bps()
            in_rate = (net[-1] if net else route[-1]).rate_Bps()
            e = eff["rdma" if net else "nvl"]
            sent[i][k] += nb / (e * out_rate)
            got[j][k] += nb / (e * in_rate)
            latency = max(latency, sum(lk.latency_s for lk in route))
        for row in (*sent, *got):
            worst = max(worst, *row)
        return worst + (latency if worst > 0 else 0.0)

    return cost
