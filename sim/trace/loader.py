"""One entry point for every kind of trace reference: :func:`load_trace`.

A reference is resolved in this order:

1. **A path that exists**, relative to ``base_dir`` when given (typically the directory of the
   experiment YAML that names it), else to the working directory:

   * ``*.csv``, ``*.yaml``, ``*.yml``: a native trace (:func:`sim.trace.native.read_trace`);
   * ``*.txt`` or a directory holding ``graph.txt``: a PipeDream profile
     (:func:`sim.trace.pipedream.read_pipedream`);
   * ``<path>`` without suffix where ``<path>.csv`` exists: that native trace;
   * ``*.json`` with a ``model_type``: a Hugging Face ``config.json``, read offline into an
     analytic trace at the caller's ``seq_len`` (:func:`sim.trace.from_config.config_trace`).

2. **A name in the traces directory**: ``<traces>/<ref>.csv`` (e.g. ``gnmt16`` ->
   ``traces/gnmt16.csv``), then ``<traces>/<ref>/graph.txt`` (e.g. ``pipedream/vgg16``). The
   traces directory is ``$PIPESIM_TRACES`` when set, else the repository's ``traces/``
   (next to the ``sim`` package), else the copy installed as ``sim.shipped_traces``.

Anything else is an :class:`InputError` that lists the available names.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import os
from pathlib import Path

from sim.errors import InputError
from sim.hardware.gpu_compute import ComputeSpec
from sim.trace.from_config import config_trace
from sim.trace.generator import preset_gpu
from sim.trace.native import read_trace
from sim.trace.pipedream import read_pipedream
from sim.trace.schema import Trace

_NATIVE = (".csv", ".yaml", ".yml")
MAX_LAYER_S = 3600.0
"""Longest forward or backward time of one layer for one micro-batch, in seconds. An
assumption (no real layer comes near an hour) that keeps simulated clocks finite and exact."""
MAX_LAYER_BYTES = float(2**50)
"""Largest byte count of one layer (1 PiB), an assumption of the same kind."""
_TIMES = ("fwd_s", "bwd_s", "bwd_input_s", "bwd_weight_s")
_BYTES = ("param_bytes", "act_bytes", "out_bytes", "attn_core_act_bytes")


def check_scale(trace: Trace, *, file: str) -> None:
    """Refuse a trace no real model has: a layer slower than :data:`MAX_LAYER_S` or bigger
    than :data:`MAX_LAYER_BYTES`, or no compute time at all (nothing to simulate).

    Raises:
        InputError: naming ``file``, the row (counted from 1) and the column.
    """
    for i, layer in enumerate(trace.layers, start=1):
        for col, limit, unit in [(c, MAX_LAYER_S, "s") for c in _TIMES] + [
            (c, MAX_LAYER_BYTES, "B") for c in _BYTES
        ]:
            v = getattr(layer, col)
            if v is not None and v > limit:
                raise InputError(
                    f"row {i} (layer {layer.name!r}): {col}: {v:g} is more than "
                    f"the {limit:g} {unit} a layer may take",
                    file=file,
                    field=col,
                )
    if not sum(layer.fwd_s + layer.bwd_s for layer in trace.layers) > 0:
        raise InputError(
            "every layer has zero forward and backward time; there is nothing to "
            "simulate (check the units: seconds)",
            file=file,
            field="fwd_s",
        )


def traces_dir() -> Path:
    """The directory searched for trace names: ``$PIPESIM_TRACES``, else the repository's
    ``traces/`` (a checkout or an editable install), else the copy installed with the package
    as ``sim.shipped_traces`` (``pip install .``)."""
    env = os.environ.get("PIPESIM_TRACES")
    if env:
        return Path(env)
    repo = Path(__file__).resolve().parents[2] / "traces"
    if (repo / "README.md").is_file() and (repo / "pipedream").is_dir():
        return repo
    spec = importlib.util.find_spec("sim.shipped_traces")
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return repo


def available_traces(directory: str | os.PathLike[str] | None = None) -> list[str]:
    """Names :func:`load_trace` resolves in ``directory`` (default :func:`traces_dir`), sorted:
    the CSVs with their sidecar (not a trace's further profiles, ``NAME.b4.csv``) and the
    PipeDream ``graph.txt`` folders."""
    d = Path(directory) if directory is not None else traces_dir()
    if not d.is_dir():
        return []
    names = {p.stem for p in d.glob("*.csv") if p.with_suffix(".yaml").is_file()}
    names |= {str(p.parent.relative_to(d)) for p in d.rglob("graph.txt")}
    return sorted(names)


def _read_path(p: Path) -> Trace:
    if p.is_dir():
        p = p / "graph.txt"
    if p.suffix in _NATIVE:
        return read_trace(p)
    return read_pipedream(p)


def load_trace(
    ref: str | os.PathLike[str],
    *,
    base_dir: str | os.PathLike[str] | None = None,
    file: str | None = None,
    field: str | None = None,
    seq_len: int | None = None,
    gpu: ComputeSpec | None = None,
) -> Trace:
    """Load the trace ``ref`` names: a path or a shipped name (lookup order in the module doc).

    Args:
        ref: path to a native trace (``.csv``/``.yaml``), a PipeDream ``graph.txt`` (or its
            directory), or a name in the traces directory such as ``gnmt16``.
        base_dir: directory relative paths are resolved against (default: working directory).
        file: the file that holds the reference, named in the error when it cannot be resolved.
        field: the field of ``file`` that holds the reference, for the same message.
        seq_len: tokens per sample, for a reference to a Hugging Face ``config.json``
            (:func:`sim.trace.from_config.config_trace`; required for one).
        gpu: the GPU that times a ``config.json``'s layers (default: the ``dgx-h100``
            preset's H100; ``sim run`` regenerates the trace on the experiment's GPU).

    Returns:
        The :class:`Trace`.

    Raises:
        InputError: the reference resolves to nothing (the message lists the available names),
            to a JSON file that is not a Hugging Face config (a torch profiler trace: the
            message says how to make a trace of it), to a config without ``seq_len``, or to a
            malformed file (the message names that file
            and field).
    """
    raw = Path(ref)
    given = raw if raw.is_absolute() or base_dir is None else Path(base_dir) / raw
    candidates = [given] + ([given.with_name(given.name + ".csv")] if given.name else [])
    d = traces_dir()
    candidates += [d / f"{ref}.csv", d / str(ref) / "graph.txt"]
    for p in candidates:
        if p.exists() and (p.is_file() or (p / "graph.txt").is_file()):
            if p.suffix == ".json":
                return _json_trace(p, seq_len, gpu, file=file, field=field)
            if seq_len is not None:
                raise InputError(
                    f"seq_len applies only to a trace that is a Hugging Face config.json; {p} "
                    "is a trace of its own sequence length: remove seq_len",
                    file=file,
                    field=field.removesuffix(".trace") + ".seq_len" if field else "seq_len",
                )
            trace = _read_path(p)
            check_scale(trace, file=str(p))
            return trace
    names = available_traces(d)
    listing = ", ".join(names) if names else f"none ({d} has no traces)"
    stem = raw.stem if raw.suffix in _NATIVE else str(ref)  # ../traces/x.csv: the name x
    close = difflib.get_close_matches(stem, names, n=1) or difflib.get_close_matches(
        str(ref), names, n=1
    )
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise InputError(
        f"trace {str(ref)!r} not found as a path (relative to "
        f"{base_dir or 'the working directory'}) nor as a name in {d}{hint}; "
        f"available: {listing}",
        file=file,
        field=field,
    )


def _json_trace(
    p: Path, seq_len: int | None, gpu: ComputeSpec | None, *, file: str | None, field: str | None
) -> Trace:
    """A Hugging Face ``config.json`` (it has ``model_type``) as an analytic trace at
    ``seq_len``; any other JSON (a torch profiler trace) is an error saying how to import it."""
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"not a readable JSON file: {exc}", file=str(p)) from None
    if not (isinstance(data, dict) and "model_type" in data):
        raise InputError(
            f"{p} is JSON but not a Hugging Face config.json (it has no model_type); a torch "
            "profiler trace becomes a trace with `sim trace import-kineto` "
            "(docs/guides/own-model.md)",
            file=file,
            field=field,
        )
    model = field.rsplit(".", 1)[0] if field and field.endswith(".trace") else None
    make = f"`sim trace from-config {p} --seq-len S --out traces/NAME`"
    if seq_len is None and model is None:  # a command's argument: it takes traces
        raise InputError(
            f"{p} is a Hugging Face config.json, not a trace: write a trace of it with {make}, "
            "then give traces/NAME.csv",
            file=file,
            field=field,
        )
    if seq_len is None:
        raise InputError(
            f"{p} is a Hugging Face config.json: give the training sequence length as "
            f"{model}.seq_len (e.g. seq_len: 4096), or write a trace of it once with {make}",
            file=file,
            field=f"{model}.seq_len",
        )
    return config_trace(p, seq_len=seq_len, gpu=gpu or preset_gpu("dgx-h100"), field=model)
