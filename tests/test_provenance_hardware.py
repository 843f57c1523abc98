"""`sim hardware show` says where each figure comes from (sim.hardware.provenance)."""

from __future__ import annotations

from rich.console import Console

from sim.hardware import describe_topology, load_hardware
from sim.hardware.loader import cluster_presets
from sim.hardware.provenance import (
    DESCRIPTION,
    NO_NETWORK_SOURCE,
    NO_SOURCE,
    ROUTE,
    figure_sources,
)

TOY = {
    "name": "toy",
    "gpu": {
        "model": "X",
        "memory": "16 GiB",
        "peak_flops": "125 TFLOPS",
        "hbm_bandwidth": "1 TB/s",
    },
    "num_gpus": 2,
    "hosts": [{"name": "cpu0", "dram": "64 GB"}],
    "links": [
        {"a": "gpu0", "b": "gpu1", "bandwidth": "48 GB/s", "latency": "10 us", "kind": "nvlink"},
        {"a": "gpu0", "b": "cpu0", "bandwidth": "12 GB/s", "latency": "5 us", "kind": "pcie"},
        {"a": "gpu1", "b": "cpu0", "bandwidth": "12 GB/s", "latency": "5 us", "kind": "pcie"},
    ],
}


def _shown(topo) -> str:
    console = Console(record=True, width=300)
    console.print(describe_topology(topo))
    return console.export_text()


def test_figures_of_a_description_without_sources_are_labelled_assumptions():
    rows = dict(figure_sources(load_hardware(TOY)))
    assert rows["GPUs: memory GiB (as CUDA reports it)"] == NO_SOURCE  # model X: not known
    assert rows["GPUs: 16-bit dense TFLOPS, HBM GB/s"] == NO_SOURCE
    assert rows["links: GB/s, latency us"] == NO_SOURCE
    assert rows["hosts: DRAM GB, Adam params/s"] == NO_SOURCE
    assert NO_SOURCE.startswith("assumption")
    assert NO_SOURCE in _shown(load_hardware(TOY))


def test_preset_show_prints_its_description_and_host_source():
    topo = load_hardware("dgx1-v100-16gb")
    rows = dict(figure_sources(topo))
    assert rows["GPUs: 16-bit dense TFLOPS, HBM GB/s"] == DESCRIPTION
    memory = rows["GPUs: memory GiB (as CUDA reports it)"]
    assert "16160MB" in memory and memory.startswith("sim.hardware.capacity")  # 15.8 GiB shown
    assert rows["GPUs: to / from host GB/s; GPU-to-GPU route GB/s"] == ROUTE
    assert rows["hosts: op / bwd op / ckpt us"] == topo.hosts[0].overhead.source
    text = " ".join(_shown(topo).split())
    assert "sources of the figures above" in text
    assert "description: NVIDIA DGX-1 with 8x V100-SXM2-16GB" in text
    assert "pytorch/pytorch#41383" in text  # the host figures' source, not only the YAML


NETWORK = "network: NIC GB/s, oversubscription, latency"


def test_cluster_network_figures_print_the_network_source():
    topo = load_hardware("2x-dgx-h100")
    rows = dict(figure_sources(topo))
    assert "DGX H100 user guide" in rows[NETWORK]  # the preset's network.source, not a file
    assert rows["network: servers, GPUs, rails, leaves, spines"].startswith("derived")
    assert "8x single-port OSFP ConnectX-7" in " ".join(_shown(topo).split())


def test_a_network_without_a_source_is_labelled_an_assumption():
    net = {"nic_bandwidth": "10 GB/s"}
    topo = load_hardware({**TOY, "servers": 2, "network": net})
    assert dict(figure_sources(topo))[NETWORK] == NO_NETWORK_SOURCE
    assert NO_NETWORK_SOURCE.startswith("assumption")


def test_every_preset_network_says_its_source():
    for name in cluster_presets():
        topo = load_hardware(f"2x-{name}")
        assert topo.fabric is not None and topo.fabric.source.strip(), name


def test_figures_set_over_a_base_without_a_description_are_named_as_such():
    hosts = [{"name": "cpu0", "dram": "9 GiB"}, {"name": "cpu1", "dram": "9 GiB"}]
    mine = {"base": "dgx1-v100-16gb", "name": "mine", "hosts": hosts, "num_gpus": 8}
    text = load_hardware(mine).description
    base = load_hardware("dgx1-v100-16gb").description
    assert text.startswith(base) and text != base  # the base's sources do not cover 9 GiB
    assert "Set over the base preset dgx1-v100-16gb" in text and "hosts, num_gpus (" in text
    assert "else an assumption" in text
    own = {**mine, "description": "my hosts: 9 GiB (measured)"}
    assert load_hardware(own).description == "my hosts: 9 GiB (measured)"
    assert "Set over the base" not in load_hardware("dgx-h200").description  # has its own
