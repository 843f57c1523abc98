"""A hardware overlay: a few measured or calibrated figures of one cluster, set over a preset.

A preset carries datasheet figures and published micro-benchmarks; a given cluster differs
(its clocks, drivers, NCCL version, fabric). ``sim calibrate --from-runs`` fits a few physical
parameters of the user's cluster to its own measured runs and writes them as an overlay
file; ``sim run --hardware-overlay FILE`` (or an experiment's ``hardware_overlay: FILE``)
applies it to the experiment's hardware, whatever preset that is. Shipped presets are never
changed.

File format (YAML)::

    calibration:            # provenance, shown and kept, never applied
      runs: [logs/run1.log, ...]
      error: {uncalibrated_mape: 0.121, calibrated_mape: 0.041, leave_one_out_mape: 0.052}
    gpu: {matmul_efficiency: 0.62, kernel_overhead: 6 us}
    network: {nccl_nic_bandwidth: 41 GB/s, latency: 2 us}

Overlays shipped with pipesim (``sim/hardware/overlays/NAME.yaml``, package data) describe a
machine whose measured runs are in the project's checking data: :func:`bundled_overlay` reads one
by name (``simumax-b200``: SimuMax's B200 node, which its validation runs use; ``nccl-2.28``:
NCCL's p2p channels per network peer before 2.29.2, which old Megatron-Bridge releases ship;
``vtrain-a100-cluster``: the 800 Gb/s per node network of vTrain's multi-node A100 runs).

Only the keys of :data:`ALLOWED` may be set (the figures calibration fits, and the host
overheads ``sim calibrate --device cuda`` measures); values take the units hardware files
take, and are validated as the hardware's own fields are when the hardware is loaded.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from sim.errors import InputError
from sim.hardware.loader import is_preset, load_hardware_spec, merge_spec
from sim.textio import read_yaml_file

ALLOWED: dict[str, frozenset[str] | None] = {
    "gpu": frozenset({
        "matmul_efficiency", "attention_efficiency", "hbm_efficiency", "kernel_overhead",
        "nccl_nvlink_bandwidth", "tp_module_overhead", "action_overhead", "optimizer_step",
    }),
    "network": frozenset({
        "nccl_nic_bandwidth", "nic_bandwidth", "latency", "nccl_p2p_channels_per_peer",
        "technology", "source",
    }),
    "host_overhead": None,
}  # fmt: skip
"""Sections and keys an overlay may set (None: any key of that section). ``network.technology``
and ``network.source`` are text for people: an overlay that changes the NICs says what they are
and where the figures come from (``vtrain-a100-cluster``)."""
PROVENANCE = "calibration"
"""The section that records where an overlay came from (not applied)."""


def check_overlay(data: Any, *, file: str) -> dict[str, Any]:
    """The overlay mapping of ``data`` without its provenance section.

    Raises:
        InputError: not a mapping, an unknown section or key (naming the file and field).
    """
    if not isinstance(data, dict):
        raise InputError("a hardware overlay must be a mapping (section: {key: value})",
                         file=file)  # fmt: skip
    out: dict[str, Any] = {}
    for section, body in data.items():
        if section == PROVENANCE:
            continue
        if section not in ALLOWED:
            raise InputError(
                f"unknown section; an overlay may set {', '.join(ALLOWED)} (and keep its "
                f"provenance under {PROVENANCE})", file=file, field=str(section),
            )  # fmt: skip
        if not isinstance(body, dict):
            raise InputError("must be a mapping of keys to values", file=file, field=section)
        keys = ALLOWED[section]
        for key in body:
            if keys is not None and key not in keys:
                raise InputError(f"not a key an overlay may set ({', '.join(sorted(keys))})",
                                 file=file, field=f"{section}.{key}")  # fmt: skip
        out[section] = dict(body)
    return out


def read_overlay(path: str | Path) -> dict[str, Any]:
    """The overlay in the YAML file ``path`` (:func:`check_overlay`).

    Raises:
        InputError: unreadable, not YAML, or not an overlay.
    """
    return check_overlay(read_yaml_file(path, what="hardware overlay"), file=str(path))


def list_overlays() -> list[str]:
    """Names of the overlays shipped in ``sim/hardware/overlays/`` (file stems), sorted."""
    folder = resources.files("sim.hardware").joinpath("overlays")
    return sorted(e.name[: -len(".yaml")] for e in folder.iterdir() if e.name.endswith(".yaml"))


def bundled_overlay(name: str) -> dict[str, Any]:
    """The shipped overlay ``name`` (:func:`list_overlays`), as :func:`read_overlay` reads it.

    Raises:
        InputError: no shipped overlay has that name.
    """
    if name not in list_overlays():
        raise InputError(f"no shipped hardware overlay {name!r}; shipped: "
                         f"{', '.join(list_overlays())}", field="hardware_overlay")  # fmt: skip
    path = resources.files("sim.hardware").joinpath("overlays", f"{name}.yaml")
    return read_overlay(Path(str(path)))


def with_overlays(
    hardware: str, shipped: str = "", extra: dict[str, Any] | None = None
) -> str | dict[str, Any]:
    """``hardware`` with the shipped overlay ``shipped`` (:func:`bundled_overlay`; "" none) and
    then ``extra`` set over it (:func:`apply_overlay`); ``hardware`` itself when neither.

    Raises:
        InputError: no shipped overlay named ``shipped``; the hardware cannot be read.

    Example:
        >>> with_overlays("dgx-b200", "simumax-b200")["gpu"]
        {'matmul_efficiency': 0.488}
    """
    over = bundled_overlay(shipped) if shipped else {}
    if extra:
        over = merge_spec(over, extra)
    return apply_overlay(hardware, over) if over else hardware


def overlay_provenance(path: str | Path) -> dict[str, Any]:
    """The ``calibration`` section of an overlay file ({} when it has none)."""
    data = read_yaml_file(path, what="hardware overlay")
    prov = data.get(PROVENANCE) if isinstance(data, dict) else None
    return prov if isinstance(prov, dict) else {}


def apply_overlay(hardware: str | dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """``hardware`` (a preset name, a hardware file path or an inline mapping) with
    ``overlay`` set over it, as an inline mapping whose ``base`` is the original. A
    ``network`` section is dropped for hardware without a network (one server of a preset
    that has none).

    Raises:
        InputError: the hardware itself cannot be read.

    Example:
        >>> hw = apply_overlay("dgx-h100", {"gpu": {"matmul_efficiency": 0.7}})
        >>> hw["base"], hw["gpu"]
        ('dgx-h100', {'matmul_efficiency': 0.7})
    """
    over = dict(overlay)
    if isinstance(hardware, str | Path) and not is_preset(str(hardware)):
        data = read_yaml_file(hardware, what="hardware file")
        if not isinstance(data, dict):
            raise InputError("a hardware description must be a mapping", file=str(hardware))
        hardware = data
    if "network" in over and load_hardware_spec(hardware).network is None:
        over.pop("network")
    if isinstance(hardware, dict):
        return merge_spec(hardware, over)
    return {"base": str(hardware), **over}
