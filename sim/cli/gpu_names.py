"""A ``--gpu`` option that takes a GPU as people name it (``H100-SXM5-80GB``, ``B200``,
``A100 80GB``) as well as a hardware preset (``dgx-h100``) or a hardware YAML:
:func:`gpu_hardware` names the preset whose GPU is meant."""

from __future__ import annotations

from sim.errors import InputError
from sim.hardware.loader import cluster_presets, is_preset, list_presets, load_hardware_spec
from sim.hardware.preset_names import suggest_presets
from sim.runs.express_hardware import gpu_preset


def _key(name: str) -> str:
    """``name`` in upper case with spaces and underscores as dashes (``a100 80gb`` ->
    ``A100-80GB``), the form :data:`sim.runs.express_hardware.GPU_PRESETS` matches."""
    return name.strip().upper().replace(" ", "-").replace("_", "-")


def preset_gpus() -> dict[str, str]:
    """Each bundled preset's GPU model (``{'dgx-h100': 'H100-SXM5-80GB', ...}``)."""
    return {p: load_hardware_spec(p).gpu.model for p in list_presets()}


def gpu_hardware(name: str, option: str = "--gpu") -> tuple[str, str]:
    """The hardware ``name`` stands for, and a sentence saying how a GPU name was read ("" for
    a preset or a file).

    ``name`` is, in that order: a preset (``Nx-PRESET`` too) or a hardware YAML path (kept as
    it is); a preset's GPU model in any case, or some of its dash-separated parts
    (``h100-sxm5-80gb``, ``GH200``, ``V100-32GB``: the preset
    :func:`~sim.runs.express_hardware.gpu_preset` names when it has that GPU, else the first
    that has it); a GPU as a source names it (``H800``, ``A100 80 GB``: the preset of
    :func:`~sim.runs.express_hardware.gpu_preset`).

    Raises:
        InputError: neither a preset nor a GPU of one (naming ``option``, the presets
            it may mean, every preset and every GPU model).

    Example:
        >>> gpu_hardware("B200")[0], gpu_hardware("dgx-h100")
        ('dgx-b200', ('dgx-h100', ''))
    """
    if is_preset(name) or name.endswith((".yaml", ".yml")) or "/" in name:
        return name, ""
    models = preset_gpus()
    guess = gpu_preset(name)
    same = [p for p, m in models.items() if _key(m) == _key(name)]
    parts = set(_key(name).split("-"))
    same = same or [p for p, m in models.items() if parts <= set(_key(m).split("-"))]
    preset = (guess if guess in same else same[0]) if same else guess
    if preset:
        return preset, f"{option} {name}: the GPU of preset {preset} ({models[preset]})"
    close = suggest_presets(name, models, cluster_presets())
    hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
    raise InputError(
        f"{name!r} is neither a hardware preset nor the GPU of one{hint}; give a preset "
        f"({', '.join(models)}), a GPU ({', '.join(sorted(set(models.values())))}, or as "
        "B200, H100, 'A100 80GB') or a hardware YAML (sim hardware list)",
        field=option,
    )
