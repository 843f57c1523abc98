"""The ``sim`` command line: run experiments and inspect hardware, traces, schedules, partitions.

Every command turns bad input into one message naming the file and field, exit code 2, and no
traceback. Units: seconds and bytes inside; the tables print ms, GiB, GB/s.
"""

from __future__ import annotations

import json
import os
import sys
from enum import StrEnum
from functools import wraps
from pathlib import Path

import typer
from rich.console import Console

from sim.config import MAX_GPUS, MAX_ITERATIONS, MAX_MICROBATCHES
from sim.errors import InputError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="pipesim: which pipeline schedule, partition, micro-batching and "
    "memory policy trains fastest on this server, and does it fit?",
)
hardware_app = typer.Typer(no_args_is_help=True, help="Hardware presets (GPUs, links, hosts).")
schedule_app = typer.Typer(no_args_is_help=True, help="Pipeline schedules as per-rank actions.")
trace_app = typer.Typer(no_args_is_help=True, help="Per-layer traces (profiles) of models.")
app.add_typer(hardware_app, name="hardware")
app.add_typer(schedule_app, name="schedule")
app.add_typer(trace_app, name="trace")

out = Console(width=None if sys.stdout.isatty() else 140)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 140)


def friendly(fn):
    """Run ``fn``; an :class:`InputError` becomes a one-line message and exit code 2, an
    operating-system fault (disk full, permission lost mid-run) one line and exit code 1."""

    @wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except InputError as exc:
            err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
        except OSError as exc:
            where = f"{exc.filename}: " if exc.filename else ""
            err.print(
                f"[bold red]error:[/] {where}{exc.strerror or exc}", highlight=False, soft_wrap=True
            )
            raise typer.Exit(1) from None

    return wrapper


class RunExecutor(StrEnum):
    """``sim run --executor`` choices (:mod:`sim.executors`)."""

    local = "local"
    ray = "ray"


@app.command()
@friendly
def run(
    experiment: Path = typer.Argument(
        ...,
        help="Experiment YAML (e.g. experiments/dgx1.yaml) "
        "or a winner.yaml written by an earlier run.",
    ),
    out_dir: Path = typer.Option(
        None,
        "--out",
        help="Output directory: new, empty, or written "
        "by an earlier `sim run` (its files are replaced as a whole).",
        show_default="results/<experiment name>/",
    ),
    jobs: int = typer.Option(
        0, "--jobs", "-j", min=0, help="Worker processes; 0: one per CPU core."
    ),
    no_cache: bool = typer.Option(
        False,
        "--no-cache",
        help="Recompute every configuration instead of reusing cached rows (OUT/.cache).",
    ),
    plots: bool = typer.Option(
        True,
        "--plots/--no-plots",
        help="Write PNG plots and the Chrome-trace timeline of the winner.",
    ),
    executor: RunExecutor = typer.Option(
        "local",
        "--executor",
        help="Where points are simulated: local (worker processes, --jobs) or ray (Ray "
        "tasks on RAY_ADDRESS, else a local Ray; pip install 'pipesim[ray]').",
    ),
    exhaustive: bool = typer.Option(
        False,
        "--exhaustive",
        help="Simulate every configuration: no pruning by the memory and throughput bounds "
        "(as sweep.prune: false; the winner is the same).",
    ),
) -> None:
    """Simulate every configuration of an experiment's grid and report the fastest that fits.

    Writes results.csv (one row per configuration; times in seconds, memory in bytes),
    winner.yaml (re-runnable with `sim run`, accepted by `sim validate`), config.resolved.yaml,
    plots (PNG) and timeline.json (Chrome trace: open in https://ui.perfetto.dev).
    """
    from sim.run import run_experiment

    code = run_experiment(
        experiment,
        out_dir=out_dir,
        jobs=jobs or (os.cpu_count() or 1),
        use_cache=not no_cache,
        plots=plots,
        console=out,
        executor=executor.value,
        exhaustive=exhaustive,
    )
    raise typer.Exit(code)


@hardware_app.command("list")
def hardware_list() -> None:
    """List hardware presets."""
    from sim.hardware.loader import list_presets

    for name in list_presets():
        out.print(name)


@hardware_app.command("show")
@friendly
def hardware_show(
    name: str = typer.Argument(..., help="Preset name or hardware YAML path."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (bytes, bytes/s, seconds)."),
) -> None:
    """Print a hardware description: GPUs (GiB, TFLOPS), links (GB/s, us) and routes."""
    from sim.hardware.describe import describe_topology, topology_to_dict
    from sim.hardware.loader import load_hardware

    topo = load_hardware(name, field="hardware")
    if as_json:
        print(json.dumps(topology_to_dict(topo), indent=2))
    else:
        out.print(describe_topology(topo))


@schedule_app.command("list")
def schedule_list() -> None:
    """List schedules."""
    from sim.schedules.registry import get_schedule, schedule_names

    for name in schedule_names():
        out.print(f"{name:15s} {get_schedule(name).description}")


@schedule_app.command("show")
@friendly
def schedule_show(
    name: str = typer.Argument(..., help="Schedule name (see `sim schedule list`)."),
    stages: int = typer.Option(
        ..., "--stages", "-p", min=1, max=MAX_GPUS, help="Pipeline depth p."
    ),
    microbatches: int = typer.Option(
        ...,
        "--microbatches",
        "-m",
        min=1,
        max=MAX_MICROBATCHES,
        help="Micro-batches per iteration m.",
    ),
    iterations: int = typer.Option(1, min=1, max=MAX_ITERATIONS, help="Optimizer steps to unroll."),
    virtual_stages: int = typer.Option(
        None,
        "--virtual-stages",
        "-v",
        min=1,
        max=64,
        help="Stage chunks per rank v (default: the schedule's smallest, 1 or 2).",
    ),
    csv: Path = typer.Option(
        None, "--csv", help="Write one iteration in torch's compute-only CSV format to this file."
    ),
) -> None:
    """Print a schedule as a step x rank grid of actions like '2F0' (stage 2, forward, mb 0).

    With v stage chunks per rank, stages run 0 .. p*v-1 and each column is a rank; torch's
    OVERLAP_F_B pairs show as '(7F4;0B0)OVERLAP_F_B'."""
    from sim.atomic import check_writable
    from sim.point_stages import make_schedule
    from sim.schedules.csv_io import to_csv
    from sim.schedules.grid import format_grid

    if csv:
        check_writable(csv, option="--csv")
    sched = make_schedule(
        name,
        stages,
        microbatches,
        file="command line",
        field="--stages",
        virtual_stages=virtual_stages,
    )
    print(format_grid(sched.program(iterations)))
    versions = [sched.weight_versions(s) for s in range(sched.num_stages)]
    out.print(f"weight versions per stage: {versions}; synchronous: {sched.synchronous}")
    if sched.virtual_stages > 1:
        ranks = [sched.rank_stages(r) for r in range(stages)]
        out.print(f"virtual stages: {sched.virtual_stages}; stages per rank: {ranks}")
    if csv:
        to_csv(sched.one_iteration(), csv)
        out.print(f"wrote {csv}")


@trace_app.command("list")
def trace_list() -> None:
    """List the traces shipped in traces/."""
    from sim.trace.loader import available_traces

    for name in available_traces():
        out.print(name)


@trace_app.command("show")
@friendly
def trace_show(ref: str = typer.Argument(..., help="Trace name or path.")) -> None:
    """Print a trace's layers (ms, MiB) and provenance."""
    from rich.table import Table

    from sim.trace.loader import load_trace
    from sim.units import fmt_bytes

    trace = load_trace(ref, file="command line", field="TRACE")
    table = Table(
        title=f"{trace.name}: {len(trace.layers)} layers, {trace.parameters:,} params, "
        f"micro-batch {trace.microbatch_size}, {trace.dtype}, {trace.device}"
    )
    for col in ("#", "layer", "fwd ms", "bwd ms", "params", "act", "out"):
        table.add_column(col, justify="right" if col != "layer" else "left")
    for i, layer in enumerate(trace.layers):
        table.add_row(
            str(i),
            layer.name[:40],
            f"{layer.fwd_s * 1e3:.3f}",
            f"{layer.bwd_s * 1e3:.3f}",
            fmt_bytes(layer.param_bytes),
            fmt_bytes(layer.act_bytes),
            fmt_bytes(layer.out_bytes),
        )
    out.print(table)
    out.print(trace.provenance)


@trace_app.command("import-kineto")
@friendly
def trace_import_kineto(
    source: Path = typer.Argument(
        ...,
        help="torch.profiler Chrome trace (.json or .json.gz) "
        "whose layers are record_function annotations.",
    ),
    out_path: Path = typer.Option(..., "--out", "-o", help="Trace to write: PATH.csv + PATH.yaml."),
    microbatch_size: int = typer.Option(
        ..., "--microbatch-size", "-b", help="Samples per micro-batch in the profiled steps."
    ),
    dtype: str = typer.Option("fp32", help="Training dtype of the profiled model."),
    name: str = typer.Option(None, help="Model name [default: the file name]."),
    layers: str = typer.Option(
        None,
        help="Annotation names forming the chain, a,b,c [default: every top-level annotation].",
    ),
    bytes_from: str = typer.Option(
        None,
        "--bytes-from",
        help="A trace of the same layers "
        "(e.g. from `sim profile --model ... --for-gpu`) giving "
        "parameter, activation and output bytes.",
    ),
) -> None:
    """Import a Kineto (torch.profiler) trace as a per-layer trace (seconds; bytes from
    --bytes-from)."""
    from sim.trace.kineto import read_kineto
    from sim.trace.loader import load_trace
    from sim.trace.native import write_trace

    ref = load_trace(bytes_from, file="command line", field="--bytes-from") if bytes_from else None
    names = [n.strip() for n in layers.split(",") if n.strip()] if layers else None
    trace = read_kineto(
        source,
        microbatch_size=microbatch_size,
        dtype=dtype,
        name=name or out_path.name,
        layers=names,
        bytes_from=ref,
    )
    write_trace(trace, out_path)
    out.print(
        f"wrote {out_path}.csv/.yaml: {len(trace.layers)} layers ({trace.provenance['timing']})"
    )
    if ref is None:
        err.print(
            "[yellow]warning:[/] parameter, activation and output bytes are 0 (a Kineto "
            "trace has none); give --bytes-from to fill them"
        )


@app.command("partition")
@friendly
def partition_cmd(
    trace_ref: str = typer.Argument(..., metavar="TRACE", help="Trace name or path."),
    stages: int = typer.Option(
        ..., "--stages", "-p", min=1, max=MAX_GPUS, help="Number of stages P."
    ),
    hardware: str = typer.Option(
        None,
        "--hardware",
        help="Preset or YAML: use its GPU "
        "memory as the capacity and its links for boundary transfers.",
        show_default="no capacity, free transfers",
    ),
    microbatch_size: int = typer.Option(
        None,
        "--microbatch-size",
        "-b",
        min=1,
        help="Bring the trace to this micro-batch size in "
        "samples (as `sim run` does: interpolation or the "
        "compute model).",
        show_default="the trace's own",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (seconds, bytes)."),
) -> None:
    """Split a trace's layers into P contiguous stages minimising the slowest stage.

    A stage's time is its forward + backward compute plus 2 x boundary bytes / link bandwidth;
    its memory is 16 B/param (fp16 + Adam) + (P - s) in-flight micro-batches of activations.
    """
    from sim.partition import partition, partition_json, partition_table
    from sim.placement import place
    from sim.trace.loader import load_trace

    trace = load_trace(trace_ref, file="command line", field="TRACE")
    if stages > len(trace.layers):
        raise InputError(
            f"{stages} stages but {trace.name} has {len(trace.layers)} layers", field="--stages"
        )
    bw = caps = None
    topo = None
    if hardware:
        from sim.hardware.loader import load_hardware

        topo = load_hardware(hardware, field="--hardware")
    if microbatch_size or topo is not None:
        from sim.compute.adapt import adapt_trace

        trace, notes = adapt_trace(
            trace, microbatch_size or trace.microbatch_size, topo.gpus[0].compute if topo else None
        )
        for note in notes:
            err.print(f"note: {note}", highlight=False)
    if topo is not None:
        if stages > topo.num_gpus:
            raise InputError(
                f"{stages} stages but {topo.name} has {topo.num_gpus} GPUs", field="--stages"
            )
        row = place(topo, stages, 1)[0]
        bw = [
            topo.route_bandwidth_Bps(f"gpu{row[j]}", f"gpu{row[j + 1]}", nccl=True)
            for j in range(stages - 1)
        ] or None
        caps = [topo.gpu(g).memory_bytes for g in row]
    part = partition(trace, stages, bandwidth_Bps=bw, memory_capacity_bytes=caps)
    if as_json:
        print(json.dumps(partition_json(part, trace), indent=2))
    else:
        out.print(partition_table(part, trace))


def _need_torch() -> None:
    """Fail with install instructions when torch is absent (without importing it here)."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        raise InputError(
            "this command needs torch: pip install -e '.[torch]' "
            "(CPU: pip install torch==2.13.0 first)"
        )


DTYPES = ("fp32", "fp16", "bf16")


def _check_choice(value: str, allowed: tuple[str, ...], option: str) -> None:
    if value not in allowed:
        raise InputError(f"{value!r} is not one of {', '.join(allowed)}", field=option)


def _check_device_name(device: str) -> None:
    """``cpu``, ``cuda`` or ``cuda:N`` (whether CUDA is there is checked with torch later)."""
    kind, _, index = device.partition(":")
    if kind not in ("cpu", "cuda") or (index and (kind == "cpu" or not index.isdigit())):
        raise InputError(f"{device!r} is not a device: use cpu, cuda or cuda:N", field="--device")


@app.command()
@friendly
def profile(
    out_path: Path = typer.Option(
        ...,
        "--out",
        "-o",
        help="Trace to write: PATH.csv + PATH.yaml (native format, with provenance).",
    ),
    kind: str = typer.Option("gpt", help="gpt (decoder) or bert (encoder)."),
    layers: str = typer.Option(
        None,
        help="GPT/BERT: transformer blocks L (1..1024). With "
        "--model: the layer chain as module names fqn1,fqn2,... (name.* "
        "= its children).",
        show_default="4; with --model: the model's top-level children",
    ),
    model: str = typer.Option(
        None,
        "--model",
        help="Your model: FILE.py:FUNC or "
        "package.module:FUNC returning (model, sample[, target]), or a "
        "Hugging Face config.json (random weights).",
    ),
    loss: str = typer.Option(
        None,
        "--loss",
        help="With --model: FILE.py:FUNC computing the "
        "loss from the last layer's output [and the target].",
    ),
    for_gpu: str = typer.Option(
        None,
        "--for-gpu",
        help="With --model: analyse under fake "
        "tensors for this GPU (preset or GPU name, e.g. H100) instead "
        "of running it.",
    ),
    hidden: int = typer.Option(256, min=1, help="Hidden size h (divisible by --heads)."),
    heads: int = typer.Option(4, min=1, help="Attention heads."),
    seq_len: int = typer.Option(128, min=1, help="Tokens per sample s."),
    vocab: int = typer.Option(2048, min=2, help="Vocabulary size V."),
    name: str = typer.Option(None, help="Model name.", show_default="the file name"),
    microbatch_size: list[int] = typer.Option(
        None,
        "--microbatch-size",
        "-b",
        min=1,
        help="Samples per micro-batch; repeat (-b 1 -b 2 "
        "-b 4) to profile several sizes into one trace "
        "(GPT/BERT).",
        show_default="4; with --model: the sample's",
    ),
    device: str = typer.Option("cpu", help="cpu, cuda or cuda:N."),
    dtype: str = typer.Option(
        None, help="fp32, fp16 or bf16.", show_default="fp32; bf16 with --for-gpu"
    ),
    threads: int = typer.Option(
        None,
        min=1,
        help="CPU threads while profiling; use cores / ranks of the replay.",
        show_default="cores / 2",
    ),
    reps: int = typer.Option(7, min=1, help="Measured repetitions per layer (median kept)."),
    split_backward: bool = typer.Option(
        False, help="Also measure the backward's input/weight split (bwd_input_s, bwd_weight_s)."
    ),
    concurrent: int = typer.Option(
        1,
        min=1,
        max=64,
        help="Profile in this many simultaneous "
        "processes (the replay's ranks on a CPU share cores and "
        "memory bandwidth); per-layer median over them.",
    ),
    attention: str = typer.Option(
        None,
        help="GPT/BERT: force the attention kernel, flash or math (torch SDPA); recorded "
        "in the trace, and a replay of it runs the same kernel.",
        show_default="torch's choice",
    ),
) -> None:
    """Measure a real torch model layer by layer into a trace (seconds and bytes per layer)."""
    from sim.atomic import check_writable
    from sim.config import NAME_PATTERN

    _check_choice(kind, ("gpt", "bert"), "--kind")
    if dtype is not None:
        _check_choice(dtype, DTYPES, "--dtype")
    if attention is not None:
        _check_choice(attention, ("flash", "math"), "--attention")
        if model or for_gpu:
            raise InputError("applies to the GPT/BERT models, not --model", field="--attention")
    _check_device_name(device)
    if hidden % heads:
        raise InputError(f"hidden size {hidden} is not divisible by {heads} heads", field="--heads")
    import re

    if not re.match(NAME_PATTERN, name or out_path.name):
        raise InputError(
            f"{name or out_path.name!r} is not a valid trace name: use letters, "
            "digits and . _ + - only",
            field="--name" if name else "--out",
        )
    for suffix in (".csv", ".yaml"):  # fail now, not after the measurement
        check_writable(out_path.with_name(out_path.name + suffix), option="--out")
    _need_torch()
    if not for_gpu:
        from backends.torch.profile import check_device

        check_device(device)
    if model or for_gpu:
        from backends.torch.user_cli import profile_user

        if not model:
            raise InputError("--for-gpu needs --model", field="--for-gpu")
        if concurrent > 1 and for_gpu:
            raise InputError(
                "--concurrent measures CPU contention; --for-gpu runs nothing", field="--concurrent"
            )
        if microbatch_size and len(microbatch_size) > 1:
            raise InputError(
                "give one -b with --model (several sizes are for GPT/BERT)",
                field="--microbatch-size",
            )
        trace = profile_user(
            out_path=out_path,
            model=model,
            layers=layers,
            loss=loss,
            for_gpu=for_gpu,
            name=name,
            microbatch_size=microbatch_size[0] if microbatch_size else None,
            device=device,
            dtype=dtype,
            threads=threads,
            reps=reps,
            split_backward=split_backward,
            seq_len=seq_len,
            concurrent=concurrent,
        )
        for warning in trace.provenance.get("warnings", []):
            err.print(f"[yellow]warning:[/] {warning}", highlight=False)
        total = sum(x.fwd_s + x.bwd_s for x in trace.layers)
        out.print(
            f"wrote {out_path}.csv/.yaml: {len(trace.layers)} layers, "
            f"{trace.parameters:,} params, fwd+bwd {total * 1e3:.3f} ms per micro-batch "
            f"of {trace.microbatch_size} on {trace.device}"
        )
        return
    if layers is not None and not (layers.isdigit() and 1 <= int(layers) <= 1024):
        raise InputError(
            f"--layers {layers!r}: the GPT/BERT model takes a number of blocks "
            "(1..1024); module names need --model",
            field="--layers",
        )
    microbatch_size = microbatch_size or [4]
    dtype = dtype or "fp32"
    from backends.torch.profile_concurrent import profile_concurrent

    spec = dict(
        name=name or out_path.name,
        kind=kind,
        layers=int(layers or 4),
        hidden=hidden,
        heads=heads,
        seq_len=seq_len,
        vocab=vocab,
    )
    try:
        if any(b < 1 for b in microbatch_size):
            raise InputError(f"must be >= 1, got {microbatch_size}", field="--microbatch-size")
        trace = profile_concurrent(
            spec,
            copies=concurrent,
            microbatch_sizes=microbatch_size,
            device=device,
            dtype=dtype,
            reps=reps,
            split_backward=split_backward,
            threads=threads or max(1, (os.cpu_count() or 2) // 2),
            attention=attention,
            path=out_path,
        )
    except ValueError as exc:
        raise InputError(str(exc), field="model options") from None
    total = sum(x.fwd_s + x.bwd_s for x in trace.layers)
    out.print(
        f"wrote {out_path}.csv/.yaml: {len(trace.layers)} layers, {trace.parameters:,} "
        f"params, fwd+bwd {total * 1e3:.2f} ms per micro-batch of "
        f"{trace.microbatch_size} on {trace.device}"
        + (f"; also measured b={sorted(trace.profiles)}" if trace.profiles else "")
    )


@app.command()
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
    from sim.atomic import check_writable

    _check_device_name(device)
    check_writable(out_path, option="--out")  # fail now, not after the measurement
    _need_torch()
    from backends.torch.calibrate import calibrate as run_calibration
    from backends.torch.profile import check_device

    check_device(device, nproc=nproc)
    cal = run_calibration(nproc=nproc, device=device, path=out_path)
    gpu = cal.hardware.get("gpu", {})
    out.print(f"wrote {out_path}: {nproc} x {gpu.get('model', device)}")
    for link in cal.hardware.get("links", [])[:4]:
        out.print(f"  {link}")


@app.command()
@friendly
def validate(
    config: Path = typer.Argument(
        ...,
        help="A winner.yaml (or any single-configuration "
        "experiment) whose trace was made by `sim profile`.",
    ),
    nproc: int = typer.Option(
        None,
        min=1,
        max=MAX_GPUS,
        help="Ranks; must equal the pipeline depth x tensor_parallel.",
        show_default="the pipeline depth x tensor_parallel",
    ),
    device: str = typer.Option("cpu", help="cpu (gloo) or cuda (NCCL)."),
    schedule: list[str] = typer.Option(
        None,
        "--schedule",
        "-s",
        help="Replay these schedules instead (repeatable).",
        show_default="CONFIG's",
    ),
    microbatches: list[int] = typer.Option(
        None,
        "--microbatches",
        "-m",
        min=1,
        max=MAX_MICROBATCHES,
        help="Replay these micro-batch counts instead (repeatable).",
        show_default="CONFIG's",
    ),
    iterations: int = typer.Option(
        3, min=1, max=MAX_ITERATIONS, help="Measured iterations (optimizer steps)."
    ),
    warmup: int = typer.Option(1, min=0, max=MAX_ITERATIONS, help="Warm-up iterations."),
    torch_builtin: bool = typer.Option(
        False,
        "--torch-builtin",
        help="Also run torch's ScheduleGPipe / Schedule1F1B on the same model.",
    ),
    out_dir: Path = typer.Option(
        None,
        "--out",
        help="Folder for validation.csv and the timelines.",
        show_default="beside CONFIG",
    ),
    single_rank: int = typer.Option(
        None,
        "--single-rank",
        help="Run only this pipeline rank's actions, alone in one process on one device "
        "(sends and receives become local buffers); compare with that GPU's predicted busy "
        "time and peak memory.",
    ),
    stages: int = typer.Option(
        None,
        "--stages",
        help="With --single-rank: the pipeline depth P the rank belongs to (uniform "
        "partition; the layers must split evenly).",
        show_default="CONFIG's",
    ),
) -> None:
    """Replay a configuration on real devices with torch and compare with the prediction.

    Prints measured and predicted iteration time (seconds) and peak memory (bytes) per
    configuration with the relative error (predicted - measured) / measured, and writes them
    to validation.csv. With --single-rank R, one rank runs alone (see sim/validate_single.py).
    """
    from sim.atomic import check_writable
    from sim.point_stages import check_schedule_name

    _check_device_name(device)
    for i, name in enumerate(schedule or ()):
        check_schedule_name(name, file="command line", field=f"--schedule ({i + 1}.)")
    if out_dir:
        check_writable(out_dir, option="--out", directory=True)
    if single_rank is not None or stages is not None:
        from sim.validate_cli import validate_single_rank

        return validate_single_rank(
            config, single_rank, stages, nproc, device, schedule, microbatches, iterations,
            warmup, torch_builtin, out_dir,
        )  # fmt: skip
    _need_torch()
    from rich.table import Table

    from backends.torch.launch import ReplayError
    from backends.torch.profile import check_device
    from sim.validate import ValidationSpec, run_validation

    check_device(device)

    spec = ValidationSpec(
        schedules=tuple(schedule or ()),
        microbatches=tuple(microbatches or ()),
        device=device,
        nproc=nproc,
        iterations=iterations,
        warmup_iterations=warmup,
        torch_builtin=torch_builtin,
    )
    table = Table(title="measured vs predicted")
    for col in (
        "schedule",
        "runtime",
        "m",
        "measured ms",
        "predicted ms",
        "error",
        "peak MiB (meas/pred)",
        "actions ok",
    ):
        table.add_column(col, justify="right")

    def row(r: dict) -> None:
        out.print(
            f"  {r['schedule']} ({r['runtime']}) m={r['microbatches']}: measured "
            f"{r['measured_iteration_s'] * 1e3:.1f} ms, predicted "
            f"{r['predicted_iteration_s'] * 1e3:.1f} ms ({r['error']:+.1%})",
            highlight=False,
        )
        table.add_row(
            r["schedule"],
            r["runtime"],
            str(r["microbatches"]),
            f"{r['measured_iteration_s'] * 1e3:.1f}",
            f"{r['predicted_iteration_s'] * 1e3:.1f}",
            f"{r['error']:+.1%}",
            f"{r['measured_peak_bytes'] / 2**20:.1f} / {r['predicted_peak_bytes'] / 2**20:.1f}",
            "yes" if r["all_actions_done"] and r["losses_finite"] else "NO",
        )

    try:
        df, dest = run_validation(config, spec, out_dir, on_row=row)
    except ReplayError as exc:
        err.print(f"[bold red]replay failed:[/] {exc}", highlight=False)
        raise typer.Exit(1) from None
    out.print(table)
    mape = (df["error"].abs().mean()) * 100
    out.print(f"mean absolute percentage error: {mape:.1f}%  -> {dest}")
    if not (df["all_actions_done"].all() and df["losses_finite"].all()):
        err.print("[bold red]a rank did not run all its actions or a loss was not finite[/]")
        raise typer.Exit(1)


def main() -> None:  # pragma: no cover - console entry
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
