"""A ``--gpu`` option that takes a GPU as people name it (``H100-SXM5-80GB``, ``B200``,
``A100 80GB``) as well as a hardware preset (``dgx-h100``) or a hardware YAML:
:func:`gpu_hardware` names the preset whose GPU is meant (:func:`sim.hardware.gpu_names.read_gpu`
reads the name)."""

from __future__ import annotations

from sim.errors import InputError
from sim.hardware.gpu_names import GpuReading, preset_gpus, read_gpu
from sim.hardware.loader import cluster_presets, is_preset
from sim.hardware.preset_names import suggest_presets


def gpu_hardware(name: str, option: str = "--gpu") -> tuple[str, str]:
    """The hardware ``name`` stands for, and a sentence saying how a GPU name was read ("" for
    a preset or a file).

    ``name`` is a preset (``Nx-PRESET`` too) or a hardware YAML path (kept as it is), else a
    GPU name as :func:`~sim.hardware.gpu_names.read_gpu` reads it: a preset's GPU model in any
    case, or some of its dash-separated parts (``h100-sxm5-80gb``, ``GH200``, ``V100-SXM3``),
    or a GPU as a source names it (``H800``, ``A100 80 GB``).

    Raises:
        InputError: neither a preset nor a GPU of one (naming ``option``, why where the name
            was refused as a PCIe card or several GPUs, the presets it may mean, every preset
            and every GPU model).

    Example:
        >>> gpu_hardware("B200")[0], gpu_hardware("dgx-h100")
        ('dgx-b200', ('dgx-h100', ''))
    """
    if is_preset(name) or name.endswith((".yaml", ".yml")) or "/" in name:
        return name, ""
    reading = read_gpu(name)
    if not reading.preset:
        raise _not_a_gpu(reading, option)
    preset = reading.preset
    return preset, f"{option} {name}: the GPU of preset {preset} ({preset_gpus()[preset]})"


def _not_a_gpu(reading: GpuReading, option: str) -> InputError:
    models = preset_gpus()
    why = "" if reading.refused == "unknown" else f": {reading.reason}"
    close = suggest_presets(reading.name, models, cluster_presets())
    hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
    return InputError(
        f"{reading.name!r} is neither a hardware preset nor the GPU of one{why}{hint}; give a "
        f"preset ({', '.join(models)}), a GPU ({', '.join(sorted(set(models.values())))}, or as "
        "B200, H100, 'A100 80GB') or a hardware YAML (sim hardware list)",
        field=option,
    )
