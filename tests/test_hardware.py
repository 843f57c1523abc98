"""Hardware presets and loader: the DGX-1 link matrix, routes, units and input errors.

Reference numbers come from /work/shared/reference/hardware.md (section given per test).
"""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from sim.errors import InputError
from sim.hardware import (
    describe_topology,
    list_presets,
    load_hardware,
    load_hardware_spec,
    topology_to_dict,
)
from sim.hardware.interconnect_spec import LinkSpec
from sim.hardware.loader import list_calibrated

GB = 1e9
GIB = 2.0**30

# hardware.md §3.1, `nvidia-smi topo -m` of an 8x V100-SXM2 DGX-1 (copied verbatim).
DGX1_MATRIX = """
GPU0     X   NV1  NV1  NV2  NV2  SYS  SYS  SYS
GPU1    NV1   X   NV2  NV1  SYS  NV2  SYS  SYS
GPU2    NV1  NV2   X   NV2  SYS  SYS  NV1  SYS
GPU3    NV2  NV1  NV2   X   SYS  SYS  SYS  NV1
GPU4    NV2  SYS  SYS  SYS   X   NV1  NV1  NV2
GPU5    SYS  NV2  SYS  SYS  NV1   X   NV2  NV1
GPU6    SYS  SYS  NV1  SYS  NV1  NV2   X   NV2
GPU7    SYS  SYS  SYS  NV1  NV2  NV1  NV2   X
"""
NV2_PAIRS = {(0, 3), (0, 4), (1, 2), (1, 5), (2, 3), (4, 7), (5, 6), (6, 7)}
NV1_PAIRS = {(0, 1), (0, 2), (1, 3), (2, 6), (3, 7), (4, 5), (4, 6), (5, 7)}
DGX1 = ["dgx1-v100-16gb", "dgx1-v100-32gb"]

MIB = 2.0**20
# (GPUs, GPU memory bytes as CUDA reports them, total host DRAM bytes): hardware.md §3, §5;
# the CUDA-reported totals and their sources are in sim.hardware.capacity.CUDA_TOTAL_MIB.
EXPECTED = {
    "dgx1-v100-16gb": (8, 16160 * MIB, 512 * GIB),
    "dgx1-v100-32gb": (8, 32480 * MIB, 512 * GIB),
    "dgx2-v100": (16, 32480 * MIB, 1536 * GIB),
    "dgx-a100-40gb": (8, 40339 * MIB, 1024 * GIB),
    "dgx-a100-80gb": (8, 81050 * MIB, 2e12),
    "dgx-h100": (8, 81559 * MIB, 2e12),
    "dgx-h200": (8, 143155 * MIB, 2e12),
    "dgx-b200": (8, 182642 * MIB, 2e12),
    "hgx-a800-80gb": (8, 81050 * MIB, 1e12),
    "pcie-8gpu": (8, 24217 * MIB, 512 * GIB),
    "gb200-nvl72": (72, 189471 * MIB, 36 * 480e9),
    "grand-teton-h100": (8, 81559 * MIB, 2e12),
    "grand-teton-h100-96gb": (8, 94 * GIB, 2e12),
    "dgx-b300": (8, 274115 * MIB, 2e12),
    "gb300-nvl72": (72, 284208 * MIB, 36 * 472e9),
    "gh200-96gb": (1, 96e9, 512e9),
}


def nvlink_counts(preset: str) -> dict[tuple[int, int], int]:
    spec = load_hardware_spec(preset)
    out = {}
    for lk in spec.links:
        if lk.kind == "nvlink":
            a, b = sorted(int(n.removeprefix("gpu")) for n in (lk.a, lk.b))
            assert not lk.directed and (a, b) not in out
            out[(a, b)] = lk.count
    return out


CALIBRATED = {"cpu-2rank": 2}
"""Shipped descriptions written by ``sim calibrate`` (measured on this project's VM), not GPU
servers: their sizes are measurements, not datasheet figures."""


def test_presets_are_the_expected_ones():
    assert set(list_presets()) == set(EXPECTED)
    assert set(list_calibrated()) == set(CALIBRATED)


@pytest.mark.parametrize("preset", sorted(CALIBRATED))
def test_calibrated_descriptions_load_and_round_trip(preset):
    topo = load_hardware(preset)
    assert topo.num_gpus == CALIBRATED[preset]
    assert all(g.memory_bytes > 0 for g in topo.gpus)
    for a, b in itertools.permutations(topo.gpus, 2):
        assert topo.route_bandwidth_Bps(a.name, b.name) > 0
    stored = json.loads(json.dumps(topology_to_dict(topo)))
    assert load_hardware(stored) == topo


@pytest.mark.parametrize("preset", sorted(EXPECTED))
def test_every_preset_loads_with_reference_sizes(preset):
    topo = load_hardware(preset)
    gpus, memory, dram = EXPECTED[preset]
    assert topo.name == preset and topo.num_gpus == gpus
    assert all(g.memory_bytes == memory for g in topo.gpus)
    assert topo.host_dram_bytes == pytest.approx(dram * 63 / 64)  # MemTotal: less the page map
    assert "§" in topo.description and "unverified" in topo.description
    for a, b in itertools.permutations(topo.gpus, 2):
        assert topo.route_bandwidth_Bps(a.name, b.name) > 0
    # The stored form is itself a hardware description that loads back to the same topology.
    stored = json.loads(json.dumps(topology_to_dict(topo)))
    assert load_hardware(stored) == topo


@pytest.mark.parametrize("preset", DGX1)
def test_dgx1_nvlink_matrix_is_the_reference_one(preset):
    counts = nvlink_counts(preset)
    rows = [line.split()[1:] for line in DGX1_MATRIX.strip().splitlines()]
    for i, j in itertools.combinations(range(8), 2):
        want = {"NV1": 1, "NV2": 2, "SYS": 0}[rows[i][j]]
        assert rows[j][i] == rows[i][j]
        assert counts.get((i, j), 0) == want, (i, j)
    assert {p for p, c in counts.items() if c == 2} == NV2_PAIRS
    assert {p for p, c in counts.items() if c == 1} == NV1_PAIRS
    for gpu in range(8):
        assert sum(c for p, c in counts.items() if gpu in p) == 6
    assert sum(1 for p in itertools.combinations(range(8), 2) if p not in counts) == 12
    assert sum(counts.values()) == 24


# PatrickStar's WeChat Yard node (experiments/patrickstar-v100.yaml): `nvidia-smi topo -m` in
# Tencent/PatrickStar@e418c95 doc/yard_network_fabric.md (GPU columns; CPU affinity 0-23,48-71
# for GPU0-3, 24-47,72-95 for GPU4-7).
YARD_MATRIX = """
GPU0   X   NV1  NV2  NV1  SYS  SYS  SYS  NV2
GPU1  NV1   X   NV1  NV2  SYS  SYS  NV2  SYS
GPU2  NV2  NV1   X   NV2  SYS  NV1  SYS  SYS
GPU3  NV1  NV2  NV2   X   NV1  SYS  SYS  SYS
GPU4  SYS  SYS  SYS  NV1   X   NV2  NV2  NV1
GPU5  SYS  SYS  NV1  SYS  NV2   X   NV1  NV2
GPU6  SYS  NV2  SYS  SYS  NV2  NV1   X   NV1
GPU7  NV2  SYS  SYS  SYS  NV1  NV2  NV1   X
"""
YARD_TO_DGX1 = (0, 1, 3, 2, 6, 7, 5, 4)
"""Yard GPU ``i`` is the DGX-1 preset's GPU ``YARD_TO_DGX1[i]`` (found by hand from the NV2 pairs)."""


def test_yard_node_is_the_dgx1_cube_mesh_renumbered():
    """The Yard node's NVLink matrix is the dgx1 preset's up to GPU numbering, sockets kept:
    every pair has the same NV1/NV2/no-link count under ``YARD_TO_DGX1``."""
    counts = nvlink_counts("dgx1-v100-32gb")
    hosts = load_hardware_spec("dgx1-v100-32gb").gpu_hosts
    rows = [line.split()[1:] for line in YARD_MATRIX.strip().splitlines()]
    assert sorted(YARD_TO_DGX1) == list(range(8))
    for i, j in itertools.combinations(range(8), 2):
        want = {"NV1": 1, "NV2": 2, "SYS": 0}[rows[i][j]]
        assert rows[j][i] == rows[i][j]
        a, b = sorted((YARD_TO_DGX1[i], YARD_TO_DGX1[j]))
        assert counts.get((a, b), 0) == want, (i, j)
    assert hosts is not None
    assert [hosts[YARD_TO_DGX1[i]] for i in range(8)] == ["cpu0"] * 4 + ["cpu1"] * 4


@pytest.mark.parametrize("preset", DGX1)
def test_dgx1_link_bandwidths_are_24_GBps_per_nvlink(preset):
    topo = load_hardware(preset)
    for (a, b), count in nvlink_counts(preset).items():
        for src, dst in ((a, b), (b, a)):
            link = topo.direct_link(f"gpu{src}", f"gpu{dst}")
            assert link.kind == "nvlink" and link.bandwidth_Bps == count * 24 * GB
    for a, b in itertools.combinations(range(8), 2):
        if (a, b) not in NV1_PAIRS | NV2_PAIRS:
            assert topo.direct_link(f"gpu{a}", f"gpu{b}") is None


def test_dgx1_pair_without_nvlink_goes_through_host_memory():
    """A p2p pair uses only its own GPUs: gpu0 and gpu5 (no NVLink, different sockets) go
    through PCIe, both sockets and QPI; relaying over NVLink needs a GPU of the communicator."""
    topo = load_hardware("dgx1-v100-16gb")
    route = topo.route("gpu0", "gpu5")
    assert [lk.name for lk in route] == [
        "gpu0->sw0",
        "sw0->cpu0",
        "cpu0->cpu1",
        "cpu1->sw2",
        "sw2->gpu5",
    ]
    assert topo.route_bandwidth_Bps("gpu0", "gpu5") == 12.5 * GB  # the shared switch uplink
    relayed = topo.route("gpu0", "gpu5", within=frozenset({"gpu0", "gpu1", "gpu5"}))
    assert [lk.name for lk in relayed] == ["gpu0->gpu1", "gpu1->gpu5"]


def test_dgx1_route_prefers_direct_nvlink():
    topo = load_hardware("dgx1-v100-16gb")
    assert [lk.name for lk in topo.route("gpu0", "gpu1")] == ["gpu0->gpu1"]
    everyone = frozenset(g.name for g in topo.gpus)
    assert (
        max(
            len(topo.route(f"gpu{a}", f"gpu{b}", within=everyone))
            for a, b in itertools.permutations(range(8), 2)
        )
        <= 2
    )


@pytest.mark.parametrize("preset", DGX1)
def test_dgx1_gpu_pairs_share_a_switch_uplink(preset):
    topo = load_hardware(preset)
    assert [g.host for g in topo.gpus] == ["cpu0"] * 4 + ["cpu1"] * 4
    up = {g.name: topo.route(g.name, g.host) for g in topo.gpus}
    down = {g.name: topo.route(g.host, g.name) for g in topo.gpus}
    for pair, switch, host in (
        ((0, 1), "sw0", "cpu0"),
        ((2, 3), "sw1", "cpu0"),
        ((4, 5), "sw2", "cpu1"),
        ((6, 7), "sw3", "cpu1"),
    ):
        for i in pair:
            assert [lk.name for lk in up[f"gpu{i}"]] == [f"gpu{i}->{switch}", f"{switch}->{host}"]
            assert [lk.name for lk in down[f"gpu{i}"]] == [f"{host}->{switch}", f"{switch}->gpu{i}"]
    assert up["gpu0"][-1] is up["gpu1"][-1]  # the same shared uplink object
    assert up["gpu0"][-1].name != up["gpu2"][-1].name
    assert topo.route_bandwidth_Bps("gpu0", "cpu0") == 12.5 * GB  # §3.1, §4: ~12-13 GB/s
    assert topo.direct_link("cpu0", "cpu1").kind == "qpi"


def test_pcie_8gpu_peer_traffic_goes_through_host():
    topo = load_hardware("pcie-8gpu")
    assert all(lk.kind in ("pcie", "xgmi") for lk in topo.links)
    for a, b in itertools.permutations(topo.gpus, 2):
        route = topo.route(a.name, b.name)
        inner = [lk.dst for lk in route[:-1]]
        assert a.host in inner and b.host in inner
        assert not any(n.startswith("gpu") for n in inner)
        assert 20 * GB <= topo.route_bandwidth_Bps(a.name, b.name) <= 22.4 * GB  # nccl#814
    same_switch = topo.route("gpu0", "gpu1")
    assert [lk.name for lk in same_switch][1:3] == ["sw0-up->cpu0", "cpu0->sw0-down"]


@pytest.mark.parametrize(
    ("preset", "gbps"),
    [
        ("dgx2-v100", 144),
        ("dgx-a100-40gb", 265),
        ("dgx-a100-80gb", 265),
        ("dgx-h100", 375),
        ("dgx-h200", 375),
    ],
)
def test_nvswitch_presets_route_every_pair_through_the_switch(preset, gbps):
    topo = load_hardware(preset)
    for a, b in itertools.permutations(topo.gpus, 2):
        route = topo.route(a.name, b.name)
        assert [lk.dst for lk in route] == ["nvswitch", b.name]
        assert topo.route_bandwidth_Bps(a.name, b.name) == gbps * GB


def test_dgx_h100_host_bandwidth_depends_on_direction():
    topo = load_hardware("dgx-h100")  # §4: H2D 35.2, D2H 52.8 GB/s
    assert topo.route_bandwidth_Bps("cpu0", "gpu0") == pytest.approx(35.2 * GB)
    assert topo.route_bandwidth_Bps("gpu0", "cpu0") == pytest.approx(52.8 * GB)


def test_a100_pairs_share_switch_uplink():
    topo = load_hardware("dgx-a100-80gb")
    r0, r1, r2 = (topo.route(f"gpu{i}", topo.gpus[i].host) for i in (0, 1, 2))
    assert r0[-1].name == r1[-1].name == "sw0->cpu0" != r2[-1].name


def minimal(**over):
    spec = {
        "name": "toy",
        "gpu": {
            "model": "X",
            "memory": "16 GiB",
            "peak_flops": "125 TFLOPS",
            "hbm_bandwidth": "900 GB/s",
        },
        "num_gpus": 2,
        "hosts": [{"name": "cpu0", "dram": "64 GB"}],
        "switches": ["sw0"],
        "links": [
            {
                "a": "gpu0",
                "b": "gpu1",
                "bandwidth": "48 GB/s",
                "latency": "10 us",
                "kind": "nvlink",
                "count": 2,
            },
            {"a": "gpu0", "b": "sw0", "bandwidth": 13e9, "latency": 5e-6, "kind": "pcie"},
            {
                "a": "gpu1",
                "b": "sw0",
                "bandwidth": "12.5 GiB/s",
                "latency": "0.005 ms",
                "kind": "pcie",
            },
            {"a": "sw0", "b": "cpu0", "bandwidth": "12.5 GB/s", "kind": "pcie"},
        ],
    }
    spec.update(over)
    return spec


def test_units_are_parsed_to_base_units():
    topo = load_hardware(minimal())
    g = topo.gpu(0)
    assert (g.memory_bytes, g.peak_flops, g.hbm_bandwidth_Bps) == (16 * GIB, 125e12, 900e9)
    assert topo.host("cpu0").dram_bytes == 64e9 * 63 / 64 and g.host == "cpu0"
    assert topo.direct_link("gpu1", "gpu0").bandwidth_Bps == 48e9
    assert topo.direct_link("gpu0", "gpu1").latency_s == pytest.approx(10e-6)
    assert topo.direct_link("sw0", "gpu1").bandwidth_Bps == 12.5 * GIB
    assert topo.direct_link("gpu1", "sw0").latency_s == pytest.approx(5e-6)
    assert topo.direct_link("cpu0", "sw0").latency_s == pytest.approx(10e-6)  # default
    assert len(topo.links) == 8


@given(
    st.floats(0.001, 1e4),
    st.sampled_from([("B/s", 1), ("kB/s", 1e3), ("MB/s", 1e6), ("GB/s", 1e9), ("GiB/s", GIB)]),
)
def test_bandwidth_strings(value, unit):
    link = LinkSpec(a="x", b="y", bandwidth=f"{value!r} {unit[0]}")
    assert link.bandwidth == pytest.approx(value * unit[1])


def test_directed_link_has_one_direction():
    spec = minimal()
    spec["links"].append({"a": "cpu0", "b": "gpu1", "bandwidth": "1 GB/s", "directed": True})
    topo = load_hardware(spec)
    assert topo.direct_link("cpu0", "gpu1").bandwidth_Bps == 1e9
    assert topo.direct_link("gpu1", "cpu0") is None


def error(source, **kw) -> InputError:
    with pytest.raises(InputError) as info:
        load_hardware(source, **kw)
    return info.value


def test_unknown_preset_lists_known_ones():
    err = error("dgx1", file="experiments/x.yaml")
    assert err.file == "experiments/x.yaml" and err.field == "hardware"
    assert all(name in err.message for name in list_presets())


def test_unknown_key_is_named_with_allowed_keys():
    err = error(
        minimal(
            gpu={"model": "X", "memory": 1, "peak_flops": 1, "hbm_bandwidth": 1, "colour": "green"}
        )
    )
    assert err.field == "hardware.gpu.colour"
    assert "unknown key" in err.message and "hbm_bandwidth" in err.message
    assert error(minimal(nvlinks=[])).field == "hardware.nvlinks"


def test_negative_bandwidth_names_the_field():
    spec = minimal()
    spec["links"][3]["bandwidth"] = "-12.5 GB/s"
    err = error(spec, file="experiments/dgx1.yaml")
    assert (err.file, err.field) == ("experiments/dgx1.yaml", "hardware.links.3.bandwidth")
    assert "experiments/dgx1.yaml: field 'hardware.links.3.bandwidth'" in str(err)


def test_wrong_units_name_the_field():
    spec = minimal()
    spec["links"][1]["bandwidth"] = "13 GB"
    assert error(spec).field == "hardware.links.1.bandwidth"
    assert (
        error(minimal(gpu={**minimal()["gpu"], "memory": "16 GB/s"})).field == "hardware.gpu.memory"
    )


def test_reference_errors_name_the_field():
    spec = minimal()
    spec["links"][1]["b"] = "sw9"
    err = error(spec)
    assert err.field == "hardware.links.1.b" and "sw9" in err.message
    assert error(minimal(gpu_hosts=["cpu0"])).field == "hardware.gpu_hosts"
    assert error(minimal(gpu_hosts=["cpu0", "cpu7"])).field == "hardware.gpu_hosts.1"
    assert error(minimal(switches=["gpu1"])).field == "hardware.switches.0"
    dup = minimal()
    dup["links"].append({"a": "gpu1", "b": "gpu0", "bandwidth": 1, "directed": True})
    assert error(dup).field == "hardware.links.4"


def test_unreachable_gpu_is_an_error():
    err = error(minimal(links=minimal()["links"][1:2]))
    assert err.field == "hardware.links" and "no path" in err.message


def test_yaml_file_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ngpu: {model: X\n")
    err = error(str(bad))
    assert err.file == str(bad) and "line" in err.message
    dup = tmp_path / "dup.yaml"
    dup.write_text("name: x\nname: y\n")
    assert "twice" in error(str(dup)).message
    assert "cannot read" in error(str(tmp_path / "missing.yaml")).message


def test_yaml_file_relative_to_experiment_and_errors_inside_it(tmp_path):
    (tmp_path / "hw").mkdir()
    spec = minimal()
    spec["links"][2]["bandwidth"] = 0
    (tmp_path / "hw" / "toy.yaml").write_text(json.dumps(spec))  # JSON is YAML
    err = error("hw/toy.yaml", file=str(tmp_path / "exp.yaml"))
    assert (err.file, err.field) == (str(tmp_path / "hw" / "toy.yaml"), "links.2.bandwidth")


def test_base_preset_with_overrides():
    topo = load_hardware(
        {
            "base": "dgx1-v100-16gb",
            "name": "mine",
            "hosts": [{"name": "cpu0", "dram": "192 GiB"}, {"name": "cpu1", "dram": "192 GiB"}],
        }
    )
    assert topo.name == "mine" and topo.host_dram_bytes == 384 * GIB * 63 / 64
    assert (
        topo.gpu(0).memory_bytes == 16160 * MIB
        and topo.direct_link("gpu0", "gpu3").bandwidth_Bps == 48e9
    )
    assert error({"base": "dgx9"}).field == "hardware.base"


def test_describe_topology_renders_tables():
    console = Console(record=True, width=250)
    console.print(describe_topology(load_hardware("dgx1-v100-16gb")))
    text = console.export_text()
    for needle in (
        "V100-SXM2-16GB",
        "gpu0 <-> gpu3",
        "48.00",
        "12.50",
        "cpu0 <-> cpu1",
        "route bandwidth",
    ):
        assert needle in text
    console = Console(record=True, width=250)
    console.print(describe_topology(load_hardware("pcie-8gpu")))
    assert "22.0 (cpu0)" in console.export_text()


def test_hbm2e_h100_runs_memory_bound_kernels_at_its_own_2_4_tbps():
    # torchtitan's Grand Teton H100: 96 GB HBM2e, 2.4 TB/s (vs 3.35 TB/s HBM3); same die, peak
    g80, g96 = (
        load_hardware(p).gpus[0].compute for p in ("grand-teton-h100", "grand-teton-h100-96gb")
    )
    assert g96.hbm_rate_Bps() == pytest.approx(2.4e12 * g80.hbm_efficiency)
    assert g96.hbm_rate_Bps() / g80.hbm_rate_Bps() == pytest.approx(2.4 / 3.35)
    assert g96.matmul_flops == g80.matmul_flops and g96.sm_count == 132
    spec = load_hardware_spec("grand-teton-h100-96gb")
    assert spec.gpu.power_caps == [] and "500 W" in spec.description  # a fact, no throughput
