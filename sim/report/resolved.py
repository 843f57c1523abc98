"""What a ``sim run`` resolved before it simulated, for the run's summary and
``config.resolved.yaml``: how each trace was brought to each micro-batch size and GPU
(:func:`compute_notes`), a note when the grid leaves GPUs idle (:func:`unused_gpus_note`), and
the file itself (:func:`write_resolved`)."""

from __future__ import annotations

import json
from pathlib import Path

from sim.hardware.describe import topology_to_dict
from sim.point.config import PointConfig
from sim.point.experiment import Prepared
from sim.point.simulate import split_note
from sim.report.outputs import write_yaml


def unused_gpus_note(prep: Prepared, points: list[PointConfig]) -> str | None:
    """When the sweep sets neither ``dp_width`` nor ``gpus`` and no model its own ``dp_width``
    (so w = 1) and no configuration uses all of the hardware's GPUs: say so, since samples/s
    then compares jobs of different sizes on a partly idle machine; else None."""
    sw = prep.exp.sweep
    total = prep.topology.num_gpus
    used = sorted({p.layout.gpus for p in points})
    if {"dp_width", "gpus"} & sw.model_fields_set or not used or used[-1] >= total:
        return None
    if any(m.dp_width is not None for m in prep.exp.models):  # a model pins its own width
        return None
    span = str(used[0]) if len(used) == 1 else f"{used[0]} to {used[-1]}"
    return (
        f"sweep sets neither dp_width nor gpus, so every configuration has w=1 and uses "
        f"{span} of {prep.topology.name}'s {total} GPUs; set sweep.gpus: {total} to plan "
        "for all of them (dp_width = gpus / (stages x t x cp))"
    )


def compute_notes(prep: Prepared, points: list[PointConfig]) -> dict[str, list[str]]:
    """Per model, how its trace is brought to each micro-batch size and to this GPU."""
    out: dict[str, list[str]] = {}
    for name in prep.traces:
        notes = out.setdefault(name, [])
        pairs = sorted({(p.microbatch_size, p.precision) for p in points if p.model == name})
        for b, precision in pairs:
            notes += [n for n in prep.adapted(name, b, precision)[1] if n not in notes]
    for name, t in prep.traces.items():  # the I/W split assumption (sim.engine.inputs)
        if any(x.bwd_input_s is None or x.bwd_weight_s is None for x in t.layers):
            split = sorted(
                {p.schedule for p in points if p.model == name and p.schedule_class.splits_backward}
            )
            out[name] += [f"{name}: {split_note(s)}" for s in split]
    return out


def write_resolved(out: Path, exp, prep, points, skipped, notes, stats=None) -> None:
    """``out/config.resolved.yaml``: the experiment ``exp`` as validated, its hardware and
    traces (``prep``: layers, parameters, micro-batch, dtype, device, provenance), the compute
    notes (:func:`compute_notes`), the number of ``points``, the ``skipped`` ones with their
    reasons and, with ``stats``, the planner's counts (:class:`sim.plan.planner.PlanStats`)."""
    data = {
        "experiment": exp.model_dump(mode="json"),
        "hardware": topology_to_dict(prep.topology),
        "traces": {
            name: {
                "layers": len(t.layers),
                "parameters": t.parameters,
                "microbatch_size": t.microbatch_size,
                "dtype": t.dtype,
                "device": t.device,
                "provenance": json.loads(json.dumps(t.provenance, default=str)),
            }
            for name, t in prep.traces.items()
        },
        "compute_notes": notes,
        "points": len(points),
        "skipped": [{"config": d, "reason": r} for d, r in skipped],
    }
    if stats is not None:
        data["planner"] = stats.as_dict()
    write_yaml(out / "config.resolved.yaml", data)
