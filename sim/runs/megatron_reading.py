"""What the Megatron-LM argument mapping has read so far: :class:`Reading` (the flags, the notes
on each, the assumptions), shared by :mod:`sim.runs.megatron_args` and the modules it reads
groups of flags with (:mod:`sim.runs.megatron_model_flags`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sim.runs.argv import is_unexpanded, switch_on
from sim.runs.record import ArgNote


@dataclass
class Reading:
    """What the mapping has read so far: the flags, the notes, the assumptions."""

    flags: dict[str, Any]
    strict: bool
    notes: list[ArgNote] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    done: set[str] = field(default_factory=set)

    def has(self, flag: str) -> bool:
        return flag in self.flags

    def int(self, flag: str, default: int | None = None, minimum: int | None = None) -> int | None:
        """The flag as an integer (``default`` when absent), noted as mapped; one that is no
        whole number, or below ``minimum``, is noted unmapped (the run is refused, naming it)
        and ``default`` returned."""
        if flag not in self.flags:
            return default
        value = self.flags[flag]
        self.done.add(flag)
        if is_unexpanded(value):
            self.unmapped(flag, f"unexpanded shell variable {value!r}: give its value")
            return default
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.unmapped(flag, f"{value!r} is not a number")
            return default
        if number != int(number):
            self.unmapped(flag, f"{value!r} is not a whole number")
            return default
        if minimum is not None and number < minimum:
            self.unmapped(flag, f"must be >= {minimum}, got {value}")
            return default
        return int(number)

    def text(self, flag: str, default: str | None = None) -> str | None:
        if flag not in self.flags:
            return default
        self.done.add(flag)
        value = self.flags[flag]
        return default if value is True else str(value)

    def switch(self, flag: str) -> bool:
        """Whether the switch ``flag`` is on (:func:`~sim.runs.argv.switch_on`), noted as read."""
        self.done.add(flag)
        return switch_on(self.flags.get(flag))

    def mapped(self, flag: str, reason: str) -> None:
        if flag in self.flags:
            self.done.add(flag)
            self.notes.append(ArgNote(flag, str(self.flags[flag]), "mapped", reason))

    def unmapped(self, flag: str, reason: str) -> None:
        self.done.add(flag)
        self.notes.append(ArgNote(flag, str(self.flags.get(flag, "")), "unmapped", reason))
