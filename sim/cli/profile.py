"""``sim profile --out PATH``: the typer adapter over the torch backend's profilers.

The GPT/BERT models go to :func:`backends.torch.profile.concurrent.profile_concurrent`, a
user's model (``--model``) to :func:`backends.torch.profile.user_cli.profile_user`. Every option is
checked here, before torch starts; a bad one exits 2 naming it.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape

from backends.torch.calibrate.tp_overhead import with_tp_overhead
from backends.torch.devices import check_device, check_device_name
from backends.torch.parallel.tensor_split import tp_problem
from backends.torch.profile.concurrent import profile_concurrent
from backends.torch.profile.user_cli import profile_user
from backends.torch.replay.launch import ReplayError
from sim.atomic import check_writable
from sim.cli.console import check_choice, err, friendly, need_torch, out
from sim.cli.trace import estimate_text
from sim.config import NAME_PATTERN
from sim.errors import InputError
from sim.progress import progress
from sim.trace.native import trace_stem, write_trace
from sim.trace.schema import Trace

log = logging.getLogger(__name__)

DTYPES = ("fp32", "fp16", "bf16")


def check_tp_options(spec: dict, t: int, device: str) -> None:
    """Refuse ``--tensor-parallel t`` where the replay could not split the model.

    Raises:
        InputError: not a CPU device, or :func:`backends.torch.parallel.tensor_split.tp_problem`
            (not a GPT, or ``t`` does not divide the heads, the FFN width or the vocabulary).
    """
    if device != "cpu":
        raise InputError(f"--tensor-parallel measures gloo ranks on cpu, not {device}",
                         field="--tensor-parallel")  # fmt: skip
    problem = tp_problem(spec, t, sequence_parallel=False)
    if problem:
        raise InputError(problem, field="--tensor-parallel")


def check_options(
    out_path: Path,
    *,
    kind: str,
    name: str | None,
    dtype: str | None,
    device: str,
    hidden: int,
    heads: int,
    attention: str | None,
    user_model: bool,
) -> None:
    """The options every profile shares (none needs torch).

    Raises:
        InputError: naming the option: an unknown kind, dtype, attention kernel or device;
            ``--attention`` with ``--model``; heads not dividing hidden; a bad trace name; an
            output that cannot be written.
    """
    check_choice(kind, ("gpt", "bert"), "--kind")
    if dtype is not None:
        check_choice(dtype, DTYPES, "--dtype")
    if attention is not None:
        check_choice(attention, ("flash", "math"), "--attention")
        if user_model:
            raise InputError("applies to the GPT/BERT models, not --model", field="--attention")
    check_device_name(device)
    if hidden % heads:
        raise InputError(f"hidden size {hidden} is not divisible by {heads} heads", field="--heads")
    if not re.match(NAME_PATTERN, name or out_path.name):
        raise InputError(
            f"{name or out_path.name!r} is not a valid trace name: use letters, "
            "digits and . _ + - only",
            field="--name" if name else "--out",
        )
    for suffix in (".csv", ".yaml"):  # fail now, not after the measurement
        check_writable(out_path.with_name(out_path.name + suffix), option="--out")


MAX_SEQ_LEN = 2**20
"""Longest sample profiled (tokens): an assumption far above today's context lengths, so a typo
(``--seq-len 100000000``) is refused before a model of that length is built."""


def check_model_choice(
    model: str | None, for_gpu: str | None, loss: str | None, seq_len: int
) -> None:
    """Options that only a user's model takes, and the sample's length.

    Raises:
        InputError: ``--loss`` without ``--model``; ``--seq-len`` above :data:`MAX_SEQ_LEN`.
    """
    if loss and not model:
        raise InputError(
            "the loss of your own model: give --model too (the GPT/BERT models use their "
            "token cross-entropy)",
            field="--loss",
        )
    if seq_len > MAX_SEQ_LEN:
        raise InputError(f"{seq_len} tokens: at most {MAX_SEQ_LEN:,}", field="--seq-len")


def check_user_options(model: str | None, for_gpu: str | None, concurrent: int) -> None:
    """The options of ``--model`` / ``--for-gpu``.

    Raises:
        InputError: ``--for-gpu`` without ``--model``, or with ``--concurrent``.
    """
    if not model:
        raise InputError("--for-gpu needs --model", field="--for-gpu")
    if concurrent > 1 and for_gpu:
        raise InputError(
            "--concurrent measures CPU contention; --for-gpu runs nothing", field="--concurrent"
        )


def model_layers(layers: str | None) -> int:
    """The GPT/BERT model's blocks from ``--layers`` (default 4).

    Raises:
        InputError: not a number of blocks in 1..1024.
    """
    if layers is not None and not (layers.isdigit() and 1 <= int(layers) <= 1024):
        raise InputError(
            f"--layers {layers!r}: the GPT/BERT model takes a number of blocks "
            "(1..1024); module names need --model",
            field="--layers",
        )
    return int(layers or 4)


def _summary(trace: Trace, out_path: Path, digits: int) -> str:
    """One line on what was written; an analysed (``--for-gpu``) trace says its times are an
    estimate, and from what (:func:`sim.cli.trace.estimate_text`)."""
    total = sum(x.fwd_s + x.bwd_s for x in trace.layers)
    estimate = estimate_text(trace)
    timing = f"fwd+bwd {total * 1e3:.{digits}f} ms per micro-batch of {trace.microbatch_size} "
    timing += f"on {trace.device}"
    if estimate:
        timing = f"{estimate}: {timing}"
    return (
        f"wrote {out_path}.csv/.yaml: {len(trace.layers)} layers, {trace.parameters:,} "
        f"params; {timing}"
    )


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
        help="Samples per micro-batch; repeat (-b 1 -b 2 -b 4) to profile several sizes "
        "into one trace. With --model: passed as microbatch_size= to a function that takes "
        "it, else the function's sample is repeated and cut to the size.",
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
    timeout: float = typer.Option(
        600.0,
        "--timeout",
        min=1.0,
        help="With --model: seconds your code (building, running and profiling the model) may "
        "take before it is stopped and reported.",
    ),
    tensor_parallel: int = typer.Option(
        None,
        "--tensor-parallel",
        min=2,
        help="GPT on CPU: also measure what a block split over this many gloo ranks costs "
        "beyond its share of the compute and its collectives, in the replay's layout (ranks x "
        "cores/ranks threads), at every -b, with and without sequence parallelism; recorded "
        "as provenance.tensor_parallel_overhead and charged by tensor-parallel simulations.",
        show_default="not measured",
    ),
    attention: str = typer.Option(
        None,
        help="GPT/BERT: force the attention kernel, flash or math (torch SDPA); recorded "
        "in the trace, and a replay of it runs the same kernel.",
        show_default="torch's choice",
    ),
) -> None:
    """Measure a real torch model layer by layer into a trace (seconds and bytes per layer)."""
    # Long: two branches (user model; GPT/BERT per -b) share the checks and options.
    out_path = trace_stem(out_path)  # --out x.csv: the files x.csv and x.yaml
    user = bool(model or for_gpu)
    if tensor_parallel and user:
        raise InputError("--tensor-parallel measures the GPT/BERT models of --layers/--hidden, "
                         "not --model or --for-gpu", field="--tensor-parallel")  # fmt: skip
    check_model_choice(model, for_gpu, loss, seq_len)
    check_options(out_path, kind=kind, name=name, dtype=dtype, device=device, hidden=hidden,
                  heads=heads, attention=attention, user_model=user)  # fmt: skip
    need_torch(
        f"`sim trace from-config {model} --seq-len {seq_len} --out {out_path}` times a "
        "config.json's layers with the kernel model"
        if model and model.endswith(".json")
        else ""
    )
    if not for_gpu:
        check_device(device)
    if user:
        check_user_options(model, for_gpu, concurrent)
        log.info("%s %s ...", "analysing" if for_gpu else "profiling", model)
        trace = profile_user(out_path=out_path, model=model, layers=layers, loss=loss,
                             for_gpu=for_gpu, name=name, microbatch_size=microbatch_size,
                             device=device, dtype=dtype, threads=threads, reps=reps,
                             split_backward=split_backward, seq_len=seq_len,
                             concurrent=concurrent, timeout_s=timeout)  # fmt: skip
        for warning in trace.provenance.get("warnings", []):
            err.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False)
        out.print(escape(_summary(trace, out_path, 3)), highlight=False)
        return
    spec = dict(name=name or out_path.name, kind=kind, layers=model_layers(layers),
                hidden=hidden, heads=heads, seq_len=seq_len, vocab=vocab)  # fmt: skip
    if tensor_parallel:
        check_tp_options(spec, tensor_parallel, device)
    from backends.torch.profile.layers import merge_sizes  # imports torch: only when needed

    sizes = sorted(set(microbatch_size or [4]))
    kwargs: dict[str, Any] = dict(copies=concurrent, device=device, dtype=dtype or "fp32", reps=reps,
                  split_backward=split_backward,
                  threads=threads or max(1, (os.cpu_count() or 2) // 2), attention=attention)  # fmt: skip
    traces = []
    with progress(len(sizes), "profiling", "micro-batch sizes", console=err) as on_done:
        for b in sizes:
            log.info("profiling %s at b=%d: %d layers, %d repetitions each, %d copies at once",
                     spec["name"], b, int(spec["layers"]) + 2, reps, concurrent)  # type: ignore[call-overload]  # fmt: skip
            try:
                traces.append(profile_concurrent(spec, microbatch_size=b, **kwargs))
            except ValueError as exc:
                raise InputError(str(exc), field="model options") from None
            on_done(len(traces))
    trace = merge_sizes(traces)  # as profile_concurrent(microbatch_sizes=...) does
    out_path.parent.mkdir(parents=True, exist_ok=True)
    write_trace(trace, out_path)
    if tensor_parallel:
        try:
            trace = with_tp_overhead(trace, spec, tensor_parallel, reps=reps, path=out_path)
        except ReplayError as exc:
            first = str(exc).splitlines()[0]
            err.print(f"[bold red]error:[/] --tensor-parallel: {escape(first)} (the trace is "
                      "written without provenance.tensor_parallel_overhead)", highlight=False)  # fmt: skip
            raise typer.Exit(1) from None
    measured = f"; also measured b={sorted(trace.profiles)}" if trace.profiles else ""
    out.print(escape(_summary(trace, out_path, 2) + measured), highlight=False)
