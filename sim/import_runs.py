"""``sim import``: launch arguments, configs and logs as a pipesim experiment that pins them.

For each input (:func:`sim.runs.readers.read_runs`: a Megatron-LM / Megatron-Bridge argument
list or config, a torchtitan TOML, a DeepSpeed JSON with its launch command, or a training log
of any of them) this writes, into the output folder:

* ``<name>.yaml``: an experiment that pins the run's configuration (its hardware preset, model
  trace, framework profile, layout, batch, schedule and memory policy) so that ``sim run`` on
  it simulates exactly that run; with ``sweep=True`` a sweep around it instead (the same GPUs,
  neighbouring tensor and pipeline sizes, micro-batches, schedules and memory policies:
  :func:`sweep_around`);
* ``<model>.csv`` + ``<model>.yaml``: the model's analytic trace (:mod:`sim.trace.decoder` or
  :func:`sim.trace.generator.transformer_trace`, generated on the preset's GPU at micro-batch
  1; ``sim run`` regenerates it at each micro-batch size);
* ``<name>.arguments.csv``: every argument, mapped, ignored or approximated, with the reason;
* ``<name>.measured.csv``: for a log, the run's measured row (configuration and measurements in
  seconds and bytes, :meth:`~sim.runs.record.MeasuredRun.row`).

An argument that changes the answer and that pipesim cannot express is an error naming it
(:class:`~sim.errors.InputError`, exit code 2), unless the caller passes it in ``ignore``:
then it is reported as ignored on request, with what it would have changed. Nothing is written
before every input has been read and checked; each file is written atomically.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from sim.atomic import atomic_write_text, check_writable
from sim.errors import InputError
from sim.hardware.loader import load_hardware, load_hardware_spec
from sim.hardware.overlay import with_overlays
from sim.runs.express import Expressed, NotExpressed, express
from sim.runs.predict import build_trace
from sim.runs.readers import read_runs
from sim.runs.record import ArgNote, MeasuredRun
from sim.trace.native import trace_stem, write_trace

ARG_COLUMNS = ("name", "value", "status", "reason")


@dataclass(frozen=True)
class Imported:
    """One run imported: what was written and how each argument was read."""

    run: MeasuredRun
    expressed: Expressed
    experiment: Path
    files: tuple[Path, ...]


def with_ignored(run: MeasuredRun, ignore: Iterable[str]) -> MeasuredRun:
    """``run`` with the unmapped arguments named in ``ignore`` (with or without leading
    dashes) reported as ignored on request."""
    names = {n.lstrip("-") for n in ignore}
    args = tuple(
        ArgNote(a.name, a.value, "ignored", f"ignored on request (--ignore); it {a.reason}")
        if a.status == "unmapped" and a.name.lstrip("-") in names
        else a
        for a in run.args
    )
    return replace(run, args=args)


def flag_name(name: str) -> str:
    """A Megatron-style flag with its dashes (``--overlap-grad-reduce``); other names (a
    config's ``section.key``) as they are."""
    return name if "." in name or " " in name or name.startswith("-") else f"--{name}"


INVALID = ("must be >= ", "is not a number", "is not a whole number", "unexpanded shell variable")
"""What the readers say of a value that no run can have had (``Reading.int``): to correct,
not to leave out."""


def _said(bad: list[ArgNote]) -> str:
    return "; ".join(
        f"{a.name} = {a.value}: {a.reason}" if a.value else f"{a.name} not given: {a.reason}"
        for a in bad
    )


def _unmapped_text(bad: list[ArgNote]) -> str:
    """What the arguments ``bad`` change that pipesim cannot express, and what to do: one
    given with a value can be left out (``--ignore NAME``); one missing (no value: a
    vocabulary no tokenizer gives) must be added; one whose value is invalid (a batch of -8,
    a size 'two': :data:`INVALID`) corrected, not left out."""
    invalid = [a for a in bad if any(word in a.reason for word in INVALID)]
    if invalid:
        many = "1 argument has" if len(invalid) == 1 else f"{len(invalid)} arguments have"
        rest = [a for a in bad if a not in invalid]
        more = f" ({_unmapped_text(rest)})" if rest else ""
        return (
            f"{many} an invalid value: {_said(invalid)}. Correct it in the command or config{more}"
        )
    what = _said(bad)
    many = "1 argument changes" if len(bad) == 1 else f"{len(bad)} arguments change"
    todo = []
    if any(a.value for a in bad):
        todo.append("pass --ignore NAME for each given one to run without it")
    if any(not a.value for a in bad):
        todo.append("add each one not given to the command or config")
    return f"{many} the answer and cannot be expressed yet: {what}. " + "; ".join(todo).capitalize()


def check_expressed(run: MeasuredRun) -> Expressed:
    """The run as pipesim simulates it.

    Raises:
        InputError: naming the file and the first argument (or setting) that changes the
            answer and cannot be expressed, with all of them in the message.
    """
    bad = run.unmapped()
    if bad:
        raise InputError(_unmapped_text(bad), file=run.source, field=flag_name(bad[0].name))
    ex = express(run)
    if isinstance(ex, NotExpressed):
        first = ex.reasons[0]
        field = next((f for f in ("precision", "GPU", "recompute", "framework") if first.startswith(f)),
                     "model")  # fmt: skip
        raise InputError(f"cannot be simulated: {'; '.join(ex.reasons)}", file=run.source,
                         field=field.lower())  # fmt: skip
    return ex


def experiment_name(run: MeasuredRun) -> str:
    """A name for folders and files: the run's name in letters, digits, ``. _ + -``."""
    name = re.sub(r"[^A-Za-z0-9._+-]+", "-", run.name).strip("-.") or "imported"
    return name[:100]


def hardware_of(ex: Expressed) -> str | dict[str, Any]:
    """``ex``'s preset, with the shipped overlay of its machine set over it when it has one
    (an inline hardware mapping: :attr:`sim.runs.express.Expressed.overlay`)."""
    return with_overlays(ex.hardware, ex.overlay)


def pinned(ex: Expressed, trace_ref: str, name: str) -> dict[str, Any]:
    """The experiment mapping that pins ``ex``'s configuration."""
    p, run = ex.point, ex.run
    sweep: dict[str, Any] = {k: p[k] for k in ("sequence_parallel", "expert_parallel",
                             "context_parallel", "context_parallel_comm", "memory_policy")
                             if k in p}  # fmt: skip
    if p.get("dp_shard", 1) > 1:  # FSDP: all of dp_width (-1) or HSDP's shard degree
        sweep["dp_shard"] = -1 if p["dp_shard"] == p["dp_width"] else p["dp_shard"]
    if p.get("expert_tensor_parallel") is not None:
        sweep["expert_tensor_parallel"] = p["expert_tensor_parallel"]
    model = {"name": ex.model, "trace": trace_ref, "global_batch": p["global_batch"],
             "microbatch_size": p["microbatch_size"], "stages": p["stages"],
             "tensor_parallel": p["tensor_parallel"], "dp_width": p["dp_width"],
             "schedule": p["schedule"], "virtual_stages": p["virtual_stages"]}  # fmt: skip
    notes = "; ".join(ex.approximations[:12])
    return {
        "name": name,
        "description": f"Imported by `sim import` from {run.source} ({run.framework}, "
        f"{run.gpu or 'GPU not named'}, {run.num_gpus or ex.run.layout.gpus} GPUs)."
        + (f" Approximations: {notes}." if notes else ""),
        "hardware": hardware_of(ex),
        "framework": ex.framework,
        "models": [model],
        "training": {"dtype": ex.dtype, "global_batch": p["global_batch"]},
        "sweep": sweep,
        "options": {"partition": "uniform"},
    }


def _halves(x: int, limit: int) -> list[int]:
    """``x`` halved, as is and doubled, within ``1 .. limit`` (``x`` always kept)."""
    return sorted({v for v in (x // 2, x * 2) if 1 <= v <= limit} | {x})


def sweep_around(ex: Expressed, trace_ref: str, name: str, per_server: int) -> dict[str, Any]:
    """An experiment that sweeps the neighbourhood of ``ex`` on the same GPUs: tensor and
    pipeline sizes halved and doubled (tensor parallelism inside a server), micro-batch sizes
    halved and doubled, the framework's two Megatron schedules, and the memory policy with and
    without full recompute."""
    exp = pinned(ex, trace_ref, name)
    p = ex.point
    model = exp["models"][0]
    for key in ("stages", "tensor_parallel", "dp_width", "schedule", "virtual_stages"):
        model.pop(key)
    model["microbatch_size"] = _halves(p["microbatch_size"], p["global_batch"])
    policy = str(p["memory_policy"])
    alt = {"dist_opt": "dist_opt:recompute", "dist_opt:recompute": "dist_opt",
           "none": "recompute:full", "recompute:full": "none", "zero3": "zero3:recompute",
           "zero3:recompute": "zero3"}.get(policy)  # fmt: skip
    exp["sweep"] |= {
        "gpus": ex.run.num_gpus or ex.run.layout.gpus,
        "stages": _halves(p["stages"], 64),
        "tensor_parallel": _halves(p["tensor_parallel"], per_server),
        "schedule": ["1f1b", "interleaved_1f1b"] if ex.framework.startswith("megatron") else
        [p["schedule"]],
        "memory_policy": [policy] + ([alt] if alt else []),
    }  # fmt: skip
    exp["description"] = exp["description"].replace("Imported", "A sweep around the run imported")
    return exp


def _args_csv(run: MeasuredRun) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(ARG_COLUMNS)
    for a in run.args:
        w.writerow([a.name, a.value, a.status, a.reason])
    return buf.getvalue()


def _measured_csv(run: MeasuredRun) -> str:
    row = run.row()
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(row))
    w.writeheader()
    w.writerow(row)
    return buf.getvalue()


def _keep_edited(path: Path, text: str) -> None:
    """An experiment ``sim import`` would write over must be one it wrote: the same text
    (a rerun). Another (edited by hand since, or another run of the same name) is not
    replaced.

    Raises:
        InputError: naming ``path`` and ``--out``; nothing is written then.
    """
    try:
        old = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return
    except OSError:
        old = None
    if old != text:
        raise InputError(
            f"{path} exists and differs from the experiment this import writes (edited since, "
            "or another run of that name): choose another --out, or remove it to import anew",
            field="--out",
        )


def import_runs(
    sources: Iterable[str | Path],
    *,
    out: Path,
    ignore: Iterable[str] = (),
    sweep: bool = False,
    **opts: Any,
) -> list[Imported]:
    """Import every run of ``sources`` into ``out`` (module doc).

    Args:
        sources: files or launch commands (:func:`sim.runs.readers.read_runs`).
        out: the output folder (created).
        ignore: unmappable arguments to run without.
        sweep: write a sweep around each run instead of the pinned configuration.
        **opts: what the readers take (``gpu``, ``num_gpus``, ``config``, ``command``,
            ``hf_config``, ``seq_len``).

    Raises:
        InputError: an unreadable input, an argument that changes the answer and cannot be
            expressed (not in ``ignore``), or an unwritable folder; nothing is written then.
    """
    runs = [with_ignored(r, ignore) for s in sources for r in read_runs(s, **opts)]
    checked = [(r, check_expressed(r)) for r in runs]
    check_writable(out, option="--out", directory=True)
    planned = []
    for run, ex in checked:
        name = experiment_name(run)
        trace = build_trace(ex, load_hardware(hardware_of(ex)))
        ref = trace_stem(out / ex.model).name + ".csv"
        per_server = load_hardware_spec(ex.hardware).num_gpus
        exp = sweep_around(ex, ref, name, per_server) if sweep else pinned(ex, ref, name)
        planned.append((run, ex, name, trace, yaml.safe_dump(exp, sort_keys=False)))
    for _run, _ex, name, _trace, text in planned:
        _keep_edited(out / f"{name}.yaml", text)
    out.mkdir(parents=True, exist_ok=True)
    done = []
    for run, ex, name, trace, text in planned:
        trace_files = write_trace(trace, out / ex.model)
        path = atomic_write_text(out / f"{name}.yaml", text)
        files = [path, *trace_files]
        files.append(atomic_write_text(out / f"{name}.arguments.csv", _args_csv(run)))
        if run.measured.iteration_time_s is not None or run.measured.peak_bytes is not None:
            files.append(atomic_write_text(out / f"{name}.measured.csv", _measured_csv(run)))
        done.append(Imported(run, ex, path, tuple(files)))
    return done
