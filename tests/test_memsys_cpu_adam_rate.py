"""PatrickStar's hosts: CPU Adam scaled by DRAM bandwidth (experiments/patrickstar-{v100,a100}.yaml),
and bench_memsys's time breakdown over a hand-made event frame."""

import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _socket_Bps(channels: int, mts: float) -> float:
    """Peak DRAM bandwidth of a socket: channels x transfers/s x 8 bytes."""
    return channels * mts * 1e6 * 8


DGX2_SOCKET = 1.95e9
"""CPU-Adam params/s of a DGX-2 socket (Xeon Platinum 8168: 6 channels of DDR4-2666)."""


@pytest.mark.parametrize(
    ("experiment", "channels", "mts"),
    [
        ("patrickstar-v100.yaml", 4, 2400),  # assumed E5-2698 v4: 4 x DDR4-2400
        ("patrickstar-a100.yaml", 8, 3200),  # DGX-A100's EPYC 7742: 8 x DDR4-3200
    ],
)
def test_patrickstar_hosts_cpu_adam_is_dgx2_rate_scaled_by_dram_bandwidth(
    experiment: str, channels: int, mts: float
) -> None:
    want = DGX2_SOCKET * _socket_Bps(channels, mts) / _socket_Bps(6, 2666)
    data = yaml.safe_load((ROOT / "experiments" / experiment).read_text())
    rates = [float(h["adam_params_per_s"]) for h in data["hardware"]["hosts"]]
    assert rates == [pytest.approx(want, rel=5e-3)] * 2


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
        (1, "cpu1", "adam-s0r4", "host_optimizer", 0.75),
    ]
    frame = pd.DataFrame(rows, columns=["iteration", "device", "stream", "kind", "duration_s"])
    assert time_breakdown(frame) == {
        "compute": 5.0,
        "gpu_step": 0.25,
        "wait": 2.0,
        "host_adam": 1.5,
    }
