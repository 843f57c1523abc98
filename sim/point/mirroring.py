"""Whether a point is simulated mirrored (:mod:`sim.engine.symmetry`): one data-parallel
replica's tensor rank 0 stands for every replica, as ``options.simulation`` asks."""

from __future__ import annotations

from sim.config import MIRROR_ABOVE_GPUS, ExperimentConfig
from sim.engine import SimInput
from sim.engine.symmetry import mirrored
from sim.point.config import PointConfig


def simulated(
    exp: ExperimentConfig, point: PointConfig, inp: SimInput
) -> tuple[SimInput, str | None]:
    """``inp`` mirrored (:mod:`sim.engine.symmetry`) when ``options.simulation`` asks for it
    (``symmetric``, or ``auto`` above :data:`~sim.config.MIRROR_ABOVE_GPUS` GPUs) and the
    configuration is symmetric (with :func:`~sim.engine.symmetry.fabric_note`'s note, if any);
    else ``inp``, with the reason it could not be when asked."""
    if not mirror_intended(exp, point):
        return inp, None
    return mirrored(inp)


def mirror_intended(exp: ExperimentConfig, point: PointConfig) -> bool:
    """Whether ``options.simulation`` asks to mirror ``point`` (``symmetric``, or ``auto``
    above :data:`~sim.config.MIRROR_ABOVE_GPUS` GPUs): its stage replicas are then planned once
    per kind (:func:`~sim.memory.alike.plan_alike`) and simulated once if symmetric."""
    mode = exp.options.simulation
    return mode == "symmetric" or (mode == "auto" and point.layout.gpus > MIRROR_ABOVE_GPUS)
