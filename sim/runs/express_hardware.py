"""The hardware a measured run's GPU names, for :func:`sim.runs.express.express`: the preset of
its GPU (a server of 8, or an NVL72 rack for GB200/GB300) and how many of them the job's GPUs
fill (``4x-dgx-h100``, ``nvl72x2-gb200``)."""

from __future__ import annotations

from sim.runs.decoder_express import SERVER_GPUS
from sim.runs.slurm_segments import on_racks, racks

GPU_PRESETS: tuple[tuple[str, str], ...] = (
    ("GB300", "gb300-nvl72"), ("B300", "dgx-b300"), ("GB200", "gb200-nvl72"), ("B200", "dgx-b200"),
    ("H200", "dgx-h200"), ("H100", "dgx-h100"), ("H800", "dgx-h100"), ("A800", "hgx-a800-80gb"),
    ("A100-SXM-80GB", "dgx-a100-80gb"), ("A100-80", "dgx-a100-80gb"), ("A100", "dgx-a100-40gb"),
    ("V100-SXM2-32GB", "dgx1-v100-32gb"), ("V100", "dgx1-v100-16gb"),
)  # fmt: skip
"""The preset of a GPU named by a source, first match of a name part (upper case): a server of
8 (a DGX/HGX) or, for the GB200 and GB300, the NVL72 rack; "" where there is no preset yet.
``A100`` alone is the 40 GB DGX (vTrain's rows do not say which)."""
H100_HBM2E_MARKS = ("96GB", "HBM2E")
"""Name parts that make an H100 the 96 GB HBM2e SXM part (2.4 TB/s, 500 W) of Meta's Grand Teton
servers, ``grand-teton-h100-96gb`` (pytorch/torchtitan@b5bcd76
benchmarks/llama3_h100_202412_torchtitan.md, "Hardware"); an ``NVL`` (94 GB HBM3, 3.9 TB/s) is
another part and keeps the H100 row."""
H100_HBM2E_PRESET = "grand-teton-h100-96gb"


def gpu_preset(gpu: str) -> str | None:
    """The preset for a GPU as a source names it (:data:`GPU_PRESETS`; an H100 named 96 GB or
    HBM2e: :data:`H100_HBM2E_PRESET`); None: unknown, "": known, no preset yet.

    >>> gpu_preset("H100 96GB"), gpu_preset("NVIDIA H100 80GB HBM3"), gpu_preset("H100 NVL")
    ('grand-teton-h100-96gb', 'dgx-h100', 'dgx-h100')
    """
    name = gpu.upper().replace(" ", "-")
    if "H100" in name and "NVL" not in name and any(m in name for m in H100_HBM2E_MARKS):
        return H100_HBM2E_PRESET
    return next((p for part, p in GPU_PRESETS if part in name), None)


def hardware_for(gpu: str, gpus: int) -> tuple[str | None, str]:
    """The hardware a job of ``gpus`` GPUs named ``gpu`` runs on, or None and the reason
    (``gpu`` "": the run's files do not name it, and the reason says how to)."""
    if not gpu.strip():
        return None, (
            "GPU not named by the run's files: give it with --gpu (e.g. H100, B200 or "
            "A100-SXM-80GB, as sim hardware list names them)"
        )
    preset = gpu_preset(gpu)
    if preset is None:
        return None, f"GPU {gpu!r}: no preset matches it (sim hardware list)"
    if preset == "":
        return None, f"GPU {gpu!r}: no preset yet (issue 26 item 6: B300 / GB300 presets)"
    rack = on_racks(preset)
    n = racks(gpus) if rack else -(-gpus // SERVER_GPUS)
    if n == 1:
        return preset, ""
    return (f"nvl72x{n}-{preset.split('-')[0]}" if rack else f"{n}x-{preset}"), ""
