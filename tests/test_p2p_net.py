"""NCCL's p2p channels per network peer (sim.comm.p2p_net) and the Bridge rows that ran NCCL
before 2.29.2 (sim.runs.bridge_nccl)."""

from types import SimpleNamespace

import pytest
import simpy

from sim.comm.p2p_net import (
    channels_per_peer,
    comm_channels,
    group_channels_per_peer,
    peer_rate_Bps,
)
from sim.engine.inputs import PipelineRuntime
from sim.engine.links import Links
from sim.engine.parts import p2p_ranks
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


def _send_s(overlay: str, src: str, dst: str, nbytes: float, ranks: int = 2) -> float:
    topo = load_hardware(with_overlays("2x-dgx-b200", overlay), file="<test>")
    links = Links(simpy.Environment(), topo, [])
    route = links._path(src, dst)[0]
    return links.duration_s(src, dst, route, nbytes, True, ranks)


def test_communicator_channels_by_hand():
    # 48 GB/s: one channel at 48 >= 25 -> split in two at 24 (DupChannels), x2 (Postset) = 4,
    # 24 <= 45: no more. 96 GB/s: 2 at 48, x2 = 4, 48 > 45: x2 = 8. 24 GB/s: 1, x2 = 2.
    assert (comm_channels(48e9), comm_channels(96e9), comm_channels(24e9)) == (4, 8, 2)


def test_batched_sends_on_the_pipeline_communicator_by_hand():
    # NCCL <= 2.28 (start 2): halve while 2 x ranks > 4 x p2pnChannels.
    # 48 GB/s, p2pnChannels 4: 8 ranks 16 > 16 no -> 2; 16 ranks 32 > 16 -> 1 (16 > 16 no).
    assert group_channels_per_peer(48e9, 8, 2) == 2 and group_channels_per_peer(48e9, 16, 2) == 1
    # 96 GB/s, p2pnChannels 8: 16 ranks 32 > 32 no -> 2.
    assert group_channels_per_peer(96e9, 16, 2) == 2
    # NCCL >= 2.29.2: halve while count x ceil(ranks / 8) > p2pnChannels.
    # 48 GB/s: 4 x 1 > 4 no (8 ranks) -> 4; 16 ranks: 4 x 2 = 8 > 4 -> 2, 2 x 2 = 4 -> 2.
    assert group_channels_per_peer(48e9, 8) == 4 and group_channels_per_peer(48e9, 16) == 2
    # 96 GB/s: 16 ranks 8 x 2 = 16 > 8 -> 4, 4 x 2 = 8 -> 4.
    assert group_channels_per_peer(96e9, 16) == 4
    # two ranks (a lone send's communicator): the counts of channels_per_peer / the overlay
    for nic in (24e9, 48e9, 96e9):
        assert group_channels_per_peer(nic, 2) == channels_per_peer(nic)
        assert group_channels_per_peer(nic, 2, 2) == 2
    with pytest.raises(ValueError):
        group_channels_per_peer(48e9, 1)


def test_pipeline_send_between_servers_on_nccl_2_28_by_hand():
    # gpu0 -> gpu8: its NIC, the rail leaf, gpu8's NIC: 2 links of 1 us, NCCL rate 48 GB/s.
    assert _send_s("", "gpu0", "gpu8", 28e6) == pytest.approx(2e-6 + 28e6 / 48e9)
    assert _send_s("nccl-2.28", "gpu0", "gpu8", 28e6) == pytest.approx(2e-6 + 28e6 / 28e9)
    # inside a server (NVLink) the overlay changes nothing
    assert _send_s("nccl-2.28", "gpu0", "gpu1", 28e6) == _send_s("", "gpu0", "gpu1", 28e6)
    # batched on a 16-rank pipeline communicator: 1 channel (14 GB/s) on 2.28, 2 (28) after
    assert _send_s("nccl-2.28", "gpu0", "gpu8", 28e6, 16) == pytest.approx(2e-6 + 28e6 / 14e9)
    assert _send_s("", "gpu0", "gpu8", 28e6, 16) == pytest.approx(2e-6 + 28e6 / 28e9)


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


def _ranks(runtime: PipelineRuntime, stage_gpus: tuple[int, ...], ranks: int) -> int:
    topo = load_hardware("4x-dgx-b200", file="<test>")
    inp = SimpleNamespace(
        program=[[] for _ in range(ranks)], runtime=runtime, topology=topo,
        costs=stage_gpus, gpu_index=lambda r, s: stage_gpus[s],
    )  # fmt: skip
    return p2p_ranks(inp)  # type: ignore[arg-type]


def test_batched_pipeline_sends_use_the_groups_communicator_by_hand():
    batched = PipelineRuntime(blocking_p2p=True, batched_p2p=True)
    # 4 ranks on gpu0, gpu8, gpu16, gpu24: one per server -> the 4-rank group's communicator
    assert _ranks(batched, (0, 8, 16, 24), 4) == 4
    # 8 stages (v = 2) on those 4 ranks: still 4 ranks
    assert _ranks(batched, (0, 8, 16, 24) * 2, 4) == 4
    # two ranks on one server: not derived, the two-rank figure
    assert _ranks(batched, (0, 1, 16, 24), 4) == 2
    # lone sends (overlap_p2p_comm): PyTorch's two-rank communicator of the pair
    assert _ranks(PipelineRuntime(blocking_p2p=True), (0, 8, 16, 24), 4) == 2
