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
H100_HBM2E_MARKS = ("96GB", "HBM2E")
"""Name parts that make an H100 the 96 GB HBM2e SXM part (2.4 TB/s, 500 W) of Meta's Grand Teton
servers, ``grand-teton-h100-96gb`` (pytorch/torchtitan@b5bcd76
benchmarks/llama3_h100_202412_torchtitan.md, "Hardware"); an ``NVL`` (94 GB HBM3, 3.9 TB/s) is
a PCIe card (:data:`NOT_SXM`)."""
H100_HBM2E_PRESET = "grand-teton-h100-96gb"


def gpu_preset(gpu: str) -> str | None:
    """The preset for a GPU as a source names it (:data:`GPU_PRESETS`; an A100 named with
    80 GB, :data:`A100_80GB`, is the 80 GB DGX; an H100 named 96 GB or HBM2e,
    :data:`H100_HBM2E_PRESET`); None: unknown or a PCIe card, "": known, no preset yet.

    >>> gpu_preset("A100-SXM4-80GB"), gpu_preset("A100 80GB"), gpu_preset("A100-SXM4-40GB")
    ('dgx-a100-80gb', 'dgx-a100-80gb', 'dgx-a100-40gb')
    >>> gpu_preset("GH200"), gpu_preset("H100 PCIe"), gpu_preset("H100 NVL")
    ('gh200-96gb', None, None)
    >>> gpu_preset("H100 96GB"), gpu_preset("NVIDIA H100 80GB HBM3")
    ('grand-teton-h100-96gb', 'dgx-h100')
    """
    name = gpu.upper().replace(" ", "-")
    if any(tag in name for tag in NOT_SXM):
        return None
    if "H100" in name and any(m in name for m in H100_HBM2E_MARKS):
        return H100_HBM2E_PRESET
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
    """The hardware a job of ``gpus`` GPUs named ``gpu`` runs on, or None and the reason
    (``gpu`` "": the run's files do not name it, and the reason says how to)."""
    if not gpu.strip():
        return None, (
            "GPU not named by the run's files: give it with --gpu (e.g. H100, B200 or "
            "A100-SXM-80GB, as sim hardware list names them)"
        )
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
