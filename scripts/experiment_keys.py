"""The table of experiment keys, generated from the pydantic schema (``sim.config``).

The docs build puts it in ``docs/reference/experiment.md`` (``docs/hooks.py``), so it cannot go
stale; ``python scripts/experiment_keys.py`` prints it; ``tests/test_experiment_keys.py`` checks
that it lists every key of the schema.
"""

from __future__ import annotations

import re
import sys
import typing

from pydantic import BaseModel

from sim.config import ExperimentConfig


def _models(annotation: object) -> list[tuple[type[BaseModel], bool]]:
    """The pydantic models inside ``annotation``: ``(model, in a list)``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [(annotation, False)]
    out = []
    for arg in typing.get_args(annotation):
        out += [(m, listed or typing.get_origin(annotation) is list) for m, listed in _models(arg)]
    return out


def _type(annotation: object) -> str:
    text = re.sub(r"sim\.config\.(?:\w+\.)*", "", str(annotation).replace("typing.", ""))
    text = re.sub(r"Annotated\[(\w+), [^\]]*\]", r"\1", text)  # constraints: see the text
    return (
        text.replace("<class '", "")
        .replace("'>", "")
        .replace("NoneType", "None")
        .replace("|", "or")
    )


def _default(field: typing.Any) -> str:
    if field.is_required():
        return "required"
    if field.default_factory is not None:
        value = field.default_factory()
        return "(section)" if isinstance(value, BaseModel) else f"`{value!r}`"
    return "`" + repr(field.default).replace("|", "or") + "`"


def rows(model: type[BaseModel] = ExperimentConfig, prefix: str = "") -> list[tuple[str, ...]]:
    """``(key, type, default, description)`` for every field, sections followed by theirs."""
    out = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        subs = _models(field.annotation)
        text = field.description or (subs[0][0].__doc__ or "").strip().split("\n")[0]
        desc = " ".join(text.split()).replace("|", "or")
        out.append((key, _type(field.annotation), _default(field), desc))
        for sub, listed in subs:
            out += rows(sub, f"{key}[]." if listed else f"{key}.")
    return out


def table() -> str:
    """The markdown table: key, type, default, what."""
    lines = ["| key | type | default | what |", "| --- | --- | --- | --- |"]
    lines += [f"| `{k}` | {t} | {d} | {w} |" for k, t, d, w in rows()]
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
    print(f"{len(rows())} keys", file=sys.stderr)
