"""The hardware a measured run's GPU names, for :func:`sim.runs.express.express`: the preset of
its GPU (a server of 8, or an NVL72 rack for GB200/GB300) and how many of them the job's GPUs
fill (``4x-dgx-h100``, ``nvl72x2-gb200``)."""

from __future__ import annotations

from functools import cache

from sim.hardware.loader import load_hardware_spec
from sim.runs.decoder_express import SERVER_GPUS
from sim.runs.slurm_segments import on_racks, racks

GPU_PRESETS: tuple[tuple[str, str], ...] = (
    ("GB300", "gb300-nvl72"), ("B300", "dgx-b300"), ("GB200", "gb200-nvl72"), ("B200", "dgx-b200"),
    ("GH200", "gh200-96gb"), ("H200", "dgx-h200"), ("H100", "dgx-h100"), ("H800", "dgx-h100"), ("A800", "hgx-a800-80gb"),
    ("A100-SXM-80GB", "dgx-a100-80gb"), ("A100-80", "dgx-a100-80gb"), ("A100", "dgx-a100-40gb"),
    ("V100-SXM2-32GB", "dgx1-v100-32gb"), ("V100", "dgx1-v100-16gb"),
)  # fmt: skip
"""The preset of a GPU named by a source, first match of a name part (upper case): a server of
8 (a DGX/HGX) or, for the GB200 and GB300, the NVL72 rack; "" where there is no preset yet.
``A100`` alone is the 40 GB DGX (vTrain's rows do not say which). A GH200 is one Grace Hopper
superchip (``gh200-96gb``), not an H200 server."""
NOT_SXM = ("PCIE", "H100-NVL", "H100NVL", "H200-NVL", "H200NVL")
"""Name parts of PCIe cards (the H100/H200 NVL are PCIe boards too: 94 / 141 GB, lower power):
no preset is one of them (the DGX/HGX presets are SXM servers), so the run is refused rather than
simulated on an SXM server."""


A100_80GB = ("80GB", "80-GB", "-80G")
"""What names an 80 GB A100 however a source spells it (``A100-SXM4-80GB``, ``A100 80GB``,
``A100-80G``): the 40 GB DGX otherwise (an ``A100`` alone)."""


def gpu_preset(gpu: str) -> str | None:
    """The preset for a GPU as a source names it (:data:`GPU_PRESETS`; an A100 named with
    80 GB, :data:`A100_80GB`, is the 80 GB DGX); None: unknown, "": known, no preset yet.

    >>> gpu_preset("A100-SXM4-80GB"), gpu_preset("A100 80GB"), gpu_preset("A100-SXM4-40GB")
    ('dgx-a100-80gb', 'dgx-a100-80gb', 'dgx-a100-40gb')
    >>> gpu_preset("GH200"), gpu_preset("H100 PCIe"), gpu_preset("H100 NVL")
    ('gh200-96gb', None, None)
    """
    name = gpu.upper().replace(" ", "-")
    if any(tag in name for tag in NOT_SXM):
        return None
    preset = next((p for part, p in GPU_PRESETS if part in name), None)
    if preset == "dgx-a100-40gb" and any(tag in name for tag in A100_80GB):
        return "dgx-a100-80gb"
    return preset


@cache
def gpu_formats(preset: str) -> tuple[str, ...]:
    """The low-precision GEMM formats the GPU of ``preset`` runs (its ``gpu.low_precision``:
    ``fp8`` on Hopper, ``fp8``, ``mxfp8``, ``nvfp4`` on Blackwell)."""
    return tuple(load_hardware_spec(preset).gpu.low_precision)


def hardware_for(gpu: str, gpus: int) -> tuple[str | None, str]:
    """The hardware a job of ``gpus`` GPUs named ``gpu`` runs on, or None and the reason."""
    preset = gpu_preset(gpu)
    if preset is None and any(tag in gpu.upper().replace(" ", "-") for tag in NOT_SXM):
        return None, f"GPU {gpu!r}: a PCIe card; the presets are SXM servers (sim hardware list)"
    if preset is None:
        return None, f"GPU {gpu!r}: no preset matches it (sim hardware list)"
    if preset == "gh200-96gb" and gpus > 1:
        return None, (f"GPU {gpu!r} x {gpus}: the gh200-96gb preset is one superchip; no preset "
                      "of a GH200 cluster")  # fmt: skip
    if preset == "":
        return None, f"GPU {gpu!r}: no preset yet (issue 26 item 6: B300 / GB300 presets)"
    rack = on_racks(preset)
    n = racks(gpus) if rack else -(-gpus // SERVER_GPUS)
    if n == 1:
        return preset, ""
    return (f"nvl72x{n}-{preset.split('-')[0]}" if rack else f"{n}x-{preset}"), ""
