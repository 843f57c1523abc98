"""Plots that read at cluster scale: one bar, line or timeline row per pipeline stage instead of
per GPU once a job has more than :data:`PER_STAGE_ABOVE_GPUS` GPUs.

A job of hundreds of GPUs draws hundreds of memory bars and timeline rows, one per GPU, most of
them copies of each other (the data-parallel replicas and tensor ranks of a stage run the same
program; :mod:`sim.engine.symmetry`). Above the threshold :func:`stage_view` keeps one GPU per
stage: the GPU of the stage whose memory peaks highest (replica 0's tensor rank 0 when the run
was mirrored, where no other ran), and labels it ``stage s (gpuN, x K)`` with ``K`` the GPUs
that run the stage. The timeline then shows one pipeline, each row with its own data-parallel
collectives (stream ``comm``) and tensor-parallel ones (``tp``), timed on all their members.
"""

from __future__ import annotations

from dataclasses import replace

from sim.events import EventLog

PER_STAGE_ABOVE_GPUS = 16
"""Above this many GPUs in the job, the memory plots and the timelines show one GPU per stage.
Every GPU of a 64-GPU job made a 1,783 x 11,484 px timeline and a 5,853 px wide memory chart
(issue 30); 16 GPUs (two 8-GPU servers) still draw every GPU, each labelled with its stage."""


def _leaves(x) -> list[int]:
    return [g for y in x for g in _leaves(y)] if isinstance(x, list) else [x]


def stage_gpus(log: EventLog) -> list[list[int]]:
    """The GPU indices of each stage (all replicas and tensor ranks), from the log's
    ``meta["placement"]`` (``[replica][stage]`` or ``[replica][stage][tensor rank]``); empty
    when the log has none."""
    placement = log.meta.get("placement") or []
    stages = len(placement[0]) if placement else 0
    return [sorted({g for row in placement for g in _leaves(row[s])}) for s in range(stages)]


def gpu_stage_labels(log: EventLog) -> dict[str, str]:
    """``{gpu: "gpu3 (stage 1)"}`` for every GPU of the log's placement (``stages 0,2`` for a
    GPU holding several stage chunks); GPUs outside the placement keep their name."""
    labels: dict[str, list[str]] = {}
    for s, gpus in enumerate(stage_gpus(log)):
        for g in gpus:
            labels.setdefault(f"gpu{g}", []).append(str(s))
    return {
        d: f"{d} (stage{'s' if len(ss) > 1 else ''} {','.join(ss)})" for d, ss in labels.items()
    }


def plotted_view(log: EventLog) -> tuple[EventLog, dict[str, str], bool]:
    """What a plot of ``log`` draws: ``(log, labels, per_stage)``: above
    :data:`PER_STAGE_ABOVE_GPUS` GPUs one GPU per stage (:func:`stage_view`), labelled
    ``stage s (gpuN, xK)``; else every GPU, labelled with its stage (:func:`gpu_stage_labels`)."""
    view, labels = stage_view(log)
    if labels:
        return view, labels, True
    return log, gpu_stage_labels(log), False


def stage_view(log: EventLog) -> tuple[EventLog, dict[str, str]]:
    """``(log, {})`` for a job of at most :data:`PER_STAGE_ABOVE_GPUS` GPUs; else the log cut
    to one GPU per stage (module doc) and ``{gpu: label}`` for those GPUs. Stage chunks that
    share a GPU (``v > 1``) share its row, labelled with all their stages."""
    stages = stage_gpus(log)
    if len({g for gpus in stages for g in gpus}) <= PER_STAGE_ABOVE_GPUS:
        return log, {}
    peaks = log.meta.get("peak_bytes", {})
    labels: dict[str, list[str]] = {}
    counts: dict[str, int] = {}
    for s, gpus in enumerate(stages):
        ran = [f"gpu{g}" for g in gpus if f"gpu{g}" in peaks] or [f"gpu{gpus[0]}"]
        pick = max(ran, key=lambda d: (peaks.get(d, 0.0), -int(d[3:])))
        labels.setdefault(pick, []).append(str(s))
        counts[pick] = len(gpus)
    keep = set(labels)
    view = replace(
        log,
        events=[e for e in log.events if e.device in keep],
        memory=[m for m in log.memory if m.device in keep],
        capacity_bytes={d: c for d, c in log.capacity_bytes.items() if d in keep},
    )
    return view, {d: f"stage {','.join(ss)} ({d}, x{counts[d]})" for d, ss in labels.items()}
