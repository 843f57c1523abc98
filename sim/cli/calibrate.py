"""``sim calibrate --out HW.yaml``: the typer adapter over
:func:`backends.torch.calibrate.devices.calibrate_devices`; ``sim calibrate --from-runs RUNS... --out
OVERLAY.yaml`` over :func:`sim.calibrate_runs.calibrate_from_runs`."""

from __future__ import annotations

import logging
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from backends.torch.calibrate.devices import calibrate_devices
from backends.torch.devices import check_device, check_device_name
from sim.atomic import check_writable
from sim.calibrate_runs import PARAMETERS, Fit, calibrate_from_runs, mape
from sim.cli.console import QUIET, VERBOSE, apply_verbosity, err, friendly, need_torch, out
from sim.config import MAX_GPUS
from sim.errors import InputError
from sim.progress import progress

log = logging.getLogger(__name__)


def _report(result: Fit, path: Path) -> None:
    table = Table(title=escape(f"{result.hardware}: {len(result.runs)} runs fitted"))
    for col in ("parameter", "field", "preset", "fitted", "± 1 sd", "bounds"):
        table.add_column(col)
    for p in PARAMETERS:
        if p.name not in result.values:
            continue
        prior = result.priors[p.name]
        lo, hi = (p.low * prior, p.high * prior) if p.relative else (p.low, p.high)
        table.add_row(p.name, f"{p.section}.{p.key}", f"{prior:.4g}",
                      f"{result.values[p.name]:.4g}", f"{result.std[p.name]:.2g}",
                      f"{lo:.3g} - {hi:.3g}")  # fmt: skip
    out.print(table)
    for name, why in result.not_fitted.items():
        out.print(escape(f"  not fitted: {name}: {why}"), highlight=False)
    out.print(
        f"iteration-time MAPE over the {len(result.runs)} runs: uncalibrated "
        f"{mape(result.uncalibrated):.1%}, calibrated {mape(result.calibrated):.1%}, "
        f"leave-one-run-out {mape(result.leave_one_out):.1%}"
        + (
            f"; {len(result.skipped)} runs skipped (not expressed or not timed)"
            if result.skipped
            else ""
        ),  # fmt: skip
        highlight=False,
    )
    out.print(escape(f"wrote {path}: apply it with sim run --hardware-overlay {path}"))


@friendly
def calibrate(
    runs: list[str] = typer.Argument(
        None,
        metavar="RUN",
        show_default=False,
        help="With --from-runs: measured runs (logs, golden JSON, measured-run CSVs).",
    ),
    out_path: Path = typer.Option(
        ...,
        "--out",
        "-o",
        help="Hardware YAML to write (load it like a preset: hardware: "
        "PATH); with --from-runs, the hardware overlay to write.",
    ),  # fmt: skip
    nproc: int = typer.Option(
        2,
        min=1,
        max=MAX_GPUS,
        help="Ranks, as the replay will use (1: one GPU, no rank-to-rank link measured).",
    ),
    device: str = typer.Option("cpu", help="cpu (gloo) or cuda (NCCL)."),
    from_runs: bool = typer.Option(
        False,
        "--from-runs",
        help="Fit the declared parameters of one's cluster (GEMM, "
        "attention and memory-bound efficiency, kernel overhead, NCCL bandwidths) to measured "
        "runs (RUN...) instead of measuring this machine.",
    ),  # fmt: skip
    parameters: str = typer.Option(
        None,
        help="With --from-runs: fit only these (comma-separated: "
        + ", ".join(p.name for p in PARAMETERS)
        + ").",
    ),  # fmt: skip
    gpu: str = typer.Option(
        "", help="With --from-runs: the runs' GPU when their files do not say."
    ),
    gpus: int = typer.Option(None, "--gpus", min=1, help="With --from-runs: GPUs per job."),
    verbose: int = VERBOSE,
    quiet: bool = QUIET,
) -> None:
    """Measure this machine's ranks (compute FLOP/s, copy bandwidth, rank-to-rank latency and
    bandwidth; host<->device on GPUs) and write a hardware description; or, with --from-runs,
    fit a few physical parameters of one's own cluster to its measured runs and write a
    hardware overlay (sim run --hardware-overlay)."""
    apply_verbosity(verbose, quiet)
    if from_runs:
        if not runs:
            raise InputError("give the measured runs to fit", field="RUN")
        only = [x.strip() for x in parameters.split(",")] if parameters else None
        result = calibrate_from_runs(
            runs, out=out_path, only=only, gpu=gpu, num_gpus=gpus,
            progress=lambda m: err.print(escape(m), highlight=False),
        )  # fmt: skip
        _report(result, out_path)
        return
    if runs:
        raise InputError("run files are read only with --from-runs", field="RUN")
    check_device_name(device)
    check_writable(out_path, option="--out")  # fail now, not after the measurement
    need_torch()
    check_device(device, nproc=nproc)
    log.info("calibrating %d %s rank(s): compute, copies, rank-to-rank links, GEMMs by shape, "
             "launch overhead (a few minutes)", nproc, device)  # fmt: skip
    with progress(1, "calibrating", "measurements", console=err) as on_done:
        hardware = calibrate_devices(nproc=nproc, device=device, path=out_path)
        on_done(1)
    gpu_spec = hardware.get("gpu", {})
    out.print(escape(f"wrote {out_path}: {nproc} x {gpu_spec.get('model', device)}"))
    for link in hardware.get("links", [])[:4]:
        out.print(escape(f"  {link}"))
