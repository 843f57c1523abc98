"""CPU Adam's rate read from ZeRO-Offload's Table 4 and scaled by DRAM bandwidth to the presets'
CPUs (sim.memory.host_adam), and bench_memsys's time breakdown over a hand-made event frame."""

import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _socket_Bps(channels: int, mts: float) -> float:
    """Peak DRAM bandwidth of a socket: channels x transfers/s x 8 bytes."""
    return channels * mts * 1e6 * 8


def test_rate_from_latencies_is_the_least_squares_slope_through_the_origin() -> None:
    from sim.memory.host_adam import REN_TABLE4, rate_from_latencies

    # hand-computed: t = p / r exactly for r = 2e9 gives r back; Table 4's five rows give
    # sum(p^2) / sum(p t) = 185e18 / 50.34e9
    assert rate_from_latencies([(1e9, 0.5), (4e9, 2.0)]) == pytest.approx(2e9)
    assert rate_from_latencies(REN_TABLE4) == pytest.approx(185e18 / 50.34e9)
    with pytest.raises(ValueError):
        rate_from_latencies([])


DGX2_SOCKET = 185e18 / 50.34e9 / 2
"""CPU-Adam params/s of a DGX-2 socket (Xeon Platinum 8168: 6 channels of DDR4-2666), from
ZeRO-Offload's Table 4 (the hand-computed least squares above)."""


@pytest.mark.parametrize(
    ("preset", "channels", "mts"),
    [
        ("dgx2-v100", 6, 2666),  # Xeon Platinum 8168: 6 x DDR4-2666
        ("dgx1-v100-16gb", 4, 2400),  # E5-2698 v4: 4 x DDR4-2400
        ("dgx-a100-40gb", 8, 3200),  # EPYC 7742: 8 x DDR4-3200
        ("dgx-a100-80gb", 8, 3200),
        ("dgx-h100", 8, 4800),  # Xeon Platinum 8480C: 8 x DDR5-4800
        ("dgx-b200", 8, 5600),  # Xeon Platinum 8570: 8 x DDR5-5600
    ],
)
def test_preset_cpu_adam_is_dgx2_rate_scaled_by_dram_bandwidth(
    preset: str, channels: int, mts: float
) -> None:
    want = DGX2_SOCKET * _socket_Bps(channels, mts) / _socket_Bps(6, 2666)
    data = yaml.safe_load((ROOT / "sim" / "hardware" / "presets" / f"{preset}.yaml").read_text())
    rates = [float(h["adam_params_per_s"]) for h in data["hosts"]]
    assert rates == [pytest.approx(want, rel=5e-3)] * 2


def test_patrickstar_v100_host_is_a_dgx2_socket() -> None:
    """The WeChat Yard node's CPU is not published; its affinity shows 2 sockets of 24 cores
    with 2 threads each, as the DGX-2's Xeon Platinum 8168 (6 x DDR4-2666), so its hosts take
    that socket's Table-4 rate (an assumption; the DGX-1's 20-core E5-2698 v4 is ruled out)."""
    data = yaml.safe_load((ROOT / "experiments" / "patrickstar-v100.yaml").read_text())
    rates = [float(h["adam_params_per_s"]) for h in data["hardware"]["hosts"]]
    assert rates == [pytest.approx(DGX2_SOCKET, rel=5e-3)] * 2


def test_time_breakdown_sums_the_last_iteration_by_kind() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks" / "accuracy"))
    from bench_memsys import time_breakdown

    rows = [  # (iteration, device, stream, kind, seconds)
        (0, "gpu0", "compute", "compute", 9.0),  # an earlier iteration: left out
        (1, "gpu0", "compute", "stall", 2.0),
        (1, "gpu0", "compute", "compute", 1.5),
        (1, "gpu0", "compute", "recompute", 0.5),
        (1, "gpu0", "compute", "compute", 3.0),
        (1, "gpu0", "compute", "optimizer", 0.25),
        (1, "gpu0", "comm", "all_gather", 2.0),  # not on the compute stream
        (1, "gpu1", "compute", "compute", 7.0),  # another GPU
        (1, "cpu0", "adam-s0r0", "host_optimizer", 0.75),
        (1, "cpu0", "adam-s0r0", "host_optimizer", 0.5),
        (1, "cpu1", "adam-s0r4", "host_optimizer", 0.75),  # another rank: left out
    ]
    columns = ["iteration", "device", "stream", "kind", "duration_s"]
    frame = pd.DataFrame(rows, columns=columns)
    frame = frame.assign(
        stage=0,
        replica=frame.stream.str.removeprefix("adam-s0r").map(
            lambda r: int(r) if r.isdigit() else 0
        ),
    )
    assert time_breakdown(frame) == {
        "compute": 5.0,
        "gpu_step": 0.25,
        "wait": 2.0,
        "host_adam": 1.25,
    }


def test_patrickstar_cpu_adam_streams_16_bit_gradients() -> None:
    """PatrickStar's CPU Adam (cpu_adam.cpp ``Step`` with ``grad_half_precision``) loads each
    gradient as 2 bytes and loads and stores the fp32 weight, momentum and variance (24 bytes):
    26 bytes per element, against the 28 of DeepSpeed's loop with fp32 gradients whose rate
    Table 4 gives. Hand-computed: a host whose DeepSpeed CPU Adam runs 1e9 params/s streams
    28e9 B/s, so 2.8e9 elements at 26 bytes take 72.8e9 / 28e9 = 2.6 s."""
    from sim.memory.chunk_step import HOST_ADAM_BYTES, host_adam_s

    assert HOST_ADAM_BYTES == 2 + 3 * 4 + 3 * 4
    assert host_adam_s(2.8e9, 1e9) == pytest.approx(2.6)
