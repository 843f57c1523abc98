"""The SMs an overlapped collective takes from compute (sim.engine.sm_share) and how many
thread blocks NCCL launches for it (sim.comm.nccl_ctas)."""

from __future__ import annotations

import pytest
import simpy

from sim.comm import nccl
from sim.comm.nccl_ctas import capability, ctas
from sim.engine.sm_share import SmShare
from sim.engine.streams import ComputeStream
from sim.hardware import load_hardware


def _span_s(work_s: float, comm_s: float, comm_ctas: int, sms: int) -> float:
    """A compute span of ``work_s`` and a collective of ``comm_s`` holding ``comm_ctas`` of
    ``sms`` SMs, both starting at 0: the span's length."""
    env = simpy.Environment()
    share = SmShare(env, {"gpu0": sms})
    stream = ComputeStream(env, [], share)

    def collective():
        share.change(["gpu0"], comm_ctas)
        yield env.timeout(comm_s)
        share.change(["gpu0"], -comm_ctas)

    env.process(collective())
    env.process(stream.run("gpu0", "compute", "B", work_s))
    env.run()
    return stream.events[-1].end_s - stream.events[-1].start_s


def test_compute_runs_on_the_sms_the_collective_leaves():
    # 20 of 100 SMs: compute at 0.8 of its speed while the collective runs.
    # Collective of 4 s under 10 s of work: 3.2 s of work done in the first 4 s, the
    # remaining 6.8 s at full speed: 10.8 s = T + C c / sm.
    assert _span_s(10.0, 4.0, 20, 100) == pytest.approx(10.8, abs=1e-6)
    # Collective of 20 s outlasting the span: all of it at 0.8: 10 / 0.8 = 12.5 s.
    assert _span_s(10.0, 20.0, 20, 100) == pytest.approx(12.5, abs=1e-6)
    # No collective: the work's own seconds.
    assert _span_s(10.0, 0.0, 20, 100) == pytest.approx(10.0)


def test_nccl_launches_one_cta_per_channel():
    # 8 servers of 8 GPUs, one 96 GB/s NIC each, sm100: NCCL 2.30.7's inter-node ring graph has
    # one channel per NIC at 96 GB/s (sm100SpeedArrayInter's top), duplicated at 48 GB/s (16
    # channels), and ncclTopoPostset doubles them: 32 CTAs; NVLS takes min(nvlsChannels 32, 32)
    # across servers.
    comm = nccl.Communicator(64, 8, 8 * 48e9, nccl.NVLINK, 10.0, nics=8, nic_Bps=96e9)
    assert ctas(comm, nccl.RING) == 32
    assert ctas(comm, nccl.NVLS) == 32
    # The same on sm90 (sm90SpeedArrayInter's top 48 GB/s; sm90+ keeps 8 channels below 50
    # GB/s): 8 graph channels, doubled by ncclTopoPostset: 16 CTAs.
    hopper = nccl.Communicator(64, 8, 8 * 48e9, nccl.NVLINK, 9.0, nics=8, nic_Bps=96e9)
    assert ctas(hopper, nccl.RING) == 16
    # One server of 8 sm90 GPUs: NVLS runs NVLS_NCHANNELS_SM90 = 16 CTAs.
    one = nccl.Communicator(8, 1, 480e9, nccl.NVLINK, 9.0, nvls=True)
    assert ctas(one, nccl.NVLS) == 16


def test_cta_count_reads_the_gpu_specs_capability_table_blackwell_left_unset():
    # One table (sim.hardware.gpu_spec.COMPUTE_CAPABILITY, NVIDIA's CUDA GPU list): B200 10.0,
    # B300 10.3, H100 9.0. The DGX B200/B300 presets leave the GPU's field unset (their
    # collectives are not timed by NCCL's tuner), yet their CTAs are counted as sm100's.
    for preset, model_cc in (("dgx-b200", 10.0), ("dgx-b300", 10.3), ("dgx-h100", 9.0)):
        gpu = load_hardware(preset).gpus[0]
        assert capability(gpu.model) == model_cc
        assert gpu.compute_capability == (9.0 if preset == "dgx-h100" else None)
    assert capability("MI300X") is None
