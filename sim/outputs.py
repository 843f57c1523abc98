"""Write the files of ``sim run``: results table, winner, resolved config, plots, timeline.

Every file is written atomically (temporary file, then rename), and nothing is written until
the whole grid has been validated, so bad input never leaves partial results.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import yaml

from sim.atomic import atomic_write_text
from sim.config import ExperimentConfig
from sim.events import EventLog
from sim.trace.loader import traces_dir


def write_results_csv(rows: list[dict], path: Path) -> pd.DataFrame:
    """The tidy table, one row per configuration; returns it as a DataFrame."""
    df = pd.DataFrame(rows)
    atomic_write_text(path, df.to_csv(index=False))
    return df


def _portable_trace_ref(ref: str, exp_file: str) -> str:
    """Names of shipped traces stay names; paths become absolute so the winner runs anywhere."""
    if (traces_dir() / f"{ref}.csv").is_file() or (traces_dir() / ref).is_dir():
        return ref
    p = Path(ref)
    return str(p if p.is_absolute() else (Path(exp_file).parent / p).resolve())


def winner_config(exp: ExperimentConfig, exp_file: str, row: dict) -> dict:
    """An experiment that simulates just the winner, with the prediction attached."""
    import json

    model = next(m for m in exp.models if m.name == row["model"])
    data = exp.model_dump(mode="json", exclude_none=True)
    hw = exp.hardware
    if isinstance(hw, str) and (hw.endswith((".yaml", ".yml")) or "/" in hw):
        data["hardware"] = str((Path(exp_file).parent / hw).resolve())
    data["name"] = f"{exp.name}-winner"
    data["description"] = (f"Winner of experiment {exp.name}: {row['model']} {row['schedule']} "
                           f"p={row['stages']} w={row['dp_width']} b={row['microbatch_size']}")
    data["models"] = [{"name": model.name, "trace": _portable_trace_ref(model.trace, exp_file),
                       "global_batch": int(row["global_batch"]),
                       "microbatch_size": int(row["microbatch_size"])}]
    data["sweep"] = {"schedule": row["schedule"], "stages": int(row["stages"]),
                     "dp_width": int(row["dp_width"]),
                     "microbatch_size": int(row["microbatch_size"]),
                     "memory_policy": row["memory_policy"]}
    data["options"] = {"partition": exp.options.partition,
                       "boundaries": json.loads(row["boundaries"]),
                       "placement": json.loads(row["placement"])}
    data["prediction"] = {k: row[k] for k in (
        "iteration_time_s", "throughput_samples_per_s", "bubble_fraction", "peak_memory_bytes",
        "microbatches") if k in row}
    return data


def write_yaml(path: Path, data: dict) -> Path:
    return atomic_write_text(path, yaml.safe_dump(data, sort_keys=False))


def write_winner_artifacts(out: Path, log: EventLog, title: str) -> list[Path]:
    """Plots and the Chrome trace of the winner's simulation."""
    from sim.report.chrome_trace import write_chrome_trace
    from sim.report.gantt import plot_gantt
    from sim.report.memory_plots import plot_memory_per_gpu, plot_memory_timeline

    n = len(log.iteration_ends_s)
    it = (n // 2 if n >= 3 else n - 1) if n >= 1 else None  # a steady-state iteration
    return [
        plot_memory_per_gpu(log, out / "memory_per_gpu.png"),
        plot_memory_timeline(log, out / "memory_timeline.png"),
        plot_gantt(log, out / "timeline.png", iteration=it),
        write_chrome_trace(log, out / "timeline.json", title=title),
    ]
