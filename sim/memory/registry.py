"""Registry of memory policies, and the ``memory_policy`` grammar.

``name`` or ``name:param[:param]`` (``recompute:full:4``, ``cpu_swap:0.5``, ``chunked:32``,
``d2d_swap:weights``, ``d2d_swap+recompute``, ``chunked:64:recompute``,
``zero_offload:recompute``, ``zero3:offload:recompute``), or one such spec per stage joined by ``|``
(``none|recompute:selective|cpu_swap|none``), which ``options.stage_policies`` builds.
:func:`parse_policy` reads a string once into its policy (each class's ``from_args`` checks its
parameters); everything downstream asks that object. Adding a policy: one module with its class
(:class:`~sim.memory.base.MemoryPolicy`) and one line in :data:`POLICIES`.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from sim.memory.act_offload import ActOffloadPolicy
from sim.memory.auto import AutoPolicy
from sim.memory.base import MemoryPolicy
from sim.memory.chunked import ChunkedPolicy
from sim.memory.cpu_swap import CpuSwapPolicy
from sim.memory.d2d_recompute import D2DRecomputePolicy
from sim.memory.d2d_swap import D2DSwapPolicy
from sim.memory.dist_opt import DistOptPolicy
from sim.memory.none import NoPolicy
from sim.memory.per_stage import SEPARATOR, PerStagePolicy
from sim.memory.recompute import RecomputePolicy
from sim.memory.replay import NotReplayable, ReplayPlan
from sim.memory.vpipe import VPipePolicy
from sim.memory.zero3 import Zero3Policy
from sim.memory.zero_offload import ZeroOffloadPolicy
from sim.plugins import Registry

POLICIES: Registry[MemoryPolicy] = Registry(
    "memory policy",
    [
        NoPolicy,
        RecomputePolicy,
        CpuSwapPolicy,
        ActOffloadPolicy,
        D2DSwapPolicy,
        D2DRecomputePolicy,
        ChunkedPolicy,
        ZeroOffloadPolicy,
        Zero3Policy,
        DistOptPolicy,
        VPipePolicy,
        AutoPolicy,
    ],
    known=lambda names, _: (
        f"known: {', '.join(sorted(names))} (parameters after ':', one "
        "policy per stage joined by '|')"
    ),
)
"""Every memory policy class, by name."""


class PolicyParameterError(ValueError):
    """A known policy with parameters it does not accept."""


def _instance(text: str) -> MemoryPolicy:
    name, *args = text.strip().split(":")
    cls = POLICIES.get(name)
    try:
        return cls.from_args(args)
    except ValueError as exc:
        raise PolicyParameterError(f"memory policy {text!r}: {exc}") from None


@cache
def parse_policy(text: str) -> MemoryPolicy:
    """The policy a ``memory_policy`` string names (module doc), parsed once per string:
    policies are immutable, so every point with this string shares the object.

    Raises:
        UnknownName: unknown name (a :class:`KeyError`; the message lists the known ones).
        PolicyParameterError: bad parameters (the message says what is expected).

    Example:
        >>> policy = parse_policy("recompute:full:4")
        >>> policy.name, policy.mode, policy.layers
        ('recompute', 'full', 4)
    """
    if SEPARATOR in text:
        policy: MemoryPolicy = PerStagePolicy(
            [parse_policy(part.strip()) for part in text.split(SEPARATOR)]
        )
    else:
        policy = _instance(text)
    policy.text = text
    return policy


def replayable_policies() -> list[str]:
    """Names of the policies the torch replay runs (their class's ``replayable``)."""
    return [cls.name for cls in POLICIES.classes() if cls.replayable]


def keeps_everything(text: str) -> bool:
    """Whether memory policy ``text`` is one policy whose class keeps every tensor on the GPU
    (``keeps_everything``); False for per-stage policies (``a|b``, which name a number of
    stages) and for a string that does not parse.

    Example:
        >>> keeps_everything("none"), keeps_everything("None"), keeps_everything("recompute")
        (True, True, False)
    """
    try:
        policy = parse_policy(text)
    except (KeyError, ValueError):
        return False
    return policy.keeps_everything


def replay_problems(text: str, stages: int) -> list[str]:
    """Why the torch replay cannot run memory policy ``text`` on ``stages`` stages (empty if it
    can): an unknown or malformed spec, a per-stage spec for another depth, or a policy whose
    class cannot be replayed."""
    try:
        policy = parse_policy(text)
        policy.for_stage(0, stages)
    except (KeyError, ValueError) as exc:
        return [f"memory_policy: {exc.args[0]}"]
    other = policy.unreplayable()
    if other:
        return [
            f"memory_policy: {text!r} uses {', '.join(other)}; the torch replay runs only "
            f"{', '.join(replayable_policies())} (one per stage joined by '|')"
        ]
    return []


def replay_plan(text: str, stage: int, stages: int, is_block: Sequence[bool]) -> ReplayPlan:
    """How the torch replay runs memory policy ``text`` on stage ``stage`` of ``stages``
    (:meth:`~sim.memory.base.MemoryPolicy.replay` of the stage's policy).

    Raises:
        NotReplayable: a policy the replay cannot run (a :class:`ValueError`).
        ValueError: a per-stage spec for another number of stages.
    """
    policy = parse_policy(text).for_stage(stage, stages)
    try:
        return policy.replay(is_block, f"stage {stage}: {policy.text!r}")
    except NotReplayable as exc:
        names = replayable_policies()
        only = ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else names[0]
        raise NotReplayable(f"{exc}; it runs only {only}") from None
