"""Registry of memory policies, and the ``memory_policy`` grammar.

``name`` or ``name:param[:param]`` (``recompute:full:4``, ``cpu_swap:0.5``, ``chunked:32``,
``d2d_swap:weights``), or one such spec per stage joined by ``|``
(``none|recompute:selective|cpu_swap|none``), which ``options.stage_policies`` builds.
"""

from __future__ import annotations

from sim.memory.auto import AutoPolicy
from sim.memory.base import MemoryPolicy
from sim.memory.chunked import ChunkedPolicy
from sim.memory.cpu_swap import CpuSwapPolicy
from sim.memory.d2d_swap import D2DSwapPolicy
from sim.memory.none import NoPolicy
from sim.memory.per_stage import SEPARATOR, PerStagePolicy
from sim.memory.recompute import RecomputePolicy
from sim.memory.zero_offload import ZeroOffloadPolicy

POLICIES: dict[str, type[MemoryPolicy]] = {
    cls.name: cls for cls in (NoPolicy, RecomputePolicy, CpuSwapPolicy, D2DSwapPolicy,
                              ChunkedPolicy, ZeroOffloadPolicy, AutoPolicy)
}


class PolicyParameterError(ValueError):
    """A known policy with parameters it does not accept."""


def get_policy(spec: str) -> MemoryPolicy:
    """A policy instance from its spec (module doc).

    Raises:
        KeyError: unknown name (the message lists the known ones).
        PolicyParameterError: bad parameters (the message says what is expected).
    """
    if SEPARATOR in spec:
        policy: MemoryPolicy = PerStagePolicy([get_policy(p.strip())
                                               for p in spec.split(SEPARATOR)])
    else:
        name, *args = spec.strip().split(":")
        if name not in POLICIES:
            raise KeyError(f"unknown memory policy {name!r}; known: {', '.join(sorted(POLICIES))}"
                           " (parameters after ':', one policy per stage joined by '|')")
        try:
            policy = POLICIES[name].from_args(args)
        except ValueError as exc:
            raise PolicyParameterError(f"memory policy {spec!r}: {exc}") from None
    policy.spec = spec
    return policy


def policy_names() -> list[str]:
    return sorted(POLICIES)
