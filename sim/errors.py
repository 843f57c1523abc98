"""One exception type for every user-facing input error.

The CLI catches :class:`InputError`, prints its message (which names the file and the
field) and exits with code 2, without a traceback.
"""

from __future__ import annotations

import re

EXIT_OK, EXIT_NOTHING_FITS, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 3
"""``sim`` exit codes: 0 done; 1 some model has no configuration that fits (or an operating
system fault such as a full disk); 2 bad input (one message naming the file or option and
field); 3 an internal error in some points (their rows say ``internal error: ...``; the other
points' results are written)."""


class InputError(Exception):
    """Bad user input: a malformed file, an unknown key, an impossible configuration.

    Args:
        message: what is wrong and how to fix it.
        file: the file the input came from, if any.
        field: the dotted path of the offending field inside that file, if any; or the
            command-line option (``--out``), named as an option, or argument (``NAME``, in
            capitals), named as an argument.
        line: the line of ``file`` where ``field`` is written (1-based), where known
            (:func:`sim.textio.located` finds it).
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        field: str | None = None,
        line: int | None = None,
    ):
        self.message = message
        self.file = file
        self.field = field
        self.line = line
        super().__init__(self.__str__())

    def __str__(self) -> str:
        where = ""
        if self.file:
            where = f"{self.file}"
        if self.field:
            kind = "option" if self.field.startswith("-") else "field"
            if re.fullmatch(r"[A-Z][A-Z_]*", self.field):  # a command's argument: NAME, TRACE
                kind = "argument"
            where = f"{where}: {kind} '{self.field}'" if where else f"{kind} '{self.field}'"
        if self.line is not None:
            where = f"{where} (line {self.line})" if self.field else f"{where}, line {self.line}"
        return f"{where}: {self.message}" if where else self.message


def expect_type(value: object, types: type | tuple[type, ...], field: str, what: str) -> None:
    """``value`` must be an instance of ``types`` (``what`` says which, for the message).

    Raises:
        InputError: naming ``field`` and the type given.

    Example:
        >>> expect_type(3, str, "experiment", "a YAML path")
        Traceback (most recent call last):
        ...
        sim.errors.InputError: field 'experiment': expected a YAML path, got int 3
    """
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in _tuple(types)):
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise InputError(f"expected {what}, got {type(value).__name__} {shown}", field=field)


def expect_int(value: object, field: str, minimum: int | None = None) -> int:
    """``value`` must be an int (not a bool) of at least ``minimum``; returns it.

    Raises:
        InputError: naming ``field``.

    Example:
        >>> expect_int(-1, "jobs", 1)
        Traceback (most recent call last):
        ...
        sim.errors.InputError: field 'jobs': must be >= 1, got -1
    """
    expect_type(value, int, field, "an integer")
    assert isinstance(value, int)
    if minimum is not None and value < minimum:
        raise InputError(f"must be >= {minimum}, got {value}", field=field)
    return value


def whole_number(value: object, field: str, file: str | None = None, minimum: int = 1) -> int:
    """A whole number written in a framework's config (an int, or its digits as text, as a log
    prints them) of at least ``minimum``; returns it.

    Raises:
        InputError: naming ``file`` and ``field`` (the config's key).

    Example:
        >>> whole_number("two", "parallelism.tensor_parallel_degree", "job.toml")
        Traceback (most recent call last):
        ...
        sim.errors.InputError: job.toml: field 'parallelism.tensor_parallel_degree': 'two' is not a whole number
    """
    try:
        number = int(str(value).strip()) if not isinstance(value, bool | float) else None
    except ValueError:
        number = None
    if isinstance(value, float) and value.is_integer():
        number = int(value)
    if number is None:
        raise InputError(f"{value!r} is not a whole number", file=file, field=field)
    if number < minimum:
        raise InputError(f"must be >= {minimum}, got {number}", file=file, field=field)
    return number


def expect_number(value: object, field: str, positive: bool = True) -> float:
    """``value`` must be a finite real number (> 0 with ``positive``); returns it as a float.

    Raises:
        InputError: naming ``field``.
    """
    expect_type(value, (int, float), field, "a number")
    number = float(value)  # type: ignore[arg-type]
    if number != number or number in (float("inf"), float("-inf")):
        raise InputError(f"must be finite, got {value}", field=field)
    if positive and not number > 0:
        raise InputError(f"must be > 0, got {value}", field=field)
    return number


BOUNDS = {
    "greater_than": (">", "gt"), "greater_than_equal": (">=", "ge"),
    "less_than": ("<", "lt"), "less_than_equal": ("<=", "le"),
}  # fmt: skip
"""pydantic's bound error types ("Input should be greater than 0"): the comparison and the
key of the error's ``ctx`` holding the bound."""


def shown(value: object) -> str:
    """A value as a YAML file writes it: ``null``, ``true``, ``false``; others as Python's
    ``repr`` (quoted text).

    Example:
        >>> shown(None), shown(True), shown("fp9"), shown(-64)
        ('null', 'true', "'fp9'", '-64')
    """
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    return repr(value)


def bound_message(err: dict, with_input: bool = True) -> str | None:
    """A pydantic error (one of ``ValidationError.errors()``) over a bound, said as
    :func:`expect_int` says it; None for another kind of error. ``with_input=False`` leaves
    out the value, for a field whose input pydantic saw converted (``-80 GiB`` as bytes).

    Example:
        >>> bound_message({"type": "greater_than", "ctx": {"gt": 0.0}, "input": -64})
        'must be > 0, got -64'
    """
    if err.get("type") not in BOUNDS:
        return None
    word, key = BOUNDS[err["type"]]
    bound = err.get("ctx", {}).get(key)
    said = f"must be {word} {bound:g}" if isinstance(bound, float) else f"must be {word} {bound}"
    return f"{said}, got {shown(err.get('input'))}" if with_input else said


def _tuple(types: type | tuple[type, ...]) -> tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)
