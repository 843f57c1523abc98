"""Splitting a trace's layers into pipeline stages: :func:`partition` (``sim partition``), over
:func:`sim.parallel.partition.partition` with the links and capacities of a hardware's first
pipeline.
"""

from __future__ import annotations

from sim.errors import InputError, expect_int, expect_type
from sim.hardware.loader import load_hardware
from sim.parallel.partition import partition as split_layers
from sim.parallel.placement import place
from sim.report.results import PartitionPlan
from sim.trace.adapt import adapt_trace
from sim.trace.loader import load_trace
from sim.trace.schema import Trace


def partition(
    trace: str | Trace,
    stages: int,
    *,
    hardware: str | None = None,
    microbatch_size: int | None = None,
) -> PartitionPlan:
    """Split a trace's layers into ``stages`` contiguous stages minimising the slowest stage.

    A stage's time is its forward + backward compute plus 2 x boundary bytes / link bandwidth
    (links of ``hardware``'s first pipeline, NCCL bandwidth); its memory is 16 B/param
    (fp16 + Adam) + (P - s) in-flight micro-batches of activations, checked against the GPUs'
    capacity (:func:`sim.parallel.partition.partition`).

    Args:
        trace: a trace name or path, or a loaded trace.
        stages: number of stages ``P``.
        hardware: a preset or hardware YAML (default: no capacity, free transfers).
        microbatch_size: bring the trace to this many samples (as ``sim run`` does).

    Raises:
        InputError: bad trace or hardware; more stages than layers or GPUs.

    Example (4 equal layers of 1 s forward + 2 s backward: 2 layers per stage, 6 s each):
        >>> from sim.trace.schema import LayerProfile, Trace
        >>> layers = (LayerProfile("l", 1.0, 2.0, 10, 1, 0),) * 4
        >>> p = partition(Trace("four", layers, 1, "fp32", "cpu"), 2).partition
        >>> p.boundaries, p.bottleneck_s
        ((0, 2), 6.0)
    """
    expect_type(trace, (str, Trace), "trace", "a trace name or path, or a Trace")
    expect_int(stages, "stages", 1)
    if hardware is not None:
        expect_type(hardware, str, "hardware", "a hardware preset or YAML path")
    if isinstance(trace, str):
        trace = load_trace(trace, file="command line", field="TRACE")
    if stages > len(trace.layers):
        raise InputError(
            f"{stages} stages but {trace.name} has {len(trace.layers)} layers", field="--stages"
        )
    if microbatch_size is not None and microbatch_size < 1:
        raise InputError(f"must be >= 1, got {microbatch_size}", field="--microbatch-size")
    topo = load_hardware(hardware, field="--hardware") if hardware else None
    notes: list[str] = []
    if microbatch_size or topo is not None:
        gpu = topo.gpus[0].compute if topo else None
        trace, notes = adapt_trace(trace, microbatch_size or trace.microbatch_size, gpu)
    if topo is None:
        return PartitionPlan(trace, split_layers(trace, stages), tuple(notes))
    if stages > topo.num_gpus:
        raise InputError(
            f"{stages} stages but {topo.name} has {topo.num_gpus} GPUs", field="--stages"
        )
    row = place(topo, stages, 1)[0]
    bandwidth = [
        topo.route_bandwidth_Bps(f"gpu{row[j]}", f"gpu{row[j + 1]}", nccl=True)
        for j in range(stages - 1)
    ]
    capacity = [topo.gpu(g).memory_bytes for g in row]
    part = split_layers(
        trace, stages, bandwidth_Bps=bandwidth or None, memory_capacity_bytes=capacity
    )
    return PartitionPlan(trace, part, tuple(notes))
