"""Where a job's ranks sit on NVL72 racks: Megatron-Bridge's Slurm segments.

Megatron-Bridge launches its GB200 / GB300 runs (4 GPUs per compute tray) with ``sbatch
--segment``: the job's nodes when there are at most 18 (one rack's trays), else the largest
divisor of the node count that is at most 18 (NVIDIA-NeMo/Megatron-Bridge@067f987df03b
``scripts/performance/utils/executors.py``, "add --segment flag to sbatch if job uses GB200").
Slurm's block topology keeps each segment's nodes inside one NVLink domain, so a 128-GPU job
(32 trays) runs as two segments of 16 trays, 64 GPUs in each rack, not 72 + 56.

pipesim's ``nvl72xN`` racks number rack ``n``'s GPUs ``72 n ..`` (:mod:`sim.hardware.cluster`).
Global rank ``g`` sits on tray ``g // 4`` in launch order, i.e. in segment ``g // S`` (``S``
GPUs per segment) at its offset ``g % S``; segments fill racks in order, as many per rack as
its 18 trays hold (an assumption where ``S`` is at most 36; Bridge's counts give ``S`` = 64).
Megatron's rank order is ``tp-cp-ep-dp-pp`` (``megatron/core/parallel_state.py``, default
``order``): rank ``k + t (r + R s)`` for tensor rank ``k``, replica ``r`` of the ``R = dp x cp``
replicas (context rank innermost) and stage ``s``, which is pipesim's ``options.placement``
layout (:attr:`sim.config.OptionsConfig.placement`).
"""

from __future__ import annotations

RACK_TRAYS = 18
"""Compute trays per NVL72 rack (NVIDIA GB200 NVL72 datasheet: 18 trays of 2 superchips)."""
TRAY_GPUS = 4
"""GPUs per GB200 / GB300 compute tray (Bridge's ``num_gpus_per_node == 4`` branch)."""
RACK_GPUS = RACK_TRAYS * TRAY_GPUS


def on_racks(hardware: str) -> bool:
    """Whether a preset name is of NVL72 racks: one (``gb200-nvl72``) or several
    (``nvl72x2-gb200``, :mod:`sim.hardware.cluster`).

    >>> on_racks("gb300-nvl72"), on_racks("nvl72x4-gb200"), on_racks("4x-dgx-b200")
    (True, True, False)
    """
    return hardware.startswith("nvl72x") or hardware.endswith("-nvl72")


def segment_nodes(nodes: int) -> int:
    """Bridge's ``--segment`` for ``nodes`` trays (module doc)."""
    if nodes <= RACK_TRAYS:
        return nodes
    return next(s for s in range(RACK_TRAYS, 0, -1) if nodes % s == 0)


def rank_gpu(rank: int, gpus: int) -> int:
    """The rack GPU index of global ``rank`` in a job of ``gpus`` GPUs (module doc)."""
    seg = segment_nodes(-(-gpus // TRAY_GPUS)) * TRAY_GPUS
    per_rack = max(1, RACK_GPUS // seg)
    segment, offset = divmod(rank, seg)
    rack, slot = divmod(segment, per_rack)
    return rack * RACK_GPUS + slot * seg + offset


def racks(gpus: int) -> int:
    """NVL72 racks a job of ``gpus`` GPUs spans (module doc)."""
    return rank_gpu(gpus - 1, gpus) // RACK_GPUS + 1


def segment_placement(gpus: int, stages: int, replicas: int, tp: int) -> list | None:
    """``options.placement`` of the job's ranks on the racks (module doc): per replica, per
    stage, the ``tp`` GPUs (a GPU index when ``tp`` is 1); None when the ranks fill the racks
    in order (no gap: the automatic placement's numbering)."""
    if all(rank_gpu(g, gpus) == g for g in range(gpus)):
        return None
    rows = []
    for r in range(replicas):
        row = []
        for s in range(stages):
            grp = [rank_gpu(k + tp * (r + replicas * s), gpus) for k in range(tp)]
            row.append(grp if tp > 1 else grp[0])
        rows.append(row)
    return rows
