"""Registry of memory policies, and the ``memory_policy`` grammar.

``name`` or ``name:param[:param]`` (``recompute:full:4``, ``cpu_swap:0.5``, ``chunked:32``,
``d2d_swap:weights``, ``d2d_swap+recompute``, ``chunked:64:recompute``,
``zero_offload:recompute``, ``zero3:offload:recompute``), or one such spec per stage joined by ``|``
(``none|recompute:selective|cpu_swap|none``), which ``options.stage_policies`` builds.
:func:`parse_policy` reads a string into a :class:`~sim.memory.spec.PolicySpec` (each policy's
``from_args`` checks its parameters); :func:`get_policy` builds the simulator's policy from it.
"""

from __future__ import annotations

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
from sim.memory.spec import PolicySpec
from sim.memory.zero3 import Zero3Policy
from sim.memory.zero_offload import ZeroOffloadPolicy

POLICIES: dict[str, type[MemoryPolicy]] = {
    cls.name: cls
    for cls in (
        NoPolicy,
        RecomputePolicy,
        CpuSwapPolicy,
        D2DSwapPolicy,
        D2DRecomputePolicy,
        ChunkedPolicy,
        ZeroOffloadPolicy,
        Zero3Policy,
        DistOptPolicy,
        AutoPolicy,
    )
}


class PolicyParameterError(ValueError):
    """A known policy with parameters it does not accept."""


def _instance(name: str, args: list[str], text: str) -> MemoryPolicy:
    if name not in POLICIES:
        raise KeyError(
            f"unknown memory policy {name!r}; known: {', '.join(sorted(POLICIES))}"
            " (parameters after ':', one policy per stage joined by '|')"
        )
    try:
        return POLICIES[name].from_args(args)
    except ValueError as exc:
        raise PolicyParameterError(f"memory policy {text!r}: {exc}") from None


def parse_policy(text: str) -> PolicySpec:
    """The :class:`PolicySpec` of a ``memory_policy`` string (module doc).

    Raises:
        KeyError: unknown name (the message lists the known ones).
        PolicyParameterError: bad parameters (the message says what is expected).

    Example:
        >>> spec = parse_policy("recompute:full:4")
        >>> spec.kind, spec.mode, spec.layers, spec.fraction
        ('recompute', 'full', 4, None)
    """
    if SEPARATOR in text:
        stages = tuple(parse_policy(part.strip()) for part in text.split(SEPARATOR))
        return PolicySpec(text=text, kind=PerStagePolicy.name, stages=stages)
    name, *args = text.strip().split(":")
    policy = _instance(name, args, text)
    return PolicySpec(
        text=text,
        kind=name,
        args=tuple(args),
        mode=getattr(policy, "mode", None),
        layers=getattr(policy, "layers", None),
        fraction=getattr(policy, "fraction", None),
    )


def get_policy(spec: str | PolicySpec) -> MemoryPolicy:
    """The simulator's policy for ``spec`` (a string is read with :func:`parse_policy`).

    Raises:
        KeyError: unknown name (the message lists the known ones).
        PolicyParameterError: bad parameters (the message says what is expected).
    """
    parsed = parse_policy(spec) if isinstance(spec, str) else spec
    if parsed.stages:
        policy: MemoryPolicy = PerStagePolicy([get_policy(s) for s in parsed.stages])
    else:
        policy = _instance(parsed.kind, list(parsed.args), parsed.text)
    policy.spec = parsed.text
    return policy
