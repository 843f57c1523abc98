"""The hardware a measured run's GPU names, for :func:`sim.runs.express.express`: the preset of
its GPU (a server of 8, or an NVL72 rack for GB200/GB300) and how many of them the job's GPUs
fill (``4x-dgx-h100``, ``nvl72x2-gb200``)."""

from __future__ import annotations

from functools import cache

from sim.hardware.gpu_names import read_gpu
from sim.hardware.loader import load_hardware_spec
from sim.runs.decoder_express import SERVER_GPUS
from sim.runs.slurm_segments import on_racks, racks


def gpu_preset(gpu: str) -> str | None:
    """The preset for a GPU as a source names it, or None where
    :func:`sim.hardware.gpu_names.read_gpu` refuses it (unknown, a PCIe card, several GPUs).

    >>> gpu_preset("A100-SXM4-80GB"), gpu_preset("A100 80GB"), gpu_preset("A100-SXM4-40GB")
    ('dgx-a100-80gb', 'dgx-a100-80gb', 'dgx-a100-40gb')
    >>> gpu_preset("GH200"), gpu_preset("H100 PCIe"), gpu_preset("H100 NVL")
    ('gh200-96gb', None, None)
    >>> gpu_preset("H100 96GB"), gpu_preset("NVIDIA H100 80GB HBM3")
    ('grand-teton-h100-96gb', 'dgx-h100')
    """
    return read_gpu(gpu).preset or None


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
    reading = read_gpu(gpu)
    if not reading.preset:
        return None, f"GPU {gpu!r}: {reading.reason} (sim hardware list)"
    preset = reading.preset
    if preset == "gh200-96gb" and gpus > 1:
        return None, (f"GPU {gpu!r} x {gpus}: the gh200-96gb preset is one superchip; no preset "
                      "of a GH200 cluster")  # fmt: skip
    rack = on_racks(preset)
    n = racks(gpus) if rack else -(-gpus // SERVER_GPUS)
    if n == 1:
        return preset, ""
    return (f"nvl72x{n}-{preset.split('-')[0]}" if rack else f"{n}x-{preset}"), ""
