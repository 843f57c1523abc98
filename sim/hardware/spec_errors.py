"""The message of a hardware description that fails its schema (:class:`HardwareSpec`): every
problem as ``field: message``, unknown keys first with the key they probably meant
(:data:`KEY_MEANT`, else the closest allowed key) and the keys allowed there, and, for a
mapping without ``base``, how to set figures over a preset (:data:`NO_BASE_HINT`)."""

from __future__ import annotations

import difflib
from typing import Any, get_args, get_origin

from pydantic import BaseModel, ValidationError

from sim.errors import InputError, bound_message
from sim.hardware.spec import HardwareSpec


def join_field(prefix: str | None, rest: str) -> str:
    """``'hardware'`` + ``'gpu.memory'`` -> ``'hardware.gpu.memory'`` (either may be empty)."""
    return f"{prefix}.{rest}" if prefix and rest else (prefix or rest)


def _allowed_keys(loc: tuple[Any, ...]) -> list[str] | None:
    model: Any = HardwareSpec
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        if (
            not (isinstance(model, type) and issubclass(model, BaseModel))
            or part not in model.model_fields
        ):
            return None
        model = model.model_fields[part].annotation
        while get_origin(model) is not None:  # list[X], X | None
            model = next((a for a in get_args(model) if a is not type(None)), None)
    if isinstance(model, type) and issubclass(model, BaseModel):
        return list(model.model_fields)
    return None


KEY_MEANT = {"preset": "base", "gpu_memory": "gpu: {memory: ...}", "gpus": "num_gpus"}
"""Keys a newcomer writes for a hardware key of another name (``preset: dgx-h100`` for
``base:``), offered when the key is unknown."""


def _key_hint(key: str, allowed: list[str]) -> str:
    meant = KEY_MEANT.get(key)
    if meant is None or meant.split(":")[0] not in allowed:
        close = difflib.get_close_matches(key, allowed, n=1)
        meant = close[0] if close else None
    return f" (did you mean '{meant}'?)" if meant else ""


NO_BASE_HINT = (
    " (a hardware mapping without 'base' describes a whole server; to change some of a "
    "preset's figures write base: PRESET beside them, e.g. {base: dgx-h100, gpu: {memory: "
    "40 GiB}})"
)
"""Said of a missing field of a hardware mapping that names no ``base`` preset."""


def spec_error(
    exc: ValidationError, file: str | None, field: str | None, based: bool = True
) -> InputError:
    """One :class:`InputError` for every problem of ``exc`` (module doc), naming ``file`` and
    the first problem's field under ``field``; ``based``: the mapping names a ``base``."""
    lines = []
    # unknown keys first: a misnamed key also leaves the keys it meant "Field required"
    errors = exc.errors(include_url=False)
    for err in sorted(errors, key=lambda e: e["type"] != "extra_forbidden"):
        loc = tuple(err["loc"])
        msg = bound_message(dict(err), with_input=False)  # the input is in bytes, seconds...
        msg = msg or err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            allowed = _allowed_keys(loc)
            msg = f"unknown key '{loc[-1]}'{_key_hint(str(loc[-1]), allowed or [])}" + (
                f"; allowed keys: {', '.join(allowed)}" if allowed else ""
            )
        lines.append((join_field(field, ".".join(str(p) for p in loc)), msg))
    first_field, first_msg = lines[0]
    if not based and any(e["type"] == "missing" for e in errors):
        first_msg += NO_BASE_HINT
    more = "".join(f"\n  {f}: {m}" for f, m in lines[1:])
    return InputError(
        first_msg + (f"\n  (and {len(lines) - 1} more){more}" if more else ""),
        file=file,
        field=first_field,
    )
