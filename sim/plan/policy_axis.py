"""The sweep's memory-policy axis: ``sweep.memory_policy`` (or ``options.stage_policies``), each
value parsed once (:func:`sim.memory.registry.parse_policy`), and whether a per-stage spec names
as many stages as a point has.

A value is a policy spec (``none``, ``recompute``, ``zero3:offload``...) or, in
``sweep.memory_policy``, one spec per stage joined by ``|`` (:data:`sim.memory.per_stage.
SEPARATOR`); ``options.stage_policies`` lists the stages' specs and makes one such joined value.
"""

from __future__ import annotations

from sim.config import ExperimentConfig, as_list
from sim.errors import InputError
from sim.memory.base import MemoryPolicy
from sim.memory.per_stage import SEPARATOR
from sim.memory.registry import parse_policy

Policy = tuple[str, MemoryPolicy]
"""A memory-policy axis value: the spec as written (what the point stores) and its policy."""


def policy_axis(exp: ExperimentConfig, file: str) -> list[Policy]:
    """The memory policies of the grid, each parsed once (``options.stage_policies`` makes one
    per-stage spec).

    Raises:
        InputError: an unknown policy or bad parameter, naming the field.
    """
    per_stage = exp.options.stage_policies
    if per_stage is not None:
        if "memory_policy" in exp.sweep.model_fields_set:
            raise InputError(
                "set either sweep.memory_policy or options.stage_policies, not both",
                file=file,
                field="options.stage_policies",
            )
        specs, field = list(per_stage), "options.stage_policies"
    else:
        specs, field = as_list(exp.sweep.memory_policy), "sweep.memory_policy"
    for i, spec in enumerate(specs):
        if SEPARATOR in spec and per_stage is not None:
            raise InputError(
                "one policy per entry ('|' joins stages only in sweep.memory_policy)",
                file=file,
                field=f"{field}.{i}",
            )
        try:
            parse_policy(spec)
        except (KeyError, ValueError) as exc:
            raise InputError(str(exc.args[0]), file=file, field=f"{field}.{i}") from None
    texts = [SEPARATOR.join(specs)] if per_stage is not None else specs
    return [(text, parse_policy(text)) for text in texts]


def stage_count_reason(text: str, policy: MemoryPolicy, p: int) -> str:
    """Why the per-stage policy ``text`` (``policy``) cannot run on ``p`` stage chunks (it
    names another number of stages), or ``""``."""
    n = len(policy.parts())
    if n > 1 and n != p:
        return f"memory policy {text!r} names {n} stages but this point has {p}"
    return ""


__all__ = ["Policy", "policy_axis", "stage_count_reason"]
