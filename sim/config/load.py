"""Reading an experiment: a YAML file or a parsed mapping validated into an
:class:`~sim.config.experiment.ExperimentConfig`, the first problem told as an
:class:`~sim.errors.InputError` naming the file and the field."""

from __future__ import annotations

import difflib
import re
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from sim.config.experiment import ExperimentConfig
from sim.errors import BOUNDS, InputError, bound_message, shown
from sim.textio import nearby_file, read_yaml_file

_UNION_TAGS = {
    "int",
    "str",
    "bool",
    "float",
    "list[int]",
    "list[str]",
    "list[bool]",
    "dict[str,any]",
}
"""The names pydantic adds to a location for the branch of a union it tried."""


def _field_path(loc: tuple) -> str:
    """``('sweep', 'stages', 'int')`` -> ``sweep.stages`` (union branch names dropped)."""
    return ".".join(str(p) for p in loc if str(p).replace(" ", "").lower() not in _UNION_TAGS)


def _model_at(loc: tuple) -> type[BaseModel] | None:
    """The pydantic model that holds the keys at ``loc`` (a key path from the top; list
    indices and union tags skipped), or None where the path leaves the models."""
    model: type[BaseModel] = ExperimentConfig
    for part in loc:
        if isinstance(part, int) or str(part).replace(" ", "").lower() in _UNION_TAGS:
            continue
        info = model.model_fields.get(str(part))
        if info is None:
            return None
        found = _model_in(info.annotation)
        if found is None:
            return None
        model = found
    return model


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The first pydantic model in ``annotation`` (``list[M]``, ``M | None``, ...)."""
    todo = [annotation]
    while todo:
        t = todo.pop(0)
        if isinstance(t, type) and issubclass(t, BaseModel):
            return t
        todo[:0] = typing.get_args(t)
    return None


def unknown_key_text(loc: tuple) -> str:
    """What to say of an unknown key at ``loc``: the known key it is closest to, and the keys
    allowed there.

    Example:
        >>> unknown_key_text(("models", 0, "globl_batch"))[:52]
        "unknown key: did you mean 'global_batch'? Keys here:"
    """
    holder = _model_at(loc[:-1])
    if holder is None:
        return "unknown key (remove it or check its spelling; docs/reference/experiment.md)"
    keys = list(holder.model_fields)
    close = difflib.get_close_matches(str(loc[-1]), keys, n=1)
    hint = f": did you mean {close[0]!r}?" if close else " (remove it or check its spelling)."
    return f"unknown key{hint} Keys here: {', '.join(keys)} (docs/reference/experiment.md)"


def parse_experiment(data: Any, *, file: str = "<experiment>") -> ExperimentConfig:
    """Validate a parsed YAML mapping.

    Raises:
        InputError: naming the file and the first offending field.
    """
    if not isinstance(data, dict):
        raise InputError("the experiment must be a YAML mapping (key: value)", file=file)
    if "models" not in data and {"model_type", "architectures"} & set(data):
        raise InputError(HF_CONFIG_GIVEN, file=file)
    try:
        return ExperimentConfig.model_validate(data)
    except ValidationError as exc:
        raise _first_problem(exc, file) from None


def _first_problem(exc: ValidationError, file: str) -> InputError:
    """The first of ``exc``'s problems in a user's words, naming its field; the union branches
    pydantic tried for that field (``int`` or ``list[int]``) count as one problem."""
    errors = exc.errors()
    err = errors[0]
    msg = str(err["msg"]).removeprefix("Value error, ")
    loc = tuple(err["loc"])
    here = _field_path(loc)
    branches = [e for e in errors[1:] if _field_path(tuple(e["loc"])) == here]
    if err["type"] in ("int_type", "bool_type", "string_type", "float_type", "list_type"):
        want = err["type"].split("_")[0].replace("string", "text").replace("int", "integer")
        msg = f"{shown(err['input'])} is not {'an' if want == 'integer' else 'a'} {want}"
        if any("list" in e["type"] + str(e["loc"][-1:]) for e in branches):
            msg += " or a list of them"
    elif err["type"] in ("model_type", "dict_type"):
        msg = f"{shown(err['input'])} is not a mapping (key: value)"
    elif err["type"] in BOUNDS:  # "Input should be greater than 0"
        msg = bound_message(dict(err)) or msg
    elif err["type"] == "extra_forbidden":
        msg = unknown_key_text(loc)
    elif err["type"] == "too_short" and err.get("ctx", {}).get("min_length") == 1:
        msg = "needs at least one entry, got none"
    elif err["type"] == "missing":
        msg = "required field is missing"
    elif err["type"] == "string_pattern_mismatch":
        msg = (
            f"{err['input']!r} is not a valid name: use letters, digits and . _ + - "
            "only, not starting with a dot (it names a folder under results/)"
        )
    elif err["type"] == "literal_error":
        expected = str(err.get("ctx", {}).get("expected", ""))
        msg = f"{shown(err['input'])} is not one of {expected}"
        msg += _literal_hint(str(err["input"]), expected)
    elif err["type"] == "duplicate_name":
        loc = loc + (err["ctx"]["index"], "name")
    paths = dict.fromkeys(_field_path(tuple(e["loc"])) for e in errors)
    others = [f for f in paths if f != here]
    return InputError(msg + _more(others), file=file, field=_field_path(loc))


def _more(fields: list[str], shown: int = 3) -> str:
    """`` (and 1 more problem, at field 'models.1.b')``: where the other problems are (the
    first ``shown``), so that one fix does not lead to the next surprise; "" for none."""
    if not fields:
        return ""
    named = ", ".join(f"'{f}'" for f in fields[:shown])
    rest = f" and {len(fields) - shown} more" if len(fields) > shown else ""
    many = "problem, at field" if len(fields) == 1 else "problems, at fields"
    return f" (and {len(fields)} more {many} {named}{rest})"


LITERAL_MEANT = {
    "adamw": ("adam", "AdamW keeps Adam's state, two moments per parameter: torch.optim.AdamW"),
    "bfloat16": ("bf16", ""),
    "float16": ("fp16", ""),
    "half": ("fp16", ""),
    "float32": ("fp32", ""),
    "float": ("fp32", ""),
}
"""Values a newcomer writes for an allowed one of another name, with why it is the same."""


def _literal_hint(value: str, expected: str) -> str:
    """``" (did you mean 'adam'? ...)"`` for a value outside a field's choices: the synonym of
    :data:`LITERAL_MEANT`, else the closest choice in letter case or spelling."""
    choices = re.findall(r"'([^']*)'", expected)
    meant, why = LITERAL_MEANT.get(value.lower(), (None, ""))
    if meant not in choices:
        lower = {c.lower(): c for c in choices}
        close = difflib.get_close_matches(value.lower(), list(lower), n=1)
        meant, why = (lower[close[0]] if close else None), ""
    return f" (did you mean {meant!r}?{' ' + why if why else ''})" if meant else ""


HF_CONFIG_GIVEN = (
    "is a Hugging Face config.json, not an experiment: name it as a model's trace in one "
    "(models: [{name: m, trace: THIS_FILE, seq_len: 4096, global_batch: 64}], with hardware: "
    "and sweep:; docs/getting-started.md, 'Your own experiment')"
)
"""Said of a ``config.json`` given where an experiment goes."""
CSV_GIVEN = (
    "is a CSV file, not an experiment: sim run and sim memory take an experiment YAML (e.g. "
    "experiments/dgx1.yaml, or a winner.yaml); a trace CSV is named by a model's trace: in "
    "one, and measured runs are read by sim compare"
)
"""Said of a CSV (a trace, a results.csv, measured runs) given where an experiment goes."""


def load_experiment(path: str | Path) -> ExperimentConfig:
    """Read and validate an experiment YAML file.

    Raises:
        InputError: the file is missing, is not valid YAML, or fails validation.
    """
    if not Path(path).exists():  # a name or a path from elsewhere: the shipped experiments
        hint = nearby_file(Path(path), also_in=(Path("experiments"),))
        raise InputError(f"experiment file not found{hint}", file=str(path))
    if Path(path).suffix.lower() == ".csv":
        raise InputError(CSV_GIVEN, file=str(path))
    data = read_yaml_file(path, what="experiment file")
    return parse_experiment(data, file=str(path))
