"""``sim trace list|show|import-kineto|from-config``: per-layer traces (:mod:`sim.trace`)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from sim.atomic import check_writable
from sim.cli.console import check_choice, err, friendly, out
from sim.cli.gpu_names import gpu_hardware
from sim.errors import InputError
from sim.hardware.loader import load_hardware
from sim.trace.from_config import DTYPES, beyond_positions, config_trace
from sim.trace.kineto import read_kineto
from sim.trace.loader import available_traces, load_trace
from sim.trace.native import read_trace, trace_stem, write_trace
from sim.trace.origin import ANALYTIC, HAND, MEASURED, gpu_figure_sources, trace_origin
from sim.trace.schema import Trace
from sim.units import fmt_bytes

app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Per-layer traces (profiles) of models: list, show, import a Kineto trace, make one "
    "from a Hugging Face config.json (no torch).",
)


@app.command("list", short_help="The traces shipped in traces/ and their sources.")
def trace_list() -> None:
    """List the traces shipped in traces/: layers, parameters, the micro-batch size and dtype
    their seconds and bytes are for, the GPU, and where their times come from (measured,
    analytic, roofline estimate, hand-written or unknown: sim.trace.origin)."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for col in ("trace", "layers", "parameters", "b", "dtype", "times", "device"):
        right = col in ("layers", "parameters", "b")
        table.add_column(col, justify="right" if right else "left", overflow="fold")
    for name in available_traces():
        try:
            t = load_trace(name)
        except InputError as exc:
            table.add_row(escape(name), "", "", "", "", "unreadable", escape(str(exc)))
            continue
        cells = (len(t.layers), f"{t.parameters:,}", t.microbatch_size, t.dtype, trace_origin(t))
        table.add_row(escape(name), *(escape(str(c)) for c in cells), escape(t.device))
    out.print(table)
    out.print(
        "times: measured (its provenance names a profiler or measurement), analytic (the "
        "kernel model from the model's shapes: an estimate), roofline estimate, hand-written "
        "(provenance source: hand) or unknown (a provenance that names no measurement); "
        "details: sim trace show NAME",
        highlight=False,
    )


def layer_table(trace: Trace) -> Table:
    """A trace's layers: times in ms, sizes in KiB/MiB/GiB."""
    table = Table(
        title=escape(
            f"{trace.name}: {len(trace.layers)} layers, {trace.parameters:,} params, "
            f"micro-batch {trace.microbatch_size}, {trace.dtype}, {trace.device}"
        )
    )
    for col in ("#", "layer", "fwd ms", "bwd ms", "params", "act", "out"):
        table.add_column(col, justify="right" if col != "layer" else "left")
    for i, layer in enumerate(trace.layers):
        table.add_row(
            str(i),
            escape(layer.name[:40]),
            f"{layer.fwd_s * 1e3:.3f}",
            f"{layer.bwd_s * 1e3:.3f}",
            fmt_bytes(layer.param_bytes),
            fmt_bytes(layer.act_bytes),
            fmt_bytes(layer.out_bytes),
        )
    return table


def estimate_text(trace: Trace) -> str | None:
    """What an analysed (not measured) trace's times are, from what: ``None`` for a measured
    trace. A ``--for-gpu`` profile (``provenance.method``) is a roofline of each operator's
    counted FLOPs and bytes at a GPU preset's peak and HBM bandwidth (its ``provenance.gpu``,
    from the preset's datasheet figures); an analytic decoder trace (``provenance.source``
    ``analytic: ...``) is the kernel model of ``sim.compute`` on the preset's GPU.

    Example:
        >>> t = Trace("t", (), 1, "bf16", "H100", {"method": "FakeTensorMode analysis",
        ...     "gpu": {"model": "H100", "preset": "dgx-h100", "peak_flops": 989e12,
        ...     "hbm_bandwidth_Bps": 3.35e12}})
        >>> print(estimate_text(t))  # doctest: +NORMALIZE_WHITESPACE
        ESTIMATE, not measured: FakeTensorMode analysis; each operator's time is
        max(FLOPs / 989 TFLOP/s, bytes / 3.35 TB/s), the peak and HBM bandwidth of H100 in
        preset dgx-h100 (an upper bound on speed)
    """
    prov = trace.provenance
    source = str(prov.get("source", ""))
    if prov.get("method"):
        gpu = prov.get("gpu") or {}
        if not {"model", "peak_flops", "hbm_bandwidth_Bps"} <= set(gpu):
            return f"ESTIMATE, not measured: {prov['method']}"
        return (
            f"ESTIMATE, not measured: {prov['method']}; each operator's time is max(FLOPs / "
            f"{gpu['peak_flops'] / 1e12:.0f} TFLOP/s, bytes / "
            f"{gpu['hbm_bandwidth_Bps'] / 1e12:.2f} TB/s), the peak and HBM bandwidth of "
            f"{gpu['model']} in preset {gpu.get('preset', '?')} (an upper bound on speed)"
        )
    if source.startswith("analytic"):
        where = f" in preset {prov['preset']}" if prov.get("preset") else ""
        return (
            f"ESTIMATE, not measured: the kernel model of sim.compute on {trace.device}{where}, "
            f"from the model's shapes ({source.removeprefix('analytic: ')})"
        )
    return None


@app.command("show")
@friendly
def trace_show(ref: str = typer.Argument(..., metavar="TRACE", help="Trace name or path.")) -> None:
    """Print a trace's layers (ms, MiB) and provenance."""
    trace = load_trace(ref, file="command line", field="TRACE")
    out.print(layer_table(trace))
    estimate = estimate_text(trace)
    if estimate:
        out.print(escape(estimate), highlight=False)
    out.print(trace.provenance)
    sources = gpu_figure_sources(trace)
    if sources:
        table = Table(title="the kernel model's GPU figures (provenance.inputs.gpu): sources")
        for col in ("figure", "value", "source"):
            table.add_column(col)
        for row in sources:
            table.add_row(*(escape(cell) for cell in row))
        out.print(table)


@app.command("import-kineto", short_help="A Kineto (torch.profiler) trace as a trace.")
@friendly
def trace_import_kineto(
    source: Path = typer.Argument(
        ...,
        metavar="SOURCE",
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
    out_path = trace_stem(out_path)  # --out x.csv: the files x.csv and x.yaml
    if microbatch_size < 1:
        raise InputError(f"{microbatch_size}: must be >= 1", field="--microbatch-size")
    check_choice(dtype, ("fp32", "fp16", "bf16"), "--dtype")
    check_writable(out_path.with_name(out_path.name + ".csv"), option="--out")
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
        escape(
            f"wrote {out_path}.csv/.yaml: {len(trace.layers)} layers ({trace.provenance['timing']})"
        ),
        highlight=False,
    )
    if ref is None:
        err.print(
            "[yellow]warning:[/] parameter, activation and output bytes are 0 (a Kineto "
            "trace has none); give --bytes-from to fill them"
        )


def keep_measured(stem: Path) -> None:
    """``stem``.csv, about to be replaced by an analytic trace, must not be a measured or
    hand-written one (a profile that took a GPU and hours; `sim trace from-config -o
    traces/NAME` replaced it without a word). A trace that does not read is replaced.

    Raises:
        InputError: naming ``--out``, the trace's origin and source.
    """
    csv = stem.with_name(stem.name + ".csv")
    if not csv.is_file():
        return
    try:
        old = read_trace(csv)
    except (InputError, OSError, ValueError):
        return
    origin = trace_origin(old)
    if origin in (MEASURED, HAND):
        source = old.provenance.get("source", "")
        raise InputError(
            f"{csv} holds a {origin} trace{f' ({source})' if source else ''}, which this "
            f"{ANALYTIC} one would replace: choose another --out (or remove it first)",
            field="--out",
        )


@app.command("from-config", short_help="A trace of a Hugging Face config.json (no torch).")
@friendly
def trace_from_config(
    config: Path = typer.Argument(
        ...,
        metavar="CONFIG",
        help="A Hugging Face config.json of a decoder LM (Llama-like, Mixtral, Qwen-MoE, "
        "DeepSeek, GPT-OSS, Nemotron-H), read offline.",
    ),
    out_path: Path = typer.Option(..., "--out", "-o", help="Trace to write: PATH.csv + PATH.yaml."),
    seq_len: int = typer.Option(
        ..., "--seq-len", min=1, help="Tokens per sample s (the training length)."
    ),
    microbatch_size: int = typer.Option(
        1,
        "--microbatch-size",
        "-b",
        min=1,
        help="Samples per micro-batch (sim run regenerates the trace at every size it tries).",
    ),
    gpu: str = typer.Option(
        "dgx-h100",
        "--gpu",
        help="GPU that times the layers: a hardware preset (sim hardware list), its GPU "
        "model (H100-SXM5-80GB) or a GPU name (B200, 'A100 80GB'); sim run regenerates the "
        "trace on the experiment's GPU.",
    ),
    dtype: str = typer.Option("bf16", help=f"Parameters and activations: {', '.join(DTYPES)}."),
    layers: int = typer.Option(
        None, "--layers", min=1, help="Keep the first L layers [default: the config's]."
    ),
    name: str = typer.Option(None, help="Model name [default: the file name]."),
) -> None:
    """Make a trace of a Hugging Face config.json without torch or a GPU: every layer's
    forward and backward seconds from the kernel model on a preset GPU's datasheet figures,
    parameter and activation bytes from the tensor sizes (an estimate, not a measurement)."""
    out_path = trace_stem(out_path)  # --out x.csv: the files x.csv and x.yaml
    check_choice(dtype, DTYPES, "--dtype")
    check_writable(out_path.with_name(out_path.name + ".csv"), option="--out")
    keep_measured(out_path)
    hardware, read_as = gpu_hardware(gpu)
    spec = load_hardware(hardware, file="command line", field="--gpu").gpus[0].compute
    if spec is None:
        raise InputError(f"{gpu}: its GPU has no compute figures to time layers", field="--gpu")
    trace = config_trace(
        config,
        seq_len=seq_len,
        gpu=spec,
        microbatch_size=microbatch_size,
        dtype=dtype,
        layers=layers,
        name=name or out_path.name,
    )
    write_trace(trace, out_path)
    if read_as:
        err.print(f"note: {escape(read_as)}", highlight=False)
    beyond = beyond_positions(config, seq_len)
    if beyond:
        err.print(f"[yellow]warning:[/] {escape(beyond)}", highlight=False)
    out.print(
        escape(
            f"wrote {out_path}.csv/.yaml: {len(trace.layers)} layers, "
            f"{trace.parameters:,} parameters, micro-batch {microbatch_size}, {dtype}, "
            f"{trace.device} (analytic; use it as a model's trace: {out_path}.csv)"
        ),
        highlight=False,
    )
