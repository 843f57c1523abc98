"""Hybrid-EP's efficiencies are the kernel-only measurements (sim.comm.ep_dispatch,
"Measurement type"): Megatron's dispatch_with_permute runs no D2D copy inside an NVLink domain,
and pipesim prices the all-gather, preprocessing, sync and permute kernels apart; across NVLink
domains it prices the copy into the RDMA buffer (sim.compute.hybridep.rdma_stage)."""

from types import SimpleNamespace

import pytest

from sim.comm.alltoall import alltoall_time_s
from sim.comm.ep_dispatch import bench_payload, dispatch_cost, efficiency
from sim.compute.moe import moe_bwd, moe_fwd
from sim.compute.moe_shape import MoEShape
from sim.hardware.loader import load_hardware
from sim.parallel.layout import ParallelLayout
from sim.runs.decoder_express import ep_domains


def test_hybridep_16_sm_point_is_the_b200_kernel_only_figure():
    # DeepEP@94a9f8f6 docs/README_Hybrid-EP.md, B200, 16 SMs, "Only Kernel Time":
    # BF16 dispatch 734.95, combine 673.84 GB/s of 900: (734.95 + 673.84) / 2 / 900.
    assert efficiency("hybridep", "blackwell", "nvl", 16) == pytest.approx(0.7826611, rel=1e-6)
    # halfway to the 32-SM GB200 kernel-only point, (764 + 737) / 2 / 900 = 0.8338889
    assert efficiency("hybridep", "blackwell", "nvl", 24) == pytest.approx(0.8082750, rel=1e-6)


def test_hybridep_rdma_point_is_the_h100_kernel_only_figure():
    # DeepEP@94a9f8f6 docs/README_Hybrid-EP.md, H100, 64 ranks, 16 SMs, "Kernel Only":
    # BF16 dispatch 49.97, combine 49.77 GB/s of CX7's 50: (49.97 + 49.77) / 2 / 50.
    assert efficiency("hybridep", "hopper", "rdma", 16) == pytest.approx(0.9974, rel=1e-9)


def test_hybridep_copies_the_input_into_the_rdma_buffer_only_across_nvlink_domains():
    # r = 3 tokens of h = 4 in bf16 (d = 2), E = 4 experts, 2 local (EP 2), fp32 [r, E] probs:
    # forward dispatch 2 * (3*4*2 + 3*4*4) = 144 bytes read + written, the combine's backward
    # (rows only) 2 * 24 = 48; none inside one NVLink domain. With expert TP 2 the probabilities
    # have etp * E = 8 columns: 2 * (24 + 3*8*4) = 240.
    def staged(domains, etp=1):
        shape = MoEShape(4, 4, 2, 8, hybridep=True, hybridep_domains=domains)
        fwd = moe_fwd(shape, 3, 3, (1.5, 1.5), 2, etp=etp)
        dx, _ = moe_bwd(shape, 3, 3, (1.5, 1.5), 2, etp=etp)
        return [k.bytes for k in fwd + dx if k.name == "hybridep_rdma_stage"]

    assert staged(2) == [144.0, 48.0]
    assert staged(2, etp=2) == [240.0, 48.0]
    assert staged(1) == []


def test_the_expert_group_spans_the_servers_its_ranks_fill():
    # Megatron's expert ranks: etp innermost, then ep; 8 GPUs per DGX, 72 per NVL72 rack.
    def domains(hardware, gpus, ep, tp, etp):
        lay = ParallelLayout(dp_replicate=gpus // tp, tp=tp, ep=ep, etp=etp)
        return ep_domains(SimpleNamespace(layout=lay, num_gpus=gpus), hardware)

    assert domains("8x-dgx-b200", 64, 64, 2, 1) == 8  # ranks 0-63
    assert domains("8x-dgx-b200", 64, 8, 1, 1) == 1  # ranks 0-7
    assert domains("8x-dgx-b200", 64, 8, 2, 2) == 2  # ranks 0, 2, ..., 14
    assert domains("gb200-nvl72", 64, 64, 1, 1) == 1


def test_hybridep_rates_count_the_benchmarks_probabilities_as_link_bytes():
    # The benchmark's tokens carry 8 local experts x R ranks fp32 per destination besides
    # 7168 bf16: 1 + 256/14336 at 8 ranks, 1 + 1152/14336 at 36 (and beyond, clamped).
    # EP 8 in a DGX B200 at 16 SMs: the same bytes take 1/1.017857 of the time they took at
    # the measured mean of dispatch 734.95 and combine 673.84 GB/s of 900 (README_Hybrid-EP.md).
    assert bench_payload(8) == pytest.approx(1 + 256 / 14336)
    assert bench_payload(36) == pytest.approx(1 + 1152 / 14336)
    assert bench_payload(72) == bench_payload(36)
    hw = load_hardware("dgx-b200")
    gpus = tuple(f"gpu{i}" for i in range(8))
    pairs = tuple(tuple(0.0 if i == j else 1e8 for j in range(8)) for i in range(8))
    lat = max(sum(lk.latency_s for lk in hw.route(a, b)) for a in gpus for b in gpus if a != b)
    link = hw.route("gpu0", "gpu1")[0].rate_Bps()
    t = alltoall_time_s(hw, gpus, pairs, dispatch_cost("hybridep", 16)) - lat
    measured = (734.95 + 673.84) / 2 / 900
    assert t == pytest.approx(7e8 / (measured * (1 + 256 / 14336) * link), rel=1e-5)
