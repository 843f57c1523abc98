"""The one reading of a GPU name, as a user or a measured run's files give it, as a bundled
hardware preset: :func:`read_gpu`.

Every place that takes a GPU name reads it here: a measured run's GPU
(:func:`sim.runs.express_hardware.gpu_preset`, ``A100-SXM4-80GB``, ``H100 96GB``, ``GH200``),
``sim trace from-config --gpu`` (:func:`sim.cli.gpu_names.gpu_hardware`) and ``sim profile
--for-gpu`` (:func:`backends.torch.profile.fake.resolve_gpu`). A name is read, in this order:

1. a bundled preset's own name, in any case, spaces and underscores as dashes (``dgx-h100``,
   ``Grand Teton H100``): that preset;
2. a PCIe card (:data:`NOT_SXM`, the H100/H200 NVL boards too): refused, the presets are SXM
   servers;
3. a preset's GPU model (``gpu.model``, ``H100-SXM5-80GB``), in that form too, or whole
   dash-separated parts of it that name its GPU (``GH200``, ``A100-80GB``, not ``80GB``): when
   one GPU model has them, the first preset with it; when several do, the one the source
   spellings of step 4 name if it is among them (``H100`` is the 80 GB ``dgx-h100``'s, not
   the 96 GB HBM2e part's); otherwise refused, naming the GPUs (``V100-32GB``: the DGX-1's
   V100-SXM2-32GB or the DGX-2's V100-SXM3-32GB, hardware.md §3.1, §3.2);
4. a source's spelling (:data:`GPU_PRESETS`, :data:`A100_80GB`, :data:`H100_HBM2E_MARKS`:
   ``NVIDIA H100 80GB HBM3``, ``B200 (8 GPUs, 1 node)``, ``H800``);
5. anything else: refused, no preset matches it.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Literal

from sim.hardware.loader import preset_gpu_models

GPU_PRESETS: tuple[tuple[str, str], ...] = (
    ("GB300", "gb300-nvl72"), ("B300", "dgx-b300"), ("GB200", "gb200-nvl72"), ("B200", "dgx-b200"),
    ("GH200", "gh200-96gb"), ("H200", "dgx-h200"), ("H100", "dgx-h100"), ("H800", "dgx-h100"), ("A800", "hgx-a800-80gb"),
    ("A100-SXM-80GB", "dgx-a100-80gb"), ("A100-80", "dgx-a100-80gb"), ("A100", "dgx-a100-40gb"),
    ("V100-SXM2-32GB", "dgx1-v100-32gb"), ("V100", "dgx1-v100-16gb"),
)  # fmt: skip
"""The preset of a GPU named by a source, first match of a name part (upper case): a server of
8 (a DGX/HGX) or, for the GB200 and GB300, the NVL72 rack. ``A100`` alone is the 40 GB DGX
(vTrain's rows do not say which). A GH200 is one Grace Hopper superchip (``gh200-96gb``), not
an H200 server. ``H100`` is the DGX H100's H100-SXM5-80GB (``dgx-h100``; ../shared/reference/
hardware.md §3.4: MLPerf Training v3.0 ``NVIDIA/systems/dgxh100_ngc23.04_pytorch.json``)
unless :data:`H100_HBM2E_MARKS` say otherwise."""
NOT_SXM = ("PCIE", "H100-NVL", "H100NVL", "H200-NVL", "H200NVL")
"""Name parts of PCIe cards (the H100/H200 NVL are PCIe boards too: 94 / 141 GB, lower power):
no preset is one of them (the DGX/HGX presets are SXM servers), so the name is refused rather
than read as an SXM server."""
A100_80GB = ("80GB", "80-GB", "-80G")
"""What names an 80 GB A100 however a source spells it (``A100-SXM4-80GB``, ``A100 80GB``,
``A100-80G``): the 40 GB DGX otherwise (an ``A100`` alone)."""
H100_HBM2E_MARKS = ("96GB", "HBM2E")
"""Name parts that make an H100 the 96 GB HBM2e SXM part (2.4 TB/s, 500 W) of Meta's Grand Teton
servers, :data:`H100_HBM2E_PRESET` (pytorch/torchtitan@b5bcd76
benchmarks/llama3_h100_202412_torchtitan.md, "Hardware"); an ``NVL`` (94 GB HBM3, 3.9 TB/s) is
a PCIe card (:data:`NOT_SXM`)."""
H100_HBM2E_PRESET = "grand-teton-h100-96gb"

How = Literal["preset", "model", "source", ""]
Refusal = Literal["pcie", "several", "unknown", ""]


@dataclass(frozen=True)
class GpuReading:
    """How :func:`read_gpu` read a GPU name.

    Attributes:
        name: the name as given.
        preset: the bundled preset it means; "" when refused.
        how: ``"preset"`` (a preset's name), ``"model"`` (a preset's ``gpu.model`` or whole
            parts of it), ``"source"`` (a source's spelling, :data:`GPU_PRESETS`); "" when
            refused.
        refused: ``"pcie"`` (a PCIe card), ``"several"`` (parts of several GPU models, none of
            them the source spellings'), ``"unknown"``; "" when read.
        reason: why it is refused, a phrase (``"a PCIe card; the presets are SXM servers"``);
            "" when read.
        models: the GPU models a ``"several"`` name matches, sorted.
    """

    name: str
    preset: str = ""
    how: How = ""
    refused: Refusal = ""
    reason: str = ""
    models: tuple[str, ...] = ()


def name_key(name: str) -> str:
    """``name`` stripped, in upper case, spaces and underscores as dashes (``a100 80gb`` ->
    ``A100-80GB``): the form every rule of :func:`read_gpu` matches."""
    return name.strip().upper().replace(" ", "-").replace("_", "-")


def _preset_gpus() -> tuple[tuple[str, str], ...]:
    return tuple(preset_gpu_models().items())


def preset_gpus() -> dict[str, str]:
    """Each bundled preset's GPU model (``{'dgx-h100': 'H100-SXM5-80GB', ...}``), in
    :func:`~sim.hardware.loader.list_presets` order (:func:`~sim.hardware.loader.
    preset_gpu_models`)."""
    return preset_gpu_models()


def source_preset(key: str) -> str:
    """The preset of a source's spelling ``key`` (:func:`name_key` form; module doc, step 4):
    an H100 with :data:`H100_HBM2E_MARKS`, the first part of :data:`GPU_PRESETS` in it, the
    80 GB A100 for :data:`A100_80GB`; "" when none.

    >>> source_preset("NVIDIA-H100-80GB-HBM3"), source_preset("H100-96GB")
    ('dgx-h100', 'grand-teton-h100-96gb')
    >>> source_preset("A100-SXM4-80GB"), source_preset("A100"), source_preset("X9")
    ('dgx-a100-80gb', 'dgx-a100-40gb', '')
    """
    if "H100" in key and any(m in key for m in H100_HBM2E_MARKS):
        return H100_HBM2E_PRESET
    preset = next((p for part, p in GPU_PRESETS if part in key), "")
    if preset == "dgx-a100-40gb" and any(tag in key for tag in A100_80GB):
        return "dgx-a100-80gb"
    return preset


def gpu_parts(model: str) -> set[str]:
    """The parts of a GPU model (:func:`name_key` form) that name the GPU: its leading parts up
    to the first with a digit (``H100`` of ``H100-SXM5-80GB``, ``RTX``, ``4090`` of
    ``RTX-4090-24GB``), not its form factor or memory (``SXM5``, ``80GB``)."""
    parts = model.split("-")
    n = next((i for i, part in enumerate(parts) if any(c.isdigit() for c in part)), 0)
    return set(parts[: n + 1])


def model_presets(key: str) -> list[str]:
    """The presets whose GPU model is ``key`` (:func:`name_key` form), else those whose model
    has every dash-separated part of it, its GPU's (:func:`gpu_parts`) among them (``H100`` ->
    the three H100 presets; ``80GB`` alone names no GPU), in preset order."""
    models = [(p, name_key(m)) for p, m in _preset_gpus()]
    same = [p for p, m in models if m == key]
    parts = set(key.split("-"))
    return same or [p for p, m in models if gpu_parts(m) <= parts <= set(m.split("-"))]


def _by_model(name: str, key: str, hits: list[str]) -> GpuReading:
    guess = source_preset(key)
    if guess in hits:
        return GpuReading(name, guess, "model")
    models = sorted({m for p, m in _preset_gpus() if p in hits})
    if len(models) == 1:
        return GpuReading(name, hits[0], "model")
    return GpuReading(
        name, refused="several", reason=f"matches several GPUs ({', '.join(models)})",
        models=tuple(models),
    )  # fmt: skip


def read_gpu(name: str) -> GpuReading:
    """The preset a GPU name means, how it was read, or why it is refused (module doc).

    >>> read_gpu("H100").preset, read_gpu("A100 80GB").preset, read_gpu("H800").how
    ('dgx-h100', 'dgx-a100-80gb', 'source')
    >>> read_gpu("H100 PCIe").reason
    'a PCIe card; the presets are SXM servers'
    """
    key = name_key(name)
    preset = next((p for p in preset_gpus() if name_key(p) == key), "")
    if preset:
        return GpuReading(name, preset, "preset")
    if any(tag in key for tag in NOT_SXM):
        return GpuReading(name, refused="pcie", reason="a PCIe card; the presets are SXM servers")
    hits = model_presets(key) if key else []
    if hits:
        return _by_model(name, key, hits)
    guess = source_preset(key)
    if guess:
        return GpuReading(name, guess, "source")
    return GpuReading(name, refused="unknown", reason="no preset matches it" + _meant(key))


def _meant(key: str) -> str:
    """`` (did you mean 'H100'?)`` for a GPU name that misspells one of the presets' GPUs
    (``H10``, ``A10O``), else ""."""
    names = sorted({"-".join(sorted(gpu_parts(m), key=m.index)) for _, m in _preset_gpus()})
    close = difflib.get_close_matches(key, names, n=1, cutoff=0.7)
    return f" (did you mean {close[0]!r}?)" if close else ""
