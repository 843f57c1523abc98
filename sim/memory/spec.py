"""The typed memory-policy spec: what a ``memory_policy`` string asks for, parsed once.

:func:`sim.memory.registry.parse_policy` turns ``"recompute:full:4"``, ``"cpu_swap:0.5"`` or
``"none|recompute:selective|cpu_swap|none"`` into a :class:`PolicySpec`; the simulator builds its
policy from it (:func:`sim.memory.registry.get_policy`) and the torch replay reads the same
object (``backends.torch.memory.replay_policy``), so both run what the string says.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PolicySpec:
    """One memory policy, or one per stage.

    Attributes:
        text: the spec as written (``"cpu_swap:0.5"``).
        kind: the policy name (``none``, ``recompute``, ``cpu_swap``, ``d2d_swap``,
            ``d2d_swap+recompute``, ``zero_offload``, ``chunked``, ``zero3``, ``auto``), or
            ``per_stage`` for ``a|b|...``.
        args: the ``:``-separated parameters as written (``("full", "4")``).
        mode: ``recompute``: ``full`` or ``selective``; ``full`` for ``chunked``,
            ``zero_offload`` and ``zero3`` with ``:recompute``; None otherwise.
        layers: ``recompute:full:N``: checkpoint the first ``N`` layers of each stage; None
            means all (or not a recompute).
        fraction: ``cpu_swap``: the share of each micro-batch's stash swapped, in (0, 1];
            None otherwise.
        stages: with ``kind == "per_stage"``, the spec of stage 0, 1, ...

    Example:
        >>> from sim.memory.registry import parse_policy
        >>> spec = parse_policy("none|cpu_swap:0.5")
        >>> spec.kind, spec.for_stage(1, 2).fraction, spec.for_stage(0, 2).kind
        ('per_stage', 0.5, 'none')
    """

    text: str
    kind: str
    args: tuple[str, ...] = ()
    mode: str | None = None
    layers: int | None = None
    fraction: float | None = None
    stages: tuple[PolicySpec, ...] = ()

    def for_stage(self, stage: int, stages: int) -> PolicySpec:
        """The spec stage ``stage`` of ``stages`` runs: its own entry, or this one.

        Raises:
            ValueError: a per-stage spec that names a different number of stages.
        """
        if self.kind != "per_stage":
            return self
        if len(self.stages) != stages:
            raise ValueError(
                f"memory policy {self.text!r} names {len(self.stages)} stages, not {stages}"
            )
        return self.stages[stage]

    def kinds(self) -> set[str]:
        """Every policy name used (the stages' names for a per-stage spec)."""
        return {s.kind for s in self.stages} if self.stages else {self.kind}
