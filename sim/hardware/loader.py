"""Load a hardware description: a preset name, a YAML file or an inline mapping.

Presets are the YAML files in ``sim/hardware/presets/`` (package data). Every error the user can
cause (unknown preset, unreadable file, YAML syntax, schema violation, a link to an unknown node)
is raised as :class:`sim.errors.InputError` naming the file and the dotted field path, e.g.
``experiments/dgx1.yaml: field 'hardware.links.3.bandwidth': Input should be greater than 0``.
"""

from __future__ import annotations

import difflib
import re
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sim.config import MAX_GPUS
from sim.errors import InputError
from sim.hardware.build import topology_from_spec
from sim.hardware.preset_names import suggest_presets
from sim.hardware.spec import HardwareSpec
from sim.hardware.spec_errors import join_field, spec_error
from sim.hardware.topology import Topology
from sim.textio import load_yaml, read_text

_MAX_BASE_DEPTH = 8
MAX_LINKS = 65536
"""Most links a hardware description may list (same reason)."""


def _presets_dir() -> Any:
    return resources.files("sim.hardware").joinpath("presets")


def _calibrated_dir() -> Any:
    return resources.files("sim.hardware").joinpath("calibrated")


def list_calibrated() -> list[str]:
    """Names of the bundled calibrated descriptions (``calibrated/*.yaml``: written by ``sim
    calibrate`` on this project's machines, loadable by name like a preset but not a GPU
    server's datasheet, so never matched to a trace's device), sorted."""
    return sorted(
        entry.name[: -len(".yaml")]
        for entry in _calibrated_dir().iterdir()
        if entry.name.endswith(".yaml")
    )


def list_presets() -> list[str]:
    """Names of the bundled hardware presets, sorted (file stems of ``presets/*.yaml``)."""
    return sorted(
        entry.name[: -len(".yaml")]
        for entry in _presets_dir().iterdir()
        if entry.name.endswith(".yaml")
    )


MULTI_SERVER = re.compile(r"^([1-9][0-9]*)x-(.+)$")
"""Preset names ``Nx-PRESET``: ``N`` servers of ``PRESET`` (``384x-dgx-a100-80gb``)."""
NVL_DOMAINS = re.compile(r"^nvl([1-9][0-9]*)x([1-9][0-9]*)-(.+)$")
"""Preset names ``nvlDxN-GPU``: ``N`` NVLink domains of ``D`` GPUs, the preset ``GPU-nvlD``
(``nvl72x4-gb200`` is 4 racks of ``gb200-nvl72``)."""


def multi_server(name: str) -> tuple[int, str] | None:
    """``(N, preset)`` for a name ``Nx-PRESET`` or ``nvlDxN-GPU`` (module constants) whose
    preset is bundled, else None."""
    if not isinstance(name, str):
        return None
    m = MULTI_SERVER.match(name)
    if m is not None and m.group(2) in list_presets():
        return int(m.group(1)), m.group(2)
    m = NVL_DOMAINS.match(name)
    base = f"{m.group(3)}-nvl{m.group(1)}" if m else ""
    if m is not None and base in list_presets():
        return int(m.group(2)), base
    return None


def is_preset(name: str) -> bool:
    """Whether ``name`` is a bundled preset or ``Nx-PRESET`` of one."""
    return isinstance(name, str) and (
        name in list_presets() or name in list_calibrated() or multi_server(name) is not None
    )


def cluster_presets() -> list[str]:
    """The bundled presets with a ``network`` (those ``Nx-PRESET`` accepts)."""
    out = []
    for name in list_presets():
        raw = _preset_raw(name, file=None, field=None)
        if "network" in _resolve_base(raw, None, None):
            out.append(name)
    return out


def read_yaml(text: str, *, file: str | None = None) -> Any:
    """Parse YAML text safely (:func:`sim.textio.load_yaml`: no duplicate keys, bounded depth).

    Raises:
        InputError: a syntax error or a duplicated key, with the line and column.
    """
    return load_yaml(text, file=file)


@cache
def _preset_gpu_models() -> tuple[tuple[str, str], ...]:
    out = []
    for name in list_presets():
        raw = _resolve_base(_preset_raw(name, file=None, field=None), None, None)
        gpu = raw.get("gpu")
        out.append((name, str(gpu.get("model", "")) if isinstance(gpu, dict) else ""))
    return tuple(out)


def preset_gpu_models() -> dict[str, str]:
    """Each bundled preset's GPU model, as its YAML (after ``base:``) gives ``gpu.model``
    (``{'dgx-h100': 'H100-SXM5-80GB', ...}``), in :func:`list_presets` order; read once per
    process. The one table :func:`suggest_presets` and :mod:`sim.hardware.gpu_names` read."""
    return dict(_preset_gpu_models())


def _unknown_preset(name: str, *, file: str | None, field: str | None) -> InputError:
    known = list_presets()
    several, nvl_m = MULTI_SERVER.match(name), NVL_DOMAINS.match(name)
    m = several or nvl_m
    server = m.group(m.lastindex or 0) if m else name
    pool = cluster_presets() if several else known
    close = [k for k in pool if k.startswith(server)] or difflib.get_close_matches(
        server, pool, n=1
    )
    if not m:
        close = suggest_presets(name, preset_gpu_models(), cluster_presets())
    elif several:  # the whole name, as it would load: '8x-dgx-h200' for '8x-dgx-h200x'
        close = [f"{several.group(1)}x-{c}" for c in close]
    elif nvl_m:
        d, n = nvl_m.group(1), nvl_m.group(2)
        close = [
            f"nvl{d}x{n}-{c.removesuffix(f'-nvl{d}')}" for c in close if c.endswith(f"-nvl{d}")
        ]
    hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
    nvl = [k for k in known if re.search(r"-nvl\d+$", k)]
    forms = (
        "'Nx-PRESET' for N servers of a preset with a network ("
        + ", ".join(cluster_presets())
        + "), e.g. '384x-dgx-a100-80gb'"
    )
    if nvl:
        forms += "; 'nvlDxN-GPU' for N NVLink domains, e.g. 'nvl72x4-gb200'"
    msg = f"unknown hardware preset '{name}'{hint}; presets: {', '.join(known)}; {forms}"
    return InputError(msg, file=file, field=field)


def _preset_raw(name: str, *, file: str | None, field: str | None) -> dict[str, Any]:
    several = multi_server(name)
    if several is not None:
        n, base = several
        return {"base": base, "name": name, "servers": n}
    if isinstance(name, str) and name in list_calibrated():
        path, folder = f"calibrated/{name}.yaml", _calibrated_dir()
    elif isinstance(name, str) and name in list_presets():
        path, folder = f"presets/{name}.yaml", _presets_dir()
    else:
        raise _unknown_preset(str(name), file=file, field=field)
    return _as_mapping(
        read_yaml(folder.joinpath(f"{name}.yaml").read_text(), file=path), path, None
    )


def _not_an_experiment(raw: dict[str, Any], file: str) -> None:
    """A hardware file that is a pipesim experiment (``models:``) is named as one, with the
    hardware it names (it read as a dozen unknown keys of a hardware description).

    Raises:
        InputError: ``raw`` has ``models``.
    """
    if "models" in raw:
        hw = raw.get("hardware")
        shown = f": its hardware is {hw} (sim hardware show {hw})" if isinstance(hw, str) else ""
        raise InputError(f"is a pipesim experiment, not a hardware description{shown}", file=file)


def _as_mapping(raw: Any, file: str | None, field: str | None) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise InputError(
            f"a hardware description must be a mapping, got {type(raw).__name__}",
            file=file,
            field=field,
        )
    return raw


def merge_spec(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``override`` set over it, nested mappings merged key by key (a hardware
    description over its ``base:`` preset; an overlay over a hardware description)."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_spec(out[key], value)
        else:
            out[key] = value
    return out


def _resolve_base(raw: dict[str, Any], file: str | None, field: str | None) -> dict[str, Any]:
    chain: list[str] = []
    while isinstance(raw.get("base"), str):
        name = raw["base"]
        if name in chain or len(chain) >= _MAX_BASE_DEPTH:
            raise InputError(
                f"'base' presets form a cycle: {chain + [name]}",
                file=file,
                field=join_field(field, "base"),
            )
        chain.append(name)
        base = _preset_raw(name, file=file, field=join_field(field, "base"))
        override = {k: v for k, v in raw.items() if k != "base"}
        raw = merge_spec(base, override)
        set_here = sorted(k for k in override if k not in ("name", "description"))
        if set_here and "description" not in override:
            note = BASE_NOTE.format(base=name, keys=", ".join(set_here))
            raw["description"] = f"{raw.get('description', '')} {note}".strip()
    return {**raw, "base": chain[0]} if chain else raw


BASE_NOTE = (
    "Set over the base preset {base} by a description without a `description` of its own: "
    "{keys} (their source is the file that sets them, if it gives one; else an assumption)."
)
"""Appended to the base's description when a ``base:`` description sets figures but no text:
the base's sources do not cover them (``sim hardware show`` prints the description)."""


def _load(
    source: str | Path | dict[str, Any] | HardwareSpec, file: str | None, field: str
) -> tuple[HardwareSpec, str | None, str | None]:
    """The spec, and the file and field prefix that later errors about it should name."""
    if isinstance(source, HardwareSpec):
        return source, file, field
    if isinstance(source, dict):
        raw, err_file, err_field = source, file, field
    elif isinstance(source, (str, Path)):
        text = str(source)
        if isinstance(source, str) and multi_server(text) is not None:
            err_file, err_field = file, field  # no file of its own: the name is the field
            raw = _preset_raw(text, file=file, field=field)
        elif isinstance(source, str) and is_preset(text):
            err_file, err_field = f"presets/{text}.yaml", None
            raw = _preset_raw(text, file=file, field=field)
        elif isinstance(source, Path) or text.endswith((".yaml", ".yml")) or "/" in text:
            path = Path(text)
            if not path.is_absolute() and file is not None:
                path = Path(file).parent / path
            if not path.is_file():
                msg = f"cannot read hardware file {path}: not found (or not a file)"
                raise InputError(msg, file=file, field=field)
            content = read_text(path, what="hardware file")
            err_file, err_field = str(path), None
            raw = _as_mapping(read_yaml(content, file=err_file), err_file, None)
            _not_an_experiment(raw, err_file)
        else:
            raise _unknown_preset(text, file=file, field=field)
    else:
        msg = (
            f"hardware must be a preset name, a YAML path or a mapping, not {type(source).__name__}"
        )
        raise InputError(msg, file=file, field=field)
    raw = _resolve_base(raw, err_file, err_field)
    _check_size(raw, err_file, err_field)
    try:
        return HardwareSpec.model_validate(raw), err_file, err_field
    except ValidationError as exc:
        raise spec_error(exc, err_file, err_field, based="base" in raw) from None


def _check_size(raw: dict[str, Any], file: str | None, field: str | None) -> None:
    """Refuse absurd sizes before anything is built from them.

    Raises:
        InputError: ``num_gpus`` above :data:`MAX_GPUS` or more than :data:`MAX_LINKS` links.
    """
    n = raw.get("num_gpus")
    if isinstance(n, str) and n.strip().isdigit():
        n = int(n)
    servers = raw.get("servers", 1)
    if isinstance(n, int) and isinstance(servers, int) and not isinstance(servers, bool):
        n *= max(servers, 1)
    if isinstance(n, int) and not isinstance(n, bool) and n > MAX_GPUS:
        where = "servers" if isinstance(servers, int) and servers > 1 else "num_gpus"
        raise InputError(
            f"{n:,} GPUs is more than the {MAX_GPUS:,} pipesim simulates; bundled presets: "
            f"{', '.join(list_presets())}, and 'Nx-PRESET' for N servers of one "
            f"(N x its GPUs up to {MAX_GPUS:,}, e.g. '{MAX_GPUS // 8}x-dgx-h100')",
            file=file,
            field=join_field(field, where),
        )
    links = raw.get("links")
    if isinstance(links, list) and len(links) > MAX_LINKS:
        raise InputError(
            f"{len(links)} links is more than the {MAX_LINKS} accepted",
            file=file,
            field=join_field(field, "links"),
        )


def load_hardware_spec(
    source: str | Path | dict[str, Any] | HardwareSpec,
    *,
    file: str | None = None,
    field: str = "hardware",
) -> HardwareSpec:
    """Read and validate a hardware description without building the topology.

    Args:
        source: a preset name (see :func:`list_presets`); a path to a YAML file (a ``str`` is
            a path when it ends in ``.yaml``/``.yml`` or contains ``/``; a relative path is
            resolved against the directory of ``file`` when given); an inline mapping (e.g. the
            ``hardware:`` value of an experiment YAML); or an already validated spec.
        file: the file that names or contains ``source`` (an experiment YAML), for messages.
        field: dotted path of ``source`` inside ``file``. Errors inside an inline mapping, and
            an unknown preset name, are reported under it (``hardware.links.3.bandwidth``);
            errors inside a separate YAML file name that file and the path inside it.

    Returns:
        The validated spec, quantities in bytes, bytes/s, seconds and FLOP/s, ``base`` resolved.

    Raises:
        InputError: unknown preset (the message lists the known ones), unreadable file, YAML
            syntax error or duplicated key, schema violation (unknown key, negative bandwidth,
            ...).
    """
    return _load(source, file, field)[0]


def load_hardware(
    source: str | Path | dict[str, Any] | HardwareSpec,
    *,
    file: str | None = None,
    field: str = "hardware",
) -> Topology:
    """Load a :class:`Topology` from a preset name, a YAML file or an inline mapping.

    Example:
        >>> topo = load_hardware("dgx1-v100-16gb")
        >>> topo.num_gpus, topo.direct_link("gpu0", "gpu3").bandwidth_Bps
        (8, 48000000000.0)

    Args:
        source: as for :func:`load_hardware_spec`.
        file: as for :func:`load_hardware_spec`.
        field: as for :func:`load_hardware_spec`.

    Returns:
        The topology (bytes, bytes/s, seconds, FLOP/s inside).

    Raises:
        InputError: as for :func:`load_hardware_spec`, and for a link to an unknown node, a
            wrong ``gpu_hosts`` entry, or a GPU that cannot reach another GPU or its host.
    """
    spec, err_file, err_field = _load(source, file, field)
    own = _sets_gpu_memory(source, file)
    return topology_from_spec(spec, file=err_file, field=err_field, note_memory=own)


def _sets_gpu_memory(source: str | Path | dict[str, Any] | HardwareSpec, file: str | None) -> bool:
    """Whether the user's own text sets ``gpu.memory`` (not a bundled preset, not a ``base:``):
    only then is a ``memory`` replaced by the CUDA total worth a note
    (:func:`sim.hardware.build.memory_note`; a preset's is its datasheet figure). A validated
    spec is the caller's own."""
    if isinstance(source, HardwareSpec):
        return True
    if isinstance(source, str) and is_preset(source):
        return False
    if isinstance(source, dict):
        raw: Any = source
    else:
        path = Path(source)
        if not path.is_absolute() and file is not None:
            path = Path(file).parent / path
        raw = read_yaml(read_text(path, what="hardware file"), file=str(path))
    gpu = raw.get("gpu") if isinstance(raw, dict) else None
    return isinstance(gpu, dict) and "memory" in gpu
