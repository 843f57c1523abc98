"""The building blocks of the experiment's models: the strict base every section derives from,
the axis types (one value or a list of them), and the rule for names that become folders."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic_core import PydanticCustomError

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$"
"""Experiment and model names become folder names under results/: letters, digits and
``. _ + -``, not starting with a dot (so never ``..`` or a path)."""
NAME_HELP = " Letters, digits and . _ + - only (it names a folder), not starting with a dot."

IntList = int | list[int]
StrList = str | list[str]


def as_list(value: Any) -> list:
    """``3`` -> ``[3]``; lists unchanged."""
    return list(value) if isinstance(value, (list, tuple)) else [value]


class Strict(BaseModel):
    """What a user writes: unknown keys are errors, and values are not coerced (``true`` is
    not the number 1, ``"4"`` not 4, ``2.5`` not 2: pydantic's strict mode)."""

    model_config = ConfigDict(extra="forbid", strict=True)


def all_positive(value: IntList | None) -> IntList | None:
    """``value`` (one int or a list of them, or None) unchanged when every int is at least 1.

    Raises:
        ValueError: an int below 1 ("must be >= 1, got X").
    """
    for x in as_list(value) if value is not None else []:
        if x < 1:
            raise ValueError(f"must be >= 1, got {x}")
    return value


def no_empty_list(value: Any) -> Any:
    """A sweep axis or a model's own axis given as ``[]`` is an error naming the key (an empty
    axis would leave the grid without a configuration, and the message without its cause)."""
    if isinstance(value, list) and not value:
        raise PydanticCustomError(
            "empty_list", "an empty list: give at least one value (or leave the key out)"
        )
    return value
