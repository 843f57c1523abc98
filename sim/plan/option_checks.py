"""What an experiment's ``options`` and ``sweep`` say that no configuration could honour,
refused before anything is simulated (:func:`check_options`, called by
:func:`sim.plan.sweep.expand`): ``sweep.gpus`` beyond the hardware's GPUs, both
``sweep.gpus`` and ``sweep.dp_width`` set,
``options.fsdp_reshard_after_forward`` without FSDP, ``options.boundaries`` out of the models'
layers, and an ``options.placement`` that is not a rectangle of distinct GPUs of the hardware.
Each error names the file and the field; their lengths per point are matched in ``expand``.
"""

from __future__ import annotations

from typing import Any

from sim.config import as_list
from sim.errors import InputError
from sim.hardware.loader import cluster_presets
from sim.point.experiment import Prepared


def check_options(prep: Prepared) -> None:
    """Check ``options.boundaries`` and ``options.placement`` against every model and the
    hardware before anything is simulated (their length is matched per point in
    :func:`sim.plan.sweep.expand`).

    Raises:
        InputError: a boundary out of range, not starting at 0 or not increasing; a placement
            that is not rectangular, names a GPU the hardware lacks, or uses one twice;
            ``sweep.gpus`` above the hardware's GPUs, or set with ``sweep.dp_width``;
            ``options.fsdp_reshard_after_forward``
            in a grid without FSDP (``sweep.dp_shard`` 1 throughout).
    """
    opts, file = prep.exp.options, prep.file
    if prep.exp.sweep.gpus is not None and "dp_width" in prep.exp.sweep.model_fields_set:
        raise InputError(
            "set either sweep.gpus (dp_width follows from it) or sweep.dp_width, not both",
            file=file,
            field="sweep.dp_width",
        )
    _check_gpus(prep)
    if opts.fsdp_reshard_after_forward is not None and set(as_list(prep.exp.sweep.dp_shard)) == {1}:
        raise InputError(
            "applies to FSDP only, and sweep.dp_shard is 1 (no FSDP) in every configuration, "
            "so it would change nothing: remove it, or set sweep.dp_shard (e.g. -1: all of "
            "dp_width)",
            file=file,
            field="options.fsdp_reshard_after_forward",
        )
    if opts.boundaries is not None:
        _check_boundaries(prep, list(opts.boundaries))
    if opts.placement is not None:
        _check_placement(prep, list(opts.placement))


def _check_gpus(prep: Prepared) -> None:
    """``sweep.gpus`` within the hardware's GPUs; beyond one server of a preset that takes
    ``Nx-PRESET``, the message names the cluster that has them."""
    gpus, n, hw = prep.exp.sweep.gpus, prep.topology.num_gpus, prep.exp.hardware
    if gpus is None or gpus <= n:
        return
    hint = ""
    if isinstance(hw, str) and hw in cluster_presets():
        hint = f": for {-(-gpus // n)} servers of it write hardware: {-(-gpus // n)}x-{hw}"
    raise InputError(
        f"{gpus} GPUs, but {prep.topology.name} has {n}{hint}",
        file=prep.file,
        field="sweep.gpus",
    )


def _check_boundaries(prep: Prepared, b: list[int]) -> None:
    """Stage start layers: from 0, increasing, within the smallest model's layers."""
    file = prep.file
    layers = min((len(t.layers), name) for name, t in prep.traces.items())
    if not b or b[0] != 0:
        raise InputError(
            "the first stage must start at layer 0", file=file, field="options.boundaries.0"
        )
    for i in range(1, len(b)):
        if b[i] <= b[i - 1]:
            raise InputError(
                f"{b[i]} is not after {b[i - 1]}: stage start layers must increase",
                file=file,
                field=f"options.boundaries.{i}",
            )
        if b[i] >= layers[0]:
            raise InputError(
                f"layer {b[i]} does not exist: model {layers[1]} has "
                f"{layers[0]} layers (0..{layers[0] - 1})",
                file=file,
                field=f"options.boundaries.{i}",
            )


def _check_placement(prep: Prepared, rows: list[list[Any]]) -> None:
    """``[replica][stage]`` rows of equal length, of GPU indices (or lists of ``t`` of them),
    each an existing GPU used once."""
    file, n = prep.file, prep.topology.num_gpus
    if not rows or any(len(r) != len(rows[0]) or not r for r in rows):
        raise InputError(
            "must be a non-empty list of equally long rows [replica][stage] (of GPU "
            "indices, or of lists of t GPU indices with tensor parallelism)",
            file=file,
            field="options.placement",
        )
    seen: dict[int, str] = {}
    for r, row in enumerate(rows):
        cells: list[tuple[str, int]] = []
        for j, x in enumerate(row):
            group: list[int] = x if isinstance(x, list) else [x]
            cells += [
                (f"{j}.{k}" if isinstance(x, list) else str(j), g) for k, g in enumerate(group)
            ]
        for s, g in cells:
            where = f"options.placement.{r}.{s}"
            if not 0 <= g < n:
                raise InputError(
                    f"GPU {g} does not exist: {prep.topology.name} has GPUs 0..{n - 1}",
                    file=file,
                    field=where,
                )
            if g in seen:
                raise InputError(f"GPU {g} is already used at {seen[g]}", file=file, field=where)
            seen[g] = where
