"""pipesim's native trace format: a per-layer CSV plus a YAML sidecar.

A trace named ``gnmt16`` is two files side by side:

``gnmt16.csv``
    One row per layer, input side first, with the header
    ``name,fwd_s,bwd_s,param_bytes,act_bytes,out_bytes,bwd_input_s,bwd_weight_s,flops``, and
    optionally ``attn_core_act_bytes,attn_core_flops`` (the attention core's stash and forward
    FLOPs, for selective recompute), ``fwd_ops,bwd_ops`` (the ops the host issues for the
    forward and the backward, :mod:`sim.hardware.host_ops`) and ``fwd_modules,fwd_functions``
    (its forward's ``nn.Module`` calls and ``autograd.Function`` applies), ``param_tensors``
    (the parameter tensors it owns) and ``trainable_bytes`` (the bytes of its parameters an
    optimizer updates, the rest frozen: LoRA). Units are in the column names: seconds
    and bytes for one micro-batch; ``flops`` is forward FLOPs per micro-batch; ops are counts
    per micro-batch. Every column after ``out_bytes`` is optional: leave the cell empty (or,
    for the last eight, omit the column).
``gnmt16.yaml``
    ``name``, ``microbatch_size``, ``dtype``, ``device`` and ``provenance`` (a mapping with at
    least ``source``; by convention also ``command``, ``date`` and ``notes``), and optionally
    ``profiles``: further measured micro-batch sizes, each in ``gnmt16.b<size>.csv`` beside it
    (same columns and layers; :attr:`~sim.trace.schema.Trace.profiles`), and ``shared``: the
    parameters several layers hold (``[{layers: [0, 7], param_bytes: 12288, names: [...]}]``,
    :class:`~sim.trace.schema.SharedParams`; their bytes are in the first holder's
    ``param_bytes`` only). Unknown top-level keys are errors.

Rows are numbered from 1 (the header is not a row), so an error such as
``gnmt16.csv: field 'fwd_s': row 3 (layer 'h.2'): fwd_s: must be a finite number >= 0, got -1.0``
points at the third layer. Both files are written atomically (temporary file in the same
directory, then :func:`os.replace`), so a reader never sees half a trace file.
"""

from __future__ import annotations

import csv
import difflib
import io
import math
import os
from pathlib import Path
from typing import Any

import yaml

from sim.atomic import atomic_write_text
from sim.errors import InputError
from sim.textio import read_text, read_yaml_file
from sim.trace.schema import OPTIONAL_FIELDS, LayerProfile, SharedParams, Trace, dtype_bytes

COLUMNS = ("name", "fwd_s", "bwd_s", "param_bytes", "act_bytes", "out_bytes", *OPTIONAL_FIELDS)
"""The CSV's columns: the six required, then :data:`~sim.trace.schema.OPTIONAL_FIELDS`."""
REQUIRED = COLUMNS[:6]
EXTRA = COLUMNS[9:]
"""Optional columns written only when some layer has a value (selective-recompute inputs,
op counts)."""
SIDECAR_KEYS = ("name", "microbatch_size", "dtype", "device", "provenance")
OPTIONAL_KEYS = ("profiles", "shared")
SIDECAR_MEANING = {
    "name": "the model's name",
    "microbatch_size": "the samples per micro-batch the CSV's seconds and bytes are for",
    "dtype": "the training dtype, fp16, bf16 or fp32",
    "device": "the GPU the times were measured on (e.g. H100-SXM5-80GB)",
    "provenance": "where the times come from, a mapping with at least 'source' (e.g. "
    "{source: 'torch.profiler on 1x H100, my_train.py'}; by convention command, date, notes)",
}
"""What each sidecar key says, for the message when one is missing."""
SIDECAR_EXAMPLE = (
    "'name: {name}, microbatch_size: 1, dtype: bf16, device: H100-SXM5-80GB, provenance: "
    "{{source: where the times come from}}', one key per line (docs: sim.trace.native)"
)


def trace_paths(path: str | os.PathLike[str]) -> tuple[Path, Path]:
    """The ``(csv, yaml)`` pair for ``x.csv``, ``x.yaml``, ``x.yml`` or a bare ``x``.

    For a ``.csv`` or bare path whose ``.yaml`` sidecar is absent but a ``.yml`` exists, the
    ``.yml`` is returned.
    """
    p = Path(path)
    stem = trace_stem(p)
    csv_path = stem.with_name(stem.name + ".csv")
    yaml_path = stem.with_name(stem.name + ".yaml")
    if p.suffix == ".yml" or (
        not yaml_path.exists() and stem.with_name(stem.name + ".yml").exists()
    ):
        yaml_path = stem.with_name(stem.name + ".yml")
    return csv_path, yaml_path


def trace_stem(p: Path) -> Path:
    """A trace's path without ``.csv``/``.yaml``/``.yml``: ``traces/x.csv`` -> ``traces/x``
    (its files are ``<stem>.csv`` and ``<stem>.yaml``)."""
    return p.with_suffix("") if p.suffix in (".csv", ".yaml", ".yml") else p


def _fmt(v: float | None) -> str:
    if v is None:
        return ""
    v = float(v)
    return str(int(v)) if v.is_integer() else repr(v)


def write_trace(trace: Trace, path: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Write ``trace`` as ``<stem>.csv`` + ``<stem>.yaml``, each atomically.

    Args:
        trace: the trace; every layer must pass :meth:`LayerProfile.problems`.
        path: ``<stem>.csv``, ``<stem>.yaml`` or ``<stem>``; the parent directory must exist.

    Returns:
        The ``(csv_path, yaml_path)`` written.

    Raises:
        ValueError: a layer is invalid, the dtype is unknown or the microbatch size is not a
            positive integer (the file would not read back).
    """
    dtype_bytes(trace.dtype)
    if not isinstance(trace.microbatch_size, int) or trace.microbatch_size < 1:
        raise ValueError(
            f"microbatch_size must be a positive integer, got {trace.microbatch_size!r}"
        )
    if trace.profile_problems():
        raise ValueError("; ".join(trace.profile_problems()))
    chains = {trace.microbatch_size: trace.layers, **trace.profiles}
    for chain in chains.values():
        for i, layer in enumerate(chain, start=1):
            if layer.problems():
                raise ValueError(f"row {i} (layer {layer.name!r}): {'; '.join(layer.problems())}")
    side = {
        "name": trace.name,
        "microbatch_size": trace.microbatch_size,
        "dtype": trace.dtype,
        "device": trace.device,
        "provenance": dict(trace.provenance),
    }
    if trace.profiles:
        side["profiles"] = sorted(trace.profiles)
    for g in trace.shared:
        if g.problems(len(trace.layers)):
            raise ValueError(f"shared: {'; '.join(g.problems(len(trace.layers)))}")
    if trace.shared:
        side["shared"] = [
            {"layers": list(g.layers), "param_bytes": g.param_bytes, "names": list(g.names)}
            for g in trace.shared
        ]
    stem = trace_stem(Path(path))
    csv_path = stem.with_name(stem.name + ".csv")
    yaml_path = stem.with_name(stem.name + ".yaml")
    for b in sorted(trace.profiles):
        atomic_write_text(stem.with_name(f"{stem.name}.b{b}.csv"), _csv_text(trace.profiles[b]))
    atomic_write_text(csv_path, _csv_text(trace.layers))
    atomic_write_text(yaml_path, yaml.safe_dump(side, sort_keys=False, allow_unicode=True))
    return csv_path, yaml_path


def _csv_text(chain: tuple[LayerProfile, ...]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    cols = [
        c
        for c in COLUMNS
        if c not in EXTRA or any(getattr(layer, c) is not None for layer in chain)
    ]
    w.writerow(cols)
    for layer in chain:
        w.writerow([layer.name] + [_fmt(getattr(layer, c)) for c in cols[1:]])
    return buf.getvalue()


def read_trace(path: str | os.PathLike[str]) -> Trace:
    """Read a native trace from its ``.csv`` or ``.yaml`` path (the other file is beside it).

    Args:
        path: ``<stem>.csv``, ``<stem>.yaml``/``.yml`` or ``<stem>``.

    Returns:
        The :class:`Trace`; numbers as floats, empty optional cells as ``None``.

    Raises:
        InputError: a file is missing or malformed; a required column or cell is missing; a
            cell is not a number; a value is negative or infinite; an unknown column or sidecar
            key. The error names the file and the field (``row N (layer 'x'): fwd_s``).
    """
    csv_path, yaml_path = trace_paths(path)
    meta = _read_sidecar(yaml_path)
    layers = _read_layers(csv_path)
    profiles = {}
    for b in meta.get("profiles") or []:
        p = csv_path.with_name(f"{trace_stem(csv_path).name}.b{b}.csv")
        profiles[b] = _read_layers(p)
        if [x.name for x in profiles[b]] != [x.name for x in layers]:
            raise InputError(
                f"layer names differ from {csv_path.name}'s; profile the same model at every size",
                file=str(p),
                field="name",
            )
    return Trace(
        name=meta["name"],
        layers=layers,
        microbatch_size=meta["microbatch_size"],
        dtype=meta["dtype"],
        device=meta["device"],
        provenance=meta["provenance"],
        profiles=profiles,
        shared=_read_shared(meta.get("shared"), len(layers), str(yaml_path)),
    )


def _read_shared(raw: Any, n_layers: int, f: str) -> tuple[SharedParams, ...]:
    """The sidecar's ``shared`` list (see the module docstring).

    Raises:
        InputError: not a list of mappings with ``layers``, ``param_bytes`` (and ``names``),
            or an invalid entry (naming ``shared.<i>.<field>``).
    """
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise InputError(f"must be a list, got {type(raw).__name__}", file=f, field="shared")
    out = []
    for i, item in enumerate(raw):
        keys = {"layers", "param_bytes", "names"}
        if not isinstance(item, dict) or not {"layers", "param_bytes"} <= set(item) <= keys:
            raise InputError(
                "must be a mapping with layers, param_bytes and optionally names",
                file=f,
                field=f"shared.{i}",
            )
        layers, names = item["layers"], item.get("names") or []
        if not isinstance(layers, list) or not isinstance(names, list):
            raise InputError("layers and names must be lists", file=f, field=f"shared.{i}")
        group = SharedParams(tuple(layers), item["param_bytes"], tuple(map(str, names)))
        problems = group.problems(n_layers)
        if problems:
            raise InputError(problems[0], file=f, field=f"shared.{i}.{problems[0].split(':')[0]}")
        out.append(group)
    return tuple(out)


def _read_sidecar(path: Path) -> dict[str, Any]:
    f = str(path)
    if not path.exists():
        raise InputError(
            "trace sidecar not found: every <name>.csv needs a <name>.yaml beside it, e.g. "
            + SIDECAR_EXAMPLE.format(name=path.stem),
            file=f,
        )
    meta = read_yaml_file(path, what="trace sidecar")
    if not isinstance(meta, dict):
        raise InputError("expected a mapping with keys " + ", ".join(SIDECAR_KEYS), file=f)
    if "models" in meta:  # an experiment given as a trace (sim trace show, sim partition)
        traces = [m.get("trace") for m in meta["models"] or [] if isinstance(m, dict)]
        named = ", ".join(str(t) for t in traces if t)
        raise InputError(
            "is a pipesim experiment, not a trace" + (f": its traces are {named}" if named else ""),
            file=f,
        )
    unknown = sorted(set(meta) - set(SIDECAR_KEYS) - set(OPTIONAL_KEYS))
    if unknown:
        raise InputError(
            f"unknown key(s) {', '.join(unknown)}; allowed: "
            f"{', '.join(SIDECAR_KEYS + OPTIONAL_KEYS)}",
            file=f,
            field=unknown[0],
        )
    extra = meta.get("profiles")
    if extra is not None and (
        not isinstance(extra, list)
        or any(
            isinstance(b, bool)
            or not isinstance(b, int)
            or b < 1
            or b == meta.get("microbatch_size")
            for b in extra
        )
    ):
        raise InputError(
            f"must be a list of further micro-batch sizes (positive integers other "
            f"than microbatch_size), got {extra!r}",
            file=f,
            field="profiles",
        )
    missing = [key for key in SIDECAR_KEYS if meta.get(key) is None]
    if missing:  # every one at once: a hand-written sidecar took a run per key to learn them
        also = "".join(f"; and {k}: {SIDECAR_MEANING[k]}" for k in missing[1:])
        raise InputError(f"missing: {SIDECAR_MEANING[missing[0]]}{also}", file=f, field=missing[0])
    for key in ("name", "dtype", "device"):
        if not isinstance(meta[key], str):
            raise InputError(f"must be a string, got {meta[key]!r}", file=f, field=key)
    mb = meta["microbatch_size"]
    if isinstance(mb, bool) or not isinstance(mb, int) or mb < 1:
        raise InputError(f"must be a positive integer, got {mb!r}", file=f, field="microbatch_size")
    try:
        dtype_bytes(meta["dtype"])
    except ValueError as e:
        raise InputError(str(e), file=f, field="dtype") from None
    if not isinstance(meta["provenance"], dict) or "source" not in meta["provenance"]:
        raise InputError("must be a mapping with at least 'source'", file=f, field="provenance")
    return meta


def _read_layers(path: Path) -> tuple[LayerProfile, ...]:
    f = str(path)
    text = read_text(path, what="trace file")
    cols, records = _regular_rows(text) or _pandas_rows(text, f)
    for c in REQUIRED:
        if c not in cols:
            near = difflib.get_close_matches(c, [x for x in cols if x not in COLUMNS], n=1)
            unit = "seconds" if c.endswith("_s") else "bytes" if c.endswith("_bytes") else "text"
            had = f" (the header has {near[0]!r}: write {c}, in {unit})" if near else ""
            raise InputError(
                f"missing column{had}; the header needs {','.join(REQUIRED)} (seconds and "
                f"bytes per micro-batch), then any of {','.join(COLUMNS[6:])}",
                file=f,
                field=c,
            )
    unknown = [c for c in cols if c not in COLUMNS]
    if unknown:
        raise InputError(f"unknown column; allowed: {', '.join(COLUMNS)}", file=f, field=unknown[0])
    if len(records) == 0:
        raise InputError("no layers (the CSV has a header but no rows)", file=f)
    return tuple(_row_to_layer(i, row, f) for i, row in enumerate(records, start=1))


def _regular_rows(text: str) -> tuple[list[str], list[dict[str, Any]]] | None:
    """The columns (stripped) and rows of a regular CSV (distinct column names, every
    non-empty line as many cells as the header) read by the standard :mod:`csv` module, the
    cells as :func:`_pandas_rows` gives them; None for any other text, which pandas then reads
    (and names what is wrong with it). A trace is read before the first simulation, and
    pandas takes 0.2 CPU s to import (issue 28)."""
    try:
        rows = [r for r in csv.reader(io.StringIO(text), skipinitialspace=True) if r]
    except csv.Error:
        return None
    if not rows or len(set(rows[0])) < len(rows[0]):
        return None
    header = rows[0]
    if any(len(r) != len(header) for r in rows):
        return None
    cols = [c.strip() for c in header]
    return cols, [dict(zip(cols, r, strict=True)) for r in rows[1:]]


def _pandas_rows(text: str, f: str) -> tuple[list[str], list[dict[str, Any]]]:
    """The columns (stripped) and rows of the CSV ``text`` as pandas reads them, every cell a
    string (a missing one NaN).

    Raises:
        InputError: pandas cannot read it (naming the file ``f``).
    """
    import pandas as pd  # on first use: `import sim.api` stays fast

    try:
        df = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False, skipinitialspace=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, csv.Error) as e:
        raise InputError(f"not a readable CSV: {' '.join(str(e).split())}", file=f) from None
    cols = [c.strip() for c in df.columns]
    df.columns = cols
    return cols, df.to_dict("records")


def _row_to_layer(i: int, row: dict[str, str], f: str) -> LayerProfile:
    name = row["name"].strip()
    where = f"row {i} (layer {name!r})"
    if not name:
        raise InputError(f"{where}: name: missing", file=f, field="name")
    values: dict[str, float | None] = {}
    for col in COLUMNS[1:]:
        cell = str(row.get(col, "")).strip()
        if cell == "":
            values[col] = math.nan if col in REQUIRED else None
            continue
        try:
            values[col] = float(cell)
        except ValueError:
            raise InputError(f"{where}: {col}: not a number: {cell!r}", file=f, field=col) from None
    layer = LayerProfile(name=name, **values)  # type: ignore[arg-type]
    problems = layer.problems()
    if problems:
        col = problems[0].split(":", 1)[0]
        raise InputError(f"{where}: {problems[0]}", file=f, field=col)
    return layer
