"""``sim calibrate --out HW.yaml``: the typer adapter over
:func:`backends.torch.devices.calibrate_devices`."""

from __future__ import annotations

import logging
from pathlib import Path

import typer
from rich.markup import escape

from backends.torch.devices import calibrate_devices, check_device, check_device_name
from sim.atomic import check_writable
from sim.cli.console import err, friendly, need_torch, out
from sim.config import MAX_GPUS
from sim.progress import progress

log = logging.getLogger(__name__)


@friendly
def calibrate(
    out_path: Path = typer.Option(
        ..., "--out", "-o", help="Hardware YAML to write; load it like a preset (hardware: PATH)."
    ),
    nproc: int = typer.Option(
        2,
        min=1,
        max=MAX_GPUS,
        help="Ranks, as the replay will use (1: one GPU, no rank-to-rank link measured).",
    ),
    device: str = typer.Option("cpu", help="cpu (gloo) or cuda (NCCL)."),
) -> None:
    """Measure this machine's ranks (compute FLOP/s, copy bandwidth, rank-to-rank latency and
    bandwidth; host<->device on GPUs) and write a hardware description."""
    check_device_name(device)
    check_writable(out_path, option="--out")  # fail now, not after the measurement
    need_torch()
    check_device(device, nproc=nproc)
    log.info("calibrating %d %s rank(s): compute, copies, rank-to-rank links, GEMMs by shape, "
             "launch overhead (a few minutes)", nproc, device)  # fmt: skip
    with progress(1, "calibrating", "measurements", console=err) as on_done:
        hardware = calibrate_devices(nproc=nproc, device=device, path=out_path)
        on_done(1)
    gpu = hardware.get("gpu", {})
    out.print(escape(f"wrote {out_path}: {nproc} x {gpu.get('model', device)}"))
    for link in hardware.get("links", [])[:4]:
        out.print(escape(f"  {link}"))
