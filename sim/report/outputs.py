"""Write the files of ``sim run``: results table, winner, resolved config, plots, timeline.

Every file is written atomically (temporary file, then rename), and nothing is written until
the whole grid has been validated, so bad input never leaves partial results. The whole output
set of a run is written into a staging folder beside the target (``.<name>.new-<pid>``) and
swapped in with two renames (:func:`staged_output`, :func:`commit_output`), so the folder
always holds one run's complete set: a rerun where nothing fits leaves no earlier winner, and a
kill leaves either the old set or the new one (a later run finishes or undoes the swap and
removes the leftovers: :func:`recover_out_dir`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from sim.atomic import (
    atomic_write_bytes,
    atomic_write_text,
    check_writable,
    pid_alive,
    remove_stale_temps,
    scratch_folder,
)
from sim.bands import Bands
from sim.config import ExperimentConfig
from sim.errors import InputError
from sim.events import EventLog
from sim.point.rows import ResultRow
from sim.report.chrome_trace import write_chrome_trace
from sim.report.drawing import Drawing, draw
from sim.report.provenance import stamped
from sim.report.row_bands import with_bands
from sim.report.tables import config_label
from sim.trace.loader import traces_dir

if TYPE_CHECKING:
    import pandas as pd


def results_frame(rows: list[ResultRow], bands: Bands | None = None) -> pd.DataFrame:
    """The tidy table, one row per configuration: :class:`ResultRow`'s fields, in order, then
    each prediction's band (:data:`sim.report.row_bands.BAND_COLUMNS`) from ``bands`` (default: the
    shipped ones; :func:`sim.report.row_bands.bands_for` the hardware's)."""
    import pandas as pd  # on first use: `import sim.api` stays fast

    return with_bands(
        pd.DataFrame([r.model_dump() for r in rows], columns=list(ResultRow.model_fields)), bands
    )


def write_results_csv(
    rows: list[ResultRow], path: Path, bands: Bands | None = None
) -> pd.DataFrame:
    """Write :func:`results_frame` to ``path``; returns it."""
    df = results_frame(rows, bands)
    write_frame_csv(df, path)
    return df


def write_frame_csv(df: pd.DataFrame, path: Path) -> Path:
    """Write ``df`` (a :func:`results_frame`) to ``path`` as results.csv is written."""
    return atomic_write_text(path, df.to_csv(index=False))


def copy_files(files: list[Path], dest: Path) -> list[Path]:
    """Copy ``files`` into the folder ``dest`` (each written atomically, same name); returns
    the copies."""
    return [atomic_write_bytes(dest / f.name, f.read_bytes()) for f in files]


def _portable_trace_ref(ref: str, exp_file: str) -> str:
    """Names of shipped traces stay names; paths become absolute so the winner runs anywhere."""
    if (traces_dir() / f"{ref}.csv").is_file() or (traces_dir() / ref).is_dir():
        return ref
    p = Path(ref)
    return str(p if p.is_absolute() else (Path(exp_file).parent / p).resolve())


def winner_config(
    exp: ExperimentConfig, exp_file: str, row: ResultRow, band: dict | None = None
) -> dict:
    """An experiment that simulates just the winner, with the prediction attached (and its
    ``band``: :func:`sim.report.row_bands.winner_bands`)."""
    model = next(m for m in exp.models if m.name == row.model)
    data = exp.model_dump(mode="json", exclude_none=True)
    hw = exp.hardware
    if isinstance(hw, str) and (hw.endswith((".yaml", ".yml")) or "/" in hw):
        data["hardware"] = str((Path(exp_file).parent / hw).resolve())
    data["name"] = f"{exp.name[:120]}-winner"
    data["description"] = f"Winner of experiment {exp.name}: {row.model} {config_label(row)}"
    # the model's own global batch, not training's default for models without one (64)
    data.setdefault("training", {})["global_batch"] = int(row.global_batch)
    data["models"] = [
        {
            "name": model.name,
            "trace": _portable_trace_ref(model.trace, exp_file),
            **({"seq_len": model.seq_len} if model.seq_len is not None else {}),
            "global_batch": int(row.global_batch),
            "microbatch_size": int(row.microbatch_size),
            **({"routing": row.routing} if row.routing != "balanced" else {}),
        }
    ]
    data["sweep"] = _winner_sweep(row)
    if row.precision:
        data.setdefault("training", {})["precision"] = row.precision
    elif "training" in data:
        data["training"].pop("precision", None)
    grouped = row.tensor_parallel > 1 or row.expert_parallel > 1 or row.context_parallel > 1
    data["options"] = {
        "partition": exp.options.partition,
        "boundaries": json.loads(row.boundaries),
        # tensor/expert/context groups are placed automatically (sim.parallel.domains)
        "placement": None if grouped else json.loads(row.placement),
    }
    data["prediction"] = {k: getattr(row, k) for k in PREDICTION_KEYS}
    data["prediction"].update(band or {})
    return data


PREDICTION_KEYS = (
    "iteration_time_s",
    "throughput_samples_per_s",
    "bubble_fraction",
    "peak_memory_bytes",
    "peak_reserve_source",
    "microbatches",
    "trace_origin",
    "flops_per_s_per_gpu",
    "mfu",
    "flops_source",
)
"""The fields of the winner's row that ``winner.yaml`` records under ``prediction``."""


def _winner_sweep(row: ResultRow) -> dict[str, Any]:
    """The one-point ``sweep`` of the winner ``row``: its schedule, stages, data-parallel width,
    micro-batch size and memory policy, and each parallel dimension that is not 1 (off)."""
    sweep: dict[str, Any] = {
        "schedule": row.schedule,
        "stages": int(row.stages),
        "dp_width": int(row.dp_width),
        "microbatch_size": int(row.microbatch_size),
        "memory_policy": row.memory_policy,
    }
    if row.tensor_parallel > 1:
        sweep["tensor_parallel"] = int(row.tensor_parallel)
        sweep["sequence_parallel"] = bool(row.sequence_parallel)
    if row.virtual_stages > 1:
        sweep["virtual_stages"] = int(row.virtual_stages)
    if row.expert_parallel > 1:
        sweep["expert_parallel"] = int(row.expert_parallel)
    if row.ep_overlap:
        sweep["ep_overlap"] = True
    if row.context_parallel > 1:
        sweep["context_parallel"] = int(row.context_parallel)
        sweep["context_parallel_comm"] = row.context_parallel_comm
    if row.dp_shard > 1:
        sweep["dp_shard"] = int(row.dp_shard)
    if row.expert_tensor_parallel is not None:
        sweep["expert_tensor_parallel"] = int(row.expert_tensor_parallel)
    return sweep


def write_yaml(path: Path, data: dict) -> Path:
    """Write ``data`` to ``path`` as YAML in its own key order, atomically; returns ``path``."""
    return atomic_write_text(path, yaml.safe_dump(data, sort_keys=False))


def winner_artifacts(out: Path, log: EventLog, title: str) -> list[Drawing]:
    """The winner's memory plots, Gantt timeline and Chrome trace in ``out``, each titled with
    ``title`` (the configuration): each file with the call that draws it (:func:`draw`)."""
    from sim.report.gantt import plot_gantt  # matplotlib on first use: `import sim.api` is fast
    from sim.report.memory_plots import plot_memory_per_gpu, plot_memory_timeline

    n = len(log.iteration_ends_s)
    it = (n // 2 if n >= 3 else n - 1) if n >= 1 else None  # a steady-state iteration
    return [
        (
            out / "memory_per_gpu.png",
            partial(stamped, plot_memory_per_gpu, log, out / "memory_per_gpu.png", title=title),
        ),
        (
            out / "memory_timeline.png",
            partial(stamped, plot_memory_timeline, log, out / "memory_timeline.png", title=title),
        ),
        (
            out / "timeline.png",
            partial(stamped, plot_gantt, log, out / "timeline.png", iteration=it, title=title),
        ),
        (
            out / "timeline.json",
            partial(write_chrome_trace, log, out / "timeline.json", title=title),
        ),
    ]


def write_winner_artifacts(out: Path, log: EventLog, title: str) -> list[Path]:
    """Plots and the Chrome trace of the winner's simulation, drawn here."""
    return draw(winner_artifacts(out, log, title), jobs=1)


# --- the output set: written whole into a staging folder, then swapped in ------------------

MANIFEST = ".pipesim-outputs.json"
"""Lists the top-level entries of a ``sim run`` output folder that the run wrote."""
OUTPUT_NAMES = {
    "results.csv",
    "winner.yaml",
    "config.resolved.yaml",
    "throughput.png",
    "memory_per_gpu.png",
    "memory_timeline.png",
    "timeline.png",
    "timeline.json",
    "memory_summary.csv",
    "max_model_per_policy.png",
    "throughput_vs_model_size.png",
    "tflops_per_gpu.csv",
    "tflops_vs_model_size.png",
}
"""Files a run writes at the top of its folder (and what runs before the manifest existed
wrote; their folders count as ours too). A model may not be named like one of them."""
_STALE = re.compile(r"^\.(?P<name>.+)\.(?P<kind>new|old)-(?P<pid>\d+)$")


def _ours(folder: Path) -> set[str]:
    """Names of ``folder``'s entries written by an earlier ``sim run``."""
    manifest = folder / MANIFEST
    if manifest.is_file():
        try:
            names = json.loads(manifest.read_text(encoding="utf-8"))["entries"]
            return {str(n) for n in names if "/" not in str(n) and str(n) not in ("", ".", "..")}
        except (ValueError, KeyError, TypeError, OSError):
            return set()
    out = {p.name for p in folder.iterdir() if p.name in OUTPUT_NAMES}
    out |= {
        p.name
        for p in folder.iterdir()
        if p.is_dir()
        and not p.name.startswith(".")
        and {c.name for c in p.iterdir()} <= OUTPUT_NAMES
    }
    return out


def check_model_names(exp: ExperimentConfig, file: str) -> None:
    """With several models each gets a folder beside the run's files: no model may be named
    like one of them.

    Raises:
        InputError: naming the model's field.
    """
    if len(exp.models) < 2:
        return
    for i, m in enumerate(exp.models):
        if m.name in OUTPUT_NAMES | {MANIFEST, "validation.csv"}:
            raise InputError(
                f"{m.name!r} is the name of an output file; rename the model",
                file=file,
                field=f"models.{i}.name",
            )


def check_out_dir(out: Path, *, option: str = "--out", experiment: str | None = None) -> None:
    """Before a run: ``out`` must be a writable folder (or creatable), empty or written by an
    earlier ``sim run`` (its files are replaced as a whole) of the same ``experiment`` (its
    name, where the folder's manifest records one), and not the working directory or one of
    its parents (it is renamed).

    Raises:
        InputError: naming ``option``.
    """
    check_writable(out, option=option, directory=True)
    real, cwd = out.resolve(), Path.cwd().resolve()
    if real == cwd or real in cwd.parents:
        raise InputError(
            f"{out} is the working directory or holds it; its files are replaced "
            "as a whole, so name a folder inside it (e.g. --out results/x)",
            field=option,
        )
    if out.is_dir():
        entries = {p.name for p in out.iterdir()} - {".cache", MANIFEST}
        if entries and not (out / MANIFEST).is_file() and not (_ours(out) & {"results.csv"}):
            raise InputError(
                f"{out} holds files not written by `sim run` "
                f"({', '.join(sorted(entries)[:3])}); choose a new or empty folder",
                field=option,
            )
        earlier = _experiment_of(out)
        if experiment and earlier and earlier != experiment:
            raise InputError(
                f"{out} holds the results of experiment {earlier!r}, which this run of "
                f"{experiment!r} would replace; choose another folder (or remove that one)",
                field=option,
            )


def _experiment_of(folder: Path) -> str:
    """The experiment whose run wrote ``folder`` (its manifest's ``experiment``), or ""
    (none recorded: a run before it was, or no manifest)."""
    try:
        data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    name = data.get("experiment") if isinstance(data, dict) else None
    return name if isinstance(name, str) else ""


def _carry_over(old: Path, out: Path) -> None:
    """Move what the previous run did not write (its cache, `sim validate` files) from ``old``
    into ``out``; the previous run's own files are dropped with ``old``."""
    ours = _ours(old) | {MANIFEST}
    for entry in old.iterdir():
        if entry.name not in ours and not (out / entry.name).exists():
            os.rename(entry, out / entry.name)


def recover_out_dir(out: Path) -> None:
    """Finish or undo the swap of a run killed while swapping, and remove its staging folders
    (those whose pid is dead)."""
    parent = out.parent
    if not parent.is_dir():
        return
    stale = []
    for p in parent.iterdir():
        m = _STALE.match(p.name)
        if m and m["name"] == out.name and p.is_dir() and not pid_alive(int(m["pid"])):
            stale.append((m["kind"], p))
    if not out.exists():
        done = [p for kind, p in stale if kind == "new" and (p / MANIFEST).is_file()]
        olds = [p for kind, p in stale if kind == "old"]
        if done:
            os.rename(done[0], out)
        elif olds:
            os.rename(olds[0], out)
    for kind, p in stale:
        if not p.exists():
            continue
        if kind == "old" and out.is_dir():
            _carry_over(p, out)
        shutil.rmtree(p, ignore_errors=True)
    remove_stale_temps(out)
    remove_stale_temps(out / ".cache")


@contextmanager
def staged_output(out: Path):
    """Yield a staging folder beside ``out``; write the whole output set into it, then call
    :func:`commit_output`. On an error the staging folder is removed and ``out`` is untouched.
    """
    recover_out_dir(out)
    with scratch_folder(out.parent / f".{out.name}.new-{os.getpid()}") as stage:
        yield stage


def commit_output(stage: Path, out: Path, experiment: str = "") -> None:
    """Swap the complete output set in ``stage`` in for ``out`` (two renames), keeping what
    the previous run did not write (its ``.cache``, files of `sim validate`); the manifest
    names the ``experiment`` (:func:`check_out_dir`)."""
    entries = sorted(p.name for p in stage.iterdir())
    manifest: dict[str, object] = {"entries": entries}
    if experiment:
        manifest["experiment"] = experiment
    atomic_write_text(stage / MANIFEST, json.dumps(manifest, indent=1))
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    if out.exists():
        os.rename(out, old)
    os.rename(stage, out)
    if old.exists():
        _carry_over(old, out)
        shutil.rmtree(old, ignore_errors=True)
