"""Registry of memory policies by name."""

from __future__ import annotations

from sim.memory.base import MemoryPolicy
from sim.memory.none import NoPolicy

POLICIES: dict[str, type[MemoryPolicy]] = {NoPolicy.name: NoPolicy}


def get_policy(name: str) -> MemoryPolicy:
    """A policy instance by name.

    Raises:
        KeyError: unknown name (the message lists the known ones).
    """
    try:
        return POLICIES[name]()
    except KeyError:
        raise KeyError(
            f"unknown memory policy {name!r}; known: {', '.join(sorted(POLICIES))}"
        ) from None


def policy_names() -> list[str]:
    return sorted(POLICIES)
