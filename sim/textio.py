"""Reading user files safely: text that must be UTF-8, YAML that must be small and shallow.

Every file a user hands pipesim (experiment, hardware, trace CSV and sidecar, winner) is read
through :func:`read_text` and, for YAML, :func:`load_yaml`, so that a binary file, a file in
another encoding, a key given twice, a deeply nested or alias-exploding YAML document becomes
one :class:`~sim.errors.InputError` naming the file (and the line), never a traceback or a run
that does not end.

The limits are assumptions (no real input comes near them), chosen so that a bad file is
refused in well under a second: :data:`MAX_TEXT_BYTES`, :data:`MAX_YAML_DEPTH`,
:data:`MAX_YAML_NODES`.
"""

from __future__ import annotations

import difflib
import os
from itertools import islice
from pathlib import Path
from typing import Any

import yaml

from sim.errors import InputError

MAX_TEXT_BYTES = 256 * 2**20
"""Largest input file read, in bytes (assumption: a 10,000-layer trace CSV is about 1 MB)."""
MAX_YAML_DEPTH = 32
"""Deepest nesting of mappings and lists accepted in a YAML file (pipesim's schemas use 4)."""
MAX_YAML_NODES = 1_000_000
"""Most values a YAML document may expand to (aliases counted each time they are used)."""


def read_text(
    path: str | os.PathLike[str],
    *,
    label: str | None = None,
    what: str = "file",
    max_bytes: int = MAX_TEXT_BYTES,
) -> str:
    """The text of ``path``, which must be a readable UTF-8 text file.

    Args:
        path: the file.
        label: how messages name the file (default ``str(path)``).
        what: what the file is, for messages (``"trace file"``, ``"hardware file"``...).
        max_bytes: refuse larger files.

    Raises:
        InputError: missing, a directory, unreadable, larger than ``max_bytes``, binary (holds
            a NUL byte) or not UTF-8 (the message gives the line and byte offset).
    """
    p = Path(path)
    name = label or str(p)
    if not p.exists():
        raise InputError(f"{what} not found{nearby_file(p)}", file=name)
    if p.is_dir():
        raise InputError(f"is a directory, expected {_a(what)}", file=name)
    try:
        size = p.stat().st_size
        if size > max_bytes:
            raise InputError(
                f"{what} is {size:,} bytes, more than the {max_bytes:,} accepted", file=name
            )
        data = p.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read {what}: {exc.strerror}", file=name) from None
    return decode_text(data, label=name, what=what)


MAX_LISTED = 5000
"""Most entries of a folder compared with a missing file's name (:func:`nearby_file`)."""


def nearby_file(path: Path, also_in: tuple[Path, ...] = ()) -> str:
    """``" (did you mean 'experiments/dgx1.yaml'?)"`` for a missing ``path``: the file of its
    folder, or of a folder of ``also_in``, whose name is closest to its own or to it with
    ``.yaml`` added (:func:`difflib.get_close_matches`, cutoff 0.75); empty when none is.

    Example:
        >>> nearby_file(Path("experiments/dgx1"))
        " (did you mean 'experiments/dgx1.yaml'?)"
    """
    for folder in (path.parent, *also_in):
        try:
            names = [e.name for e in islice(folder.iterdir(), MAX_LISTED) if e.is_file()]
        except OSError:
            continue
        for name in (path.name, path.name + ".yaml"):
            close = difflib.get_close_matches(name, names, n=1, cutoff=0.75)
            if close:
                return f" (did you mean '{folder / close[0]}'?)"
    return ""


def _a(what: str) -> str:
    """``what`` with its indefinite article, by its first letter (``an experiment file``).

    Example:
        >>> _a("experiment file"), _a("trace file")
        ('an experiment file', 'a trace file')
    """
    return f"{'an' if what[:1].lower() in 'aeiou' else 'a'} {what}"


def decode_text(data: bytes, *, label: str, what: str = "file") -> str:
    """``data`` as UTF-8 text (a leading byte-order mark is dropped).

    Raises:
        InputError: the bytes hold a NUL (a binary file) or are not UTF-8.
    """
    nul = data.find(b"\x00")
    if nul >= 0:
        raise InputError(
            f"is a binary file (NUL byte at offset {nul}), expected {_a(what)} (UTF-8 text)",
            file=label,
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(
            f"is not UTF-8 text: byte 0x{data[exc.start]:02x} at offset "
            f"{exc.start} (line {line}); save the {what} as UTF-8",
            file=label,
        ) from None


_SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""PyYAML's safe loader on libyaml's parser where PyYAML was built with it (about 8 times
faster: a run parses its experiment, the hardware presets and winner files), else the pure
Python one; both construct only plain YAML types. Not ruamel.yaml, which also rejects a key
given twice and keeps lines: its pure-Python parser took 665 ms for the 23 documents (174 kB)
one ``sim run experiments/dgx1.yaml`` parses, against 49 ms here (issue 30), and reads
``2.6e9`` as a number where PyYAML reads text (also as YAML 1.1): other values in 14 of the
repository's 124 YAML files."""


class _StrictLoader(_SafeLoader):  # type: ignore[valid-type,misc]
    """A safe YAML loader that rejects a key given twice in one mapping."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    keys = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            seen = key in keys
            keys.add(key)
        except TypeError:  # an unhashable key: SafeLoader reports it
            continue
        if seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} appears twice in one mapping", key_node.start_mark
            )
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _check_shape(data: Any, file: str | None) -> None:
    """Walk the parsed document: at most :data:`MAX_YAML_DEPTH` deep and
    :data:`MAX_YAML_NODES` values (iteratively, so a deep document cannot overflow the stack)."""
    stack = [(data, 1)]
    nodes = 0
    while stack:
        value, depth = stack.pop()
        nodes += 1
        if nodes > MAX_YAML_NODES:
            raise InputError(
                f"the YAML expands to more than {MAX_YAML_NODES:,} values "
                "(aliases used recursively?)",
                file=file,
            )
        if isinstance(value, (dict, list)):
            if depth > MAX_YAML_DEPTH:
                raise InputError(
                    f"the YAML is nested more than {MAX_YAML_DEPTH} levels deep", file=file
                )
            items = value.values() if isinstance(value, dict) else value
            stack.extend((v, depth + 1) for v in items)


def load_yaml(text: str, *, file: str | None = None) -> Any:
    """Parse YAML text safely: no duplicate keys, bounded depth and size.

    Raises:
        InputError: a syntax error or duplicated key (with line and column), nesting deeper
            than :data:`MAX_YAML_DEPTH`, or more than :data:`MAX_YAML_NODES` values.
    """
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass: safe
    except RecursionError:
        raise InputError(
            f"the YAML is nested more than {MAX_YAML_DEPTH} levels deep", file=file
        ) from None
    except yaml.YAMLError as exc:
        if "nesting depth" in str(getattr(exc, "problem", "")):  # libyaml's own depth limit
            raise InputError(
                f"the YAML is nested more than {MAX_YAML_DEPTH} levels deep", file=file
            ) from None
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise InputError(f"not valid YAML{at}: {problem}", file=file) from None
    _check_shape(data, file)
    return data


def field_line(text: str, field: str) -> int | None:
    """The line (1-based) where the dotted ``field`` (``models.1.name``) is written in the
    YAML ``text``: its key's line, or the line of the nearest mapping or list above it that
    is written (a missing field: where it belongs). A path whose first part is not at the top
    (a hardware file's errors name ``hardware.links.3``) is looked up without it. None when
    the text does not parse or holds no part of the path."""
    try:
        node = yaml.compose(text, Loader=_SafeLoader)
    except yaml.YAMLError:
        return None
    parts = field.split(".")
    found = _walk(node, parts)
    if found is None and len(parts) > 1:
        found = _walk(node, parts[1:])
    return None if found is None else found.start_mark.line + 1


def _walk(node: Any, parts: list[str]) -> Any:
    """The node of the deepest part of ``parts`` below ``node`` (a key's node for a mapping
    entry), or None when not even the first part is there."""
    found = None
    for part in parts:
        if isinstance(node, yaml.MappingNode):
            hit = next((kv for kv in node.value if kv[0].value == part), None)
            if hit is None:
                break
            found, node = hit
        elif isinstance(node, yaml.SequenceNode) and part.isdigit() and int(part) < len(node.value):
            found = node = node.value[int(part)]
        else:
            break
    return found


def located(exc: InputError) -> InputError:
    """``exc`` with the line where its field is written, when it names a field of a YAML file
    that can be read (:func:`field_line`); else ``exc`` itself. For messages only: it reads
    the file again, after the error."""
    name = exc.file or ""
    if exc.line is not None or not exc.field or exc.field.startswith("-"):
        return exc
    if not name.endswith((".yaml", ".yml")) or not Path(name).is_file():
        return exc
    try:
        line = field_line(read_text(name), exc.field)
    except InputError:
        return exc
    if line is None:
        return exc
    return InputError(exc.message, file=exc.file, field=exc.field, line=line)


def read_yaml_file(
    path: str | os.PathLike[str], *, label: str | None = None, what: str = "YAML file"
) -> Any:
    """:func:`read_text` then :func:`load_yaml`.

    Raises:
        InputError: as those two.
    """
    name = label or str(path)
    return load_yaml(read_text(path, label=name, what=what), file=name)
