"""One shape for every plug-in kind: a class per implementation and a :class:`Registry` of them.

Memory policies (:mod:`sim.memory.registry`) and pipeline schedules
(:mod:`sim.schedules.registry`) are registries of classes that carry their own parsing, bounds
and replay capability; the code that uses them asks the class, never the name. A new kind (a
framework profile named by an experiment's ``framework:`` key, say) is a base class, one module
per implementation and one ``Registry`` listing them: the experiment's string is looked up once
(:meth:`Registry.get`) and the class answers from then on.

Example:
    >>> class Fast:
    ...     name = "fast"
    >>> kinds = Registry("profile", [Fast], aliases={"quick": "fast"})
    >>> kinds.get("Quick") is Fast, kinds.names()
    (True, ['fast'])
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from typing import Generic, TypeVar

T = TypeVar("T")


class UnknownName(KeyError):
    """An unknown plug-in name; ``str()`` is the plain message listing the known names."""

    def __str__(self) -> str:
        return str(self.args[0])


def _fold(name: str) -> str:
    """Names match ignoring case and surrounding blanks, with ``-`` read as ``_``."""
    return name.strip().lower().replace("-", "_")


class Registry(Generic[T]):
    """Name -> class for one plug-in kind, in registration order.

    Args:
        kind: what the classes are, for messages (``"memory policy"``).
        classes: the implementations; each has a class attribute ``name``.
        aliases: other accepted name -> canonical name.
        known: how the message of an unknown name lists the known ones; receives the
            canonical names and the aliases.

    Raises:
        ValueError: two classes share a name, or an alias names no class.
    """

    def __init__(
        self,
        kind: str,
        classes: Iterable[type[T]],
        *,
        aliases: Mapping[str, str] | None = None,
        known: Callable[[list[str], list[str]], str] | None = None,
    ) -> None:
        self.kind = kind
        self._classes: dict[str, type[T]] = {}
        for cls in classes:
            key = _fold(cls.name)  # type: ignore[attr-defined]
            if key in self._classes:
                raise ValueError(f"two {kind} classes are named {key!r}")
            self._classes[key] = cls
        self.aliases = dict(aliases or {})
        for alias, target in self.aliases.items():
            if _fold(target) not in self._classes:
                raise ValueError(f"{kind} alias {alias!r} names no class ({target!r})")
        self._known = known or (lambda names, _aliases: f"known: {', '.join(names)}")

    def get(self, name: str) -> type[T]:
        """The class registered under ``name`` or one of its aliases (:func:`_fold` applies).

        Raises:
            UnknownName: a :class:`KeyError` whose message lists the known names.
        """
        key = _fold(name)
        key = _fold(self.aliases.get(key, key))
        try:
            return self._classes[key]
        except KeyError:
            known = self._known(self.names(), list(self.aliases))
            close = difflib.get_close_matches(key, self.names(aliases=True), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise UnknownName(f"unknown {self.kind} {name!r}{hint}; {known}") from None

    def names(self, *, aliases: bool = False) -> list[str]:
        """Canonical names in registration order; with ``aliases`` every accepted name."""
        names = [cls.name for cls in self._classes.values()]  # type: ignore[attr-defined]
        return names + list(self.aliases) if aliases else names

    def classes(self) -> list[type[T]]:
        """The registered classes, in registration order."""
        return list(self._classes.values())

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        key = _fold(name)
        return _fold(self.aliases.get(key, key)) in self._classes
