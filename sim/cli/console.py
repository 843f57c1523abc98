"""What every ``sim`` command shares: the consoles, logging, and bad input as one line, exit 2.

Every command turns bad input into one message naming the file (or option) and field, exit
code 2, and no traceback (:func:`friendly`); an unexpected exception (a bug) into one line and
exit code 3 (the traceback with ``sim -v``). Units: seconds and bytes inside; the tables print
ms, GiB, GB/s.

Messages about the work (notes, warnings, progress) go to standard error through
:mod:`logging` (the ``sim`` logger; :func:`setup_logging`): rich's handler on a terminal, plain
``note: ...`` / ``warning: ...`` lines in logs and CI, so they never wrap. ``-q`` keeps
warnings and errors only, ``-v`` adds details (every skipped kind, the files written,
tracebacks).
"""

from __future__ import annotations

import importlib.util
import inspect
import io
import json
import logging
import os
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import click
import typer
from rich.console import Console
from rich.highlighter import NullHighlighter
from rich.logging import RichHandler
from rich.markup import escape
from rich.text import Text
from typer.models import ArgumentInfo, OptionInfo

from sim.errors import EXIT_INTERNAL, InputError, bound_message
from sim.textio import located


def _no_flag_metavar() -> None:
    """typer 0.29's rich help prints ``<bool>`` beside every flag (``--no-cache <bool>``),
    which takes no value: show no type for flags (typer.core.TyperOption.display_type_rich)."""
    from typer.core import TyperOption

    shown = TyperOption.display_type_rich

    def display_type_rich(self: TyperOption, ctx: Any) -> str | None:
        if self.is_flag and not self.count:
            return None
        return shown(self, ctx)

    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_no_flag_metavar()


def _option_errors_in_our_words() -> None:
    """typer 0.29 checks an option's value with pydantic and prints its words: ``-j -1`` was
    "Input should be greater than or equal to 0", ``--format yaml`` "Value error, 'yaml' is
    not one of ...". Say them as every other bound is said (:func:`sim.errors.bound_message`:
    "must be >= 0, got -1"), without pydantic's "Value error, " (typer._display.get_error_msg,
    looked up by name in the two modules that call it)."""
    import typer._coercion
    import typer._param_types

    shown = getattr(typer._coercion, "get_error_msg", str)

    def get_error_msg(exc: Any) -> str:
        errors = exc.errors() if hasattr(exc, "errors") else []
        if not errors:
            return shown(exc)
        bound = bound_message(dict(errors[0]), with_input=False)  # the input: as typed
        if bound:
            return f"{bound}, got {errors[0].get('input')}"
        return str(errors[0]["msg"]).removeprefix("Value error, ")

    for module in (typer._coercion, typer._param_types):
        if hasattr(module, "get_error_msg"):
            setattr(module, "get_error_msg", get_error_msg)  # noqa: B010 - a patch


_option_errors_in_our_words()
out = Console(width=None if sys.stdout.isatty() else 140)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 140)

F = TypeVar("F", bound=Callable[..., Any])

LEVEL_NAMES = {
    logging.DEBUG: "debug",
    logging.INFO: "note",
    logging.WARNING: "warning",
    logging.ERROR: "error",
    logging.CRITICAL: "error",
}
"""How each logging level is labelled on the console."""
VERBOSE = typer.Option(
    0,
    "--verbose",
    "-v",
    count=True,
    show_default=False,
    help="More detail (every skipped kind, files, tracebacks).",
)
QUIET = typer.Option(False, "--quiet", "-q", help="Only the answer, warnings and errors.")


class _Plain(logging.Formatter):
    """``note: message`` (one line per message, for logs and CI)."""

    def format(self, record: logging.LogRecord) -> str:
        text = f"{LEVEL_NAMES.get(record.levelno, record.levelname.lower())}: {record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


class _Rich(RichHandler):
    """rich's handler with pipesim's level names (``note``, ``warning``)."""

    def get_level_text(self, record: logging.LogRecord) -> Text:
        name = LEVEL_NAMES.get(record.levelno, record.levelname.lower())
        return Text.styled(name.ljust(8), f"logging.level.{record.levelname.lower()}")


def setup_logging(verbose: int = 0, quiet: bool = False, console: Console | None = None) -> None:
    """Show the ``sim`` logger's messages on standard error: INFO and up (``quiet``: WARNING;
    ``verbose``: DEBUG), through rich's handler on a terminal, else as plain lines; with
    ``console``, through rich's handler on it (a recording console, for a screenshot)."""
    level = logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO
    logger = logging.getLogger("sim")
    for h in [h for h in logger.handlers if getattr(h, "pipesim", False)]:
        logger.removeHandler(h)
    handler: logging.Handler
    if console is not None or sys.stderr.isatty():
        handler = _Rich(
            console=console or Console(stderr=True),
            show_time=False,
            show_path=False,
            markup=False,
            rich_tracebacks=True,
            highlighter=NullHighlighter(),
        )
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_Plain())
    setattr(handler, "pipesim", True)  # noqa: B010 - marks the handlers set up here
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False


def apply_verbosity(verbose: int, quiet: bool) -> None:
    """A command's own ``-v``/``-q`` (when given) over the global ones (``sim -v run``)."""
    if verbose or quiet:
        setup_logging(verbose, quiet)


def quiet_now() -> bool:
    """Whether ``-q`` is in force (notes hidden)."""
    return not logging.getLogger("sim").isEnabledFor(logging.INFO)


def as_typed(exc: InputError, fn: Callable[..., Any]) -> InputError:
    """``exc`` with its field named as the user typed it: a parameter of the command ``fn``
    (``seq_len``, ``stages``) becomes its long option (``--seq-len``), an argument its metavar
    (``NAME``, said "argument"); others (a file's fields, an option already) are returned as
    they are. Errors read "command line: field 'NAME'" before."""
    if exc.file not in (None, "command line") or not exc.field or exc.field.startswith("-"):
        return exc
    for name, par in inspect.signature(fn).parameters.items():
        info = par.default
        metavar = getattr(info, "metavar", None)
        if exc.field not in (name, name.upper(), metavar):
            continue
        if isinstance(info, OptionInfo):
            opts = [o for d in info.param_decls or () for o in d.split("/") if o.startswith("--")]
            typed = opts[0] if opts else "--" + name.replace("_", "-")
        elif isinstance(info, ArgumentInfo):
            typed = (metavar or name).upper()
        else:
            return exc
        return InputError(exc.message, file=exc.file, field=typed, line=exc.line)
    return exc


INTERRUPTED = (
    "interrupted: no output file is left half-written (pipesim writes each whole, then renames it "
    "into place: sim.atomic); those not reached yet are not written"
)
"""Said on Ctrl-C by every command but ``sim run`` (which says what its cache keeps)."""


def friendly(fn: F) -> F:
    """Run ``fn``; an :class:`InputError` becomes a one-line message and exit code 2, an
    operating-system fault (disk full, permission lost mid-run) one line and exit code 1, any
    other exception (a bug) one line and exit code 3 (its traceback with ``-v``); Ctrl-C one
    line (:data:`INTERRUPTED`) and exit code 130; a closed standard output exit code 1."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort, click.ClickException):
            raise
        except InputError as exc:
            shown = str(located(as_typed(exc, fn)))  # with the line where the field is written
            err.print(f"[bold red]error:[/] {escape(shown)}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:  # Ctrl-C (sim run says more: its cache is kept)
            err.print(INTERRUPTED, highlight=False, soft_wrap=True)
            raise typer.Exit(130) from None
        except BrokenPipeError:  # the reader went away (`sim ... --json | head`): say nothing
            _quiet_stdout()
            raise typer.Exit(1) from None
        except OSError as exc:
            where = f"{exc.filename}: " if exc.filename else ""
            err.print(
                f"[bold red]error:[/] {escape(where + str(exc.strerror or exc))}",
                highlight=False,
                soft_wrap=True,
            )
            raise typer.Exit(1) from None
        except Exception as exc:  # noqa: BLE001 - a bug: one line, its own exit code
            logging.getLogger("sim").debug("traceback of the internal error:", exc_info=True)
            err.print(
                f"[bold red]internal error:[/] {escape(type(exc).__name__ + ': ' + str(exc))} "
                "(a bug in pipesim; `sim -v ...` shows the traceback; please report it)",
                highlight=False,
                soft_wrap=True,
            )
            raise typer.Exit(EXIT_INTERNAL) from None

    return wrapper  # type: ignore[return-value]


def _quiet_stdout() -> None:
    """Point standard output at /dev/null, so that the flush at exit does not raise again on
    the closed pipe (https://docs.python.org/3/library/signal.html#note-on-sigpipe)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):  # no file descriptor (a test's buffer)
        pass


def need_torch(instead: str = "") -> None:
    """Fail with install instructions when torch is absent (without importing it here);
    ``instead`` names what does the job without torch, where something does.

    Raises:
        InputError: torch is not installed.
    """
    if importlib.util.find_spec("torch") is None:
        raise InputError(
            "this command needs torch: pip install -e '.[torch]' "
            "(CPU: pip install torch==2.13.0 first)"
            + (f"; without torch: {instead}" if instead else "")
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


def print_csv_as_json(table: Path, notes: list[dict[str, str]]) -> None:
    """A command's CSV as JSON on standard output: ``{"rows": [one record per row], "notes":
    [{"level": "note" | "warning" | ..., "text": ...}, ...]}`` (``sim run --json``'s
    results.csv, ``sim memory --json``'s memory.csv; an empty cell is null)."""
    import pandas as pd  # on first use: a sweep does not wait for its import

    df = pd.read_csv(table, keep_default_na=False, na_values=[""])
    rows = json.loads(df.to_json(orient="records"))
    sys.stdout.write(json.dumps({"rows": rows, "notes": notes}, indent=1) + "\n")
