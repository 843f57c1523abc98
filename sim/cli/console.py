"""What every ``sim`` command shares: the consoles, and bad input as one line and exit code 2.

Every command turns bad input into one message naming the file (or option) and field, exit
code 2, and no traceback (:func:`friendly`). Units: seconds and bytes inside; the tables print
ms, GiB, GB/s.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from sim.errors import InputError

out = Console(width=None if sys.stdout.isatty() else 140)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 140)

F = TypeVar("F", bound=Callable[..., Any])


def friendly(fn: F) -> F:
    """Run ``fn``; an :class:`InputError` becomes a one-line message and exit code 2, an
    operating-system fault (disk full, permission lost mid-run) one line and exit code 1."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except InputError as exc:
            err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
        except OSError as exc:
            where = f"{exc.filename}: " if exc.filename else ""
            err.print(
                f"[bold red]error:[/] {escape(where + str(exc.strerror or exc))}",
                highlight=False,
                soft_wrap=True,
            )
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


def need_torch() -> None:
    """Fail with install instructions when torch is absent (without importing it here).

    Raises:
        InputError: torch is not installed.
    """
    if importlib.util.find_spec("torch") is None:
        raise InputError(
            "this command needs torch: pip install -e '.[torch]' "
            "(CPU: pip install torch==2.13.0 first)"
        )


def check_choice(value: str, allowed: tuple[str, ...], option: str) -> None:
    """``value`` must be one of ``allowed``.

    Raises:
        InputError: naming ``option``.

    Example:
        >>> check_choice("fp32", ("fp32", "bf16"), "--dtype")
    """
    if value not in allowed:
        raise InputError(f"{value!r} is not one of {', '.join(allowed)}", field=option)
