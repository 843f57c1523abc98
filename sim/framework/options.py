"""Options of a framework profile: the switches a user of the framework sets, each with its source.

A profile (:class:`~sim.framework.base.Framework`) has fixed :class:`~sim.framework.settings.Setting`
s (what the framework always does) and :class:`Option` s (what its command line or config
chooses, e.g. Megatron-LM's ``--overlap-grad-reduce``). An experiment names the options with
the profile, as a mapping or as a spec string::

    framework: {name: megatron-lm, overlap_grad_reduce: true, tp_comm_overlap: true}
    framework: megatron-lm[overlap_grad_reduce,tp_comm_overlap]

Both mean the same profile; :func:`spec` writes the canonical string (options sorted, only
those that differ from their defaults, ``name`` alone for ``true`` and ``name=value``
otherwise), which is what ``results.csv``, the row cache and ``winner.yaml`` store, so a
profile without options keeps its plain name and old results are unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sim.config import parse_framework_spec


@dataclass(frozen=True)
class Option:
    """One option of a framework profile.

    Attributes:
        name: as the experiment writes it (the framework's own name, ``-`` as ``_``).
        default: its value when not set (the framework's default).
        choices: the values it takes (``(False, True)`` for a switch).
        source: where the framework's code defines it and says what it does.
        help: one line: what it changes in the simulation.
    """

    name: str
    default: Any
    choices: tuple[Any, ...]
    source: str
    help: str

    def parse(self, text: Any) -> Any:
        """The value ``text`` (a YAML scalar or the text after ``=`` in a spec) stands for.

        Raises:
            ValueError: a value not among :attr:`choices`, naming them.
        """
        if isinstance(self.default, bool):
            value = _bool(text)
        elif isinstance(self.default, int) and not isinstance(text, bool):
            try:
                value = int(float(text))
            except (TypeError, ValueError):
                value = text
        else:
            value = str(text).strip().lower()
        if self.choices and value not in self.choices:
            shown = ", ".join(_show(c) for c in self.choices)
            raise ValueError(f"option {self.name}: {text!r} is not one of {shown}")
        if not self.choices and isinstance(self.default, int) and not isinstance(value, int):
            raise ValueError(f"option {self.name}: {text!r} is not an integer")
        return value


def _bool(text: Any) -> Any:
    if isinstance(text, bool):
        return text
    low = str(text).strip().lower()
    return {"true": True, "yes": True, "on": True, "1": True}.get(
        low, {"false": False, "no": False, "off": False, "0": False}.get(low, text)
    )


def _show(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def resolve_options(
    profile: str, options: tuple[Option, ...], given: Mapping[str, Any]
) -> dict[str, Any]:
    """Every option of ``options`` with its value: ``given`` (names folded: ``-`` as ``_``,
    any case) over the defaults.

    Raises:
        ValueError: an unknown option (listing the profile's), or a bad value.
    """
    known = {o.name: o for o in options}
    values = {o.name: o.default for o in options}
    for raw, text in given.items():
        name = raw.strip().lower().replace("-", "_")
        if name not in known:
            valid = ", ".join(known) or "none"
            raise ValueError(f"framework {profile} has no option {raw!r}; its options: {valid}")
        values[name] = known[name].parse(text)
    return values


def spec(profile: str, options: tuple[Option, ...], values: Mapping[str, Any]) -> str:
    """The canonical spec string of ``profile`` with ``values`` (module doc).

    Example:
        >>> opt = (Option("b", False, (False, True), "", ""), Option("a", 0, (), "", ""))
        >>> spec("p", opt, {"b": True, "a": 0}), spec("p", opt, {"b": False, "a": 3})
        ('p[b]', 'p[a=3]')
    """
    parts = []
    for o in sorted(options, key=lambda o: o.name):
        v = values.get(o.name, o.default)
        if v == o.default:
            continue
        parts.append(o.name if v is True else f"{o.name}={_show(v)}")
    return f"{profile}[{','.join(parts)}]" if parts else profile


def split_spec(text: str) -> tuple[str, dict[str, Any]]:
    """``(profile name, {option: text})`` of a spec string (:func:`sim.config.
    parse_framework_spec`).

    Raises:
        ValueError: a malformed spec.
    """
    return parse_framework_spec(text)


__all__ = ["Option", "resolve_options", "spec", "split_spec"]
