"""The ``framework:`` key's spec text ``name[option,option=value]``: written from a mapping, and
read back into a profile name and its options."""

from __future__ import annotations

import re
from typing import Any

from pydantic_core import PydanticCustomError


def framework_spec_of(value: dict[str, Any]) -> str:
    """The spec string ``name[option,option=value]`` of a ``framework:`` mapping
    (``{name: megatron-lm, overlap_grad_reduce: true}``), options in their written order; the
    profile checks the names and values (:mod:`sim.framework.options`).

    Raises:
        PydanticCustomError: no ``name``, or a value that is a list, a mapping or text with
            characters other than letters, digits and ``_.+-`` (a comma-separated list).

    Example:
        >>> framework_spec_of({"name": "megatron-lm", "tp_comm_overlap": True, "cuda_graph": "full"})
        'megatron-lm[tp_comm_overlap=true,cuda_graph=full]'
    """
    opts = dict(value)
    name = opts.pop("name", None)
    if not isinstance(name, str) or not name.strip():
        raise PydanticCustomError(
            "framework_name", "a framework mapping needs name: (the profile, e.g. megatron-lm)"
        )
    parts = []
    for k, v in opts.items():
        if isinstance(v, list | dict) or not _SPEC_TEXT.match(_spec_value(v)):
            raise PydanticCustomError(
                "framework_option",
                "framework option {key}: {value} is not a plain value (a word or a number; "
                "join several module names with '+', e.g. cuda_graph_scope: attn+moe_router)",
                {"key": k, "value": repr(v)},
            )
        parts.append(f"{k}={_spec_value(v)}")
    return f"{name.strip()}[{','.join(parts)}]" if parts else name.strip()


def _spec_value(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


_SPEC_TEXT = re.compile(r"^[A-Za-z0-9_.+-]+$")


def parse_framework_spec(text: str) -> tuple[str, dict[str, str]]:
    """``(profile name, {option: value text})`` of a spec string ``name[a,b=c]`` (an option
    without ``=`` is ``true``); a plain name has no options.

    Raises:
        ValueError: unbalanced brackets, an empty option, or text after ``]``.

    Example:
        >>> parse_framework_spec("megatron-lm[overlap_grad_reduce,cuda_graph=full_iteration]")
        ('megatron-lm', {'overlap_grad_reduce': 'true', 'cuda_graph': 'full_iteration'})
    """
    text = text.strip()
    if "[" not in text and "]" not in text:
        return text, {}
    name, sep, rest = text.partition("[")
    if not sep or not rest.endswith("]") or "[" in rest[:-1] or "]" in rest[:-1]:
        raise ValueError(f"{text!r}: write name[option,option=value]")
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in rest[:-1].split(","))):
        key, eq, val = part.partition("=")
        if not key.strip() or (eq and not val.strip()):
            raise ValueError(f"{text!r}: empty option in {part!r}")
        out[key.strip()] = val.strip() if eq else "true"
    return name.strip(), out
