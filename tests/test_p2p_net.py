"""NCCL's p2p channels per network peer (sim.comm.p2p_net) and the Bridge rows that ran NCCL
before 2.29.2 (sim.runs.bridge_nccl)."""

import pytest
import simpy

from sim.comm.p2p_net import channels_per_peer, peer_rate_Bps
from sim.engine.links import Links
from sim.hardware.loader import load_hardware
from sim.hardware.overlay import with_overlays
from sim.runs.bridge_nccl import overlay_for


def test_channel_count_and_peer_rate_by_hand():
    # NCCL >= 2.29.2: max(1 NIC, ceil(48 / 14) = 4) -> 4; ceil(96 / 14) = 7 -> pow2 8.
    assert channels_per_peer(48e9) == 4 and channels_per_peer(96e9) == 8
    # ... so the NIC's rate stands: min(48, 4 x 14 = 56), min(96, 8 x 14 = 112).
    assert peer_rate_Bps(48e9) == 48e9 and peer_rate_Bps(96e9) == 96e9
    # NCCL <= 2.28: 2 channels x 14 GB/s = 28 GB/s on either NIC.
    assert peer_rate_Bps(48e9, 2) == 28e9 and peer_rate_Bps(96e9, 2) == 28e9
    with pytest.raises(ValueError):
        peer_rate_Bps(48e9, 0)


def _send_s(overlay: str, src: str, dst: str, nbytes: float) -> float:
    topo = load_hardware(with_overlays("2x-dgx-b200", overlay), file="<test>")
    links = Links(simpy.Environment(), topo, [])
    route, _, _ = links._path(src, dst)
    return links.duration_s(src, dst, route, nbytes, True)


def test_pipeline_send_between_servers_on_nccl_2_28_by_hand():
    # gpu0 -> gpu8: its NIC, the rail leaf, gpu8's NIC: 2 links of 1 us, NCCL rate 48 GB/s.
    assert _send_s("", "gpu0", "gpu8", 28e6) == pytest.approx(2e-6 + 28e6 / 48e9)
    assert _send_s("nccl-2.28", "gpu0", "gpu8", 28e6) == pytest.approx(2e-6 + 28e6 / 28e9)
    # inside a server (NVLink) the overlay changes nothing
    assert _send_s("nccl-2.28", "gpu0", "gpu1", 28e6) == _send_s("", "gpu0", "gpu1", 28e6)


def test_bridge_rows_before_nccl_2_29():
    assert overlay_for("26.02.01", "DeepSeekV3", "pretrain") == "nccl-2.28"
    assert overlay_for("25.09", "Qwen3_235B_a22B (tokendrop)", "pretrain") == "nccl-2.28"
    assert overlay_for("26.04", "DeepSeekV3", "pretrain") == ""  # NCCL version not known
    # Bridge raised NCCL_P2P_NET_CHUNKSIZE for these pipelines: the 14 GB/s does not hold
    assert overlay_for("25.11", "LLAMA3.1_405B", "pretrain") == ""
    assert overlay_for("26.02", "LLAMA3_70B", "pretrain") == ""
    # v0.3.1's SFT assignment overwrote the pretraining one (perf_plugins.py 461-468)
    assert overlay_for("26.02.01", "LLAMA3.1_405B", "pretrain") == "nccl-2.28"
    assert overlay_for("26.02.01", "LLAMA3_70B", "sft") == ""
