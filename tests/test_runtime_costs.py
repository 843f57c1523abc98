"""The two measured costs of a CPU replay that no profiled layer holds (``sim calibrate``:
backends/torch/calibrate/runtime_costs.py): the pipeline runtime's own time per forward and
backward action, and the optimizer step per parameter tensor and per byte. Exact small
timelines, the hardware fields' round trip, and the traces' ``param_tensors``."""

from __future__ import annotations

from dataclasses import replace

import pytest
from helpers import chain_topology, uniform_input

from sim.engine import simulate
from sim.hardware.describe import topology_to_dict
from sim.hardware.loader import load_hardware
from sim.memory.compose import stage_step_s
from sim.memory.context import StageContext
from sim.memory.states import state_bytes
from sim.trace.native import read_trace, write_trace
from sim.trace.schema import LayerProfile, SharedParams, Trace
from sim.trace.shared import place_shared


def _with_gpus(topo, **fields):
    return replace(topo, gpus=tuple(replace(g, **fields) for g in topo.gpus))


def test_action_overhead_lengthens_every_forward_and_backward_on_its_stream():
    # GPipe, p = 2, m = 2, F = 1 s, B = 2 s, free sends: (m + p - 1)(F + B) = 9 s. The runtime
    # adds 0.25 s to each F and 0.5 s to each B: F' = 1.25, B' = 2.5, so 3 x 3.75 = 11.25 s;
    # rank 1's F1 starts when both its F0 and rank 0's F1 end, at 2.5 s.
    topo = _with_gpus(chain_topology(2), action_overhead_s=(0.25, 0.5))
    log = simulate(uniform_input("gpipe", 2, 2, topology=topo))
    assert log.iteration_ends_s == [pytest.approx(11.25)]
    spans = {(e.device, e.name): (e.start_s, e.end_s) for e in log.events if e.kind == "compute"}
    assert spans[("gpu1", "1F1")] == pytest.approx((2.5, 3.75))
    assert spans[("gpu0", "0B1")] == pytest.approx((8.75, 11.25))
    plain = simulate(uniform_input("gpipe", 2, 2))
    assert plain.iteration_ends_s == [pytest.approx(9.0)]


def _context(topo, optimizer: str, tensors: float, param_bytes: float) -> StageContext:
    layer = LayerProfile("blocks.0", 1.0, 2.0, param_bytes, 0.0, 0.0, param_tensors=tensors)
    return StageContext(
        stage=0,
        stages=2,
        replica=0,
        dp_width=1,
        gpu="gpu0",
        host="cpu0",
        layers=(layer,),
        in_flight=1,
        weight_versions=1,
        state=state_bytes("fp32", optimizer),
        dtype_bytes=4,
        capacity_bytes=16e9,
        topology=topo,
        optimizer=optimizer,
        param_tensors=tensors,
    )


def test_measured_step_is_tensors_times_per_tensor_plus_bytes_over_bandwidth():
    # 40 tensors x 50 us + 8 MB / 4 GB/s = 2 ms + 2 ms = 4 ms per step; GPipe p = 2, m = 2 with
    # F = 1, B = 2 ends its backwards at 9 s, so the iteration ends at 9.004 s. Adam was not
    # measured: the memory-bound estimate, 2e6 params x (4 + 2 x 8 + 4) B / 1 TB/s = 48 us.
    topo = _with_gpus(chain_topology(2), step_costs=(("sgd", 50e-6, 4e9),))
    step_s = stage_step_s(_context(topo, "sgd", 40, 8e6))
    assert step_s == pytest.approx(4e-3)
    assert stage_step_s(_context(topo, "adam", 40, 8e6)) == pytest.approx(2e6 * 24 / 1e12)
    log = simulate(uniform_input("gpipe", 2, 2, optimizer_s=step_s, topology=topo))
    assert log.iteration_ends_s == [pytest.approx(9.004)]


def test_hardware_fields_load_and_describe_round_trip():
    src = {
        "name": "t",
        "gpu": {
            "model": "cpu-rank",
            "memory": "1 GiB",
            "peak_flops": "0.1 TFLOPS",
            "hbm_bandwidth": "10 GB/s",
            "action_overhead": {"forward": "40 us", "backward": "60 us"},
            "optimizer_step": {"sgd": {"per_tensor": "2 us", "bandwidth": "8 GB/s"}},
        },
        "num_gpus": 2,
        "hosts": [{"name": "cpu0", "dram": "8 GiB"}],
        "links": [
            {"a": "gpu0", "b": "gpu1", "bandwidth": "1 GB/s", "latency": "50 us"},
            {"a": "gpu0", "b": "cpu0", "bandwidth": "5 GB/s", "latency": "1 us"},
            {"a": "gpu1", "b": "cpu0", "bandwidth": "5 GB/s", "latency": "1 us"},
        ],
    }
    topo = load_hardware(src)
    gpu = topo.gpus[1]
    assert gpu.action_overhead_s == pytest.approx((40e-6, 60e-6))
    assert gpu.step_cost("sgd") == pytest.approx((2e-6, 8e9)) and gpu.step_cost("adam") is None
    again = load_hardware(topology_to_dict(topo)).gpus[1]
    assert again.action_overhead_s == gpu.action_overhead_s
    assert again.step_costs == gpu.step_costs
    # a GPU preset measures neither: no charge, and nothing written back
    v100 = load_hardware("dgx1-v100-16gb")
    assert v100.gpus[0].action_overhead_s == (0.0, 0.0) and v100.gpus[0].step_costs == ()
    assert "optimizer_step" not in topology_to_dict(v100)["gpu"]


def test_param_tensors_round_trip_and_copies_of_shared_tensors_are_counted(tmp_path):
    layers = tuple(
        LayerProfile(f"l{i}", 1.0, 1.0, 100.0, 0.0, 1.0, param_tensors=3.0) for i in range(4)
    )
    shared = (SharedParams((0, 3), 60.0, ("0.w", "0.b")),)
    trace = Trace("t", layers, 1, "fp32", "cpu", provenance={"source": "test"}, shared=shared)
    write_trace(trace, tmp_path / "t")
    back = read_trace(tmp_path / "t")
    assert [x.param_tensors for x in back.layers] == [3.0] * 4
    # the head's rank keeps a copy of both shared tensors; two all-reduces of 30 bytes each
    placed, groups = place_shared(back, [0, 2], [0, 1])
    assert [x.param_tensors for x in placed.layers] == [3.0, 3.0, 3.0, 5.0]
    assert groups == (((0, 1), 30.0), ((0, 1), 30.0))
