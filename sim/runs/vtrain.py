"""vTrain's measured iterations (VIA-Research/vTrain ``data/ground_truth_*.csv``) as
:class:`~sim.runs.record.MeasuredRun`.

Columns (:data:`COLUMNS`): ``gpus, global_batch, microbatch_size, hidden, heads, layers,
seq_len, tensor_parallel, data_parallel, pipeline_parallel, iteration_time_ms``. What the rows
share is in vTrain's ``data/README.md`` and configs (``measurements/vtrain/README.md``): every
point collected with Megatron-DeepSpeed on one node of 8 A100s (40 or 80 GB not stated), a
GPT-style decoder (GeLU MLP of 4h, learned positions, tied embeddings), fp16 mixed precision,
1F1B (``pipeline_scheduling: 1f1b``), Megatron's unfused attention core (no flash attention in
the configs), every transformer layer checkpointed
(``use_checkpoint: true``), data-parallel gradients all-reduced after the backward without
buckets (``use_gradient_bucket: false``: the ``megatron-deepspeed`` profile). The vocabulary
is not stated: GPT-2's 50,257 tokens (an assumption, as Megatron's GPT examples use), padded
as Megatron-DeepSpeed pads it (:func:`padded_vocab`).

A row over :data:`NODE_SIZE` GPUs (vTrain's multi-node ground truth, ``data/ground_truth_multi.csv``:
64-512 A100s, held out of this repository) ran on vTrain's cluster, whose network its configs
give as 800 Gb/s per 8-GPU node: such a run carries the shipped hardware overlay
:data:`MULTI_NODE_OVERLAY` (``sim/hardware/overlays/vtrain-a100-cluster.yaml``), set over the
``Nx-dgx-a100-40gb`` the GPUs fill (:func:`sim.runs.express_hardware.hardware_for`).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from sim.errors import InputError
from sim.parallel.layout import ParallelLayout
from sim.runs.megatron_shape import VOCAB_DIVISIBLE_BY
from sim.runs.record import ArgNote, Measured, MeasuredRun, ModelShape

COLUMNS = (
    "gpus", "global_batch", "microbatch_size", "hidden", "heads", "layers", "seq_len",
    "tensor_parallel", "data_parallel", "pipeline_parallel", "iteration_time_ms",
)  # fmt: skip
"""The columns a vTrain-layout CSV must have."""
VOCAB = 50257
"""GPT-2's BPE vocabulary: vTrain's configs do not state one (assumption)."""
GPU = "A100"
"""vTrain's ``gpu_name: A100`` (memory size not stated)."""
NODE_SIZE = 8
"""GPUs per node: ``node_size: 8`` in every vTrain config (VIA-Research/vTrain@f8dda84
``config/validation/single/*.json`` and ``config/validation/multi/*.json``)."""
MULTI_NODE_OVERLAY = "vtrain-a100-cluster"
"""The shipped overlay of vTrain's multi-node cluster (:mod:`sim.hardware.overlay`): its configs'
``inter_node_bandwidth: 800`` Gb/s per node (``src/config.py``), 12.5 GB/s per GPU."""


def row_overlay(gpus: int) -> str:
    """The shipped hardware overlay of a vTrain row of ``gpus`` GPUs: :data:`MULTI_NODE_OVERLAY`
    when it spans nodes (more than :data:`NODE_SIZE` GPUs), else "" (one node: no network).

    Example:
        >>> row_overlay(8), row_overlay(64)
        ('', 'vtrain-a100-cluster')
    """
    return MULTI_NODE_OVERLAY if gpus > NODE_SIZE else ""


def padded_vocab(vocab: int, tensor_parallel: int) -> int:
    """``vocab`` rounded up to a multiple of ``128 x tensor_parallel``: Megatron-DeepSpeed's
    ``_vocab_size_with_padding`` (microsoft/Megatron-DeepSpeed@f4157bea
    ``megatron/tokenizer/tokenizer.py`` l.58-71, called for every tokenizer at l.52-53),
    ``--make-vocab-size-divisible-by`` 128 by default (``megatron/arguments.py`` l.644);
    ``GPTModelPipe`` builds its tied word embedding with ``args.padded_vocab_size``
    (``megatron/model/gpt_model.py`` l.355, 365), ``padded / t`` rows per rank.

    Example:
        >>> [padded_vocab(50257, t) for t in (1, 2, 4, 8)]
        [50304, 50432, 50688, 51200]
    """
    multiple = VOCAB_DIVISIBLE_BY * tensor_parallel
    return -(-vocab // multiple) * multiple


def read_vtrain(path: str | Path) -> list[MeasuredRun]:
    """Every row of a vTrain-layout CSV (module doc).

    Raises:
        InputError: unreadable, a column missing, a value not a positive number, or a row
            whose ``gpus != t p w`` or whose global batch is not a multiple of ``b w``
            (naming the file, the row and the column).
    """
    try:
        df = pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read it as CSV ({exc})", file=str(path)) from None
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise InputError(f"missing column(s) {', '.join(missing)}; the file needs "
                         f"{', '.join(COLUMNS)}", file=str(path), field=missing[0])  # fmt: skip
    num = df[list(COLUMNS)].apply(pd.to_numeric, errors="coerce")
    bad = num.isna() | (num <= 0)
    if bad.any().any():
        row = int(bad.any(axis=1).idxmax())
        col = str(bad.loc[row].idxmax())
        given = df.at[row, col]
        shown = (
            "empty"
            if pd.isna(given) or str(given).strip() == ""
            else (repr(given) if isinstance(given, str) else str(given))
        )
        unit = " of milliseconds" if col == "iteration_time_ms" else ""
        raise InputError(f"row {row + 2}: {shown} is not a positive number{unit} (every "
                         "column of the layout is one)", file=str(path), field=col)  # fmt: skip
    out = []
    for i, r in num.iterrows():
        out.append(run_of_row(r, int(str(i)) + 2, str(path)))
    return out


def run_of_row(r: pd.Series, line: int, file: str) -> MeasuredRun:
    """The run of one vTrain-layout row ``r`` (:data:`COLUMNS`, numbers), read from line
    ``line`` of ``file`` (named in its source and errors).

    Raises:
        InputError: ``gpus != t p w`` or a global batch not a multiple of ``b w``.
    """
    t, p, w = int(r.tensor_parallel), int(r.pipeline_parallel), int(r.data_parallel)
    b, g = int(r.microbatch_size), int(r.global_batch)
    source = f"{file} row {line}"
    if t * p * w != int(r.gpus) or g % (b * w):
        raise InputError(
            f"row {line}: gpus must be tensor_parallel x pipeline_parallel x data_parallel and "
            "global_batch a multiple of microbatch_size x data_parallel",
            file=file, field="gpus",
        )  # fmt: skip
    h, a, layers, s = int(r.hidden), int(r.heads), int(r.layers), int(r.seq_len)
    shape = ModelShape(arch="gpt", layers=layers, hidden=h, heads=a, ffn_hidden=4 * h,
                       vocab=padded_vocab(VOCAB, t), tied_embeddings=True,
                       source="vTrain GPT")  # fmt: skip
    note = ArgNote(
        "use_gradient_bucket",
        "false",
        "mapped",
        "gradients all-reduced after the backward (megatron-deepspeed profile)",
    )
    return MeasuredRun(
        name=f"gpt-h{h}-L{layers}-t{t}p{p}w{w}b{b}B{g}", source=source,
        framework="megatron-deepspeed", gpu=GPU, num_gpus=int(r.gpus),
        layout=ParallelLayout(pp=p, dp_replicate=w, tp=t), microbatch_size=b, global_batch=g,
        seq_len=s, precision="fp16", recompute="full", schedule="1f1b", attention="math",
        shape=shape,
        measured=Measured(iteration_time_s=float(r.iteration_time_ms) / 1e3,
                          time_rule="vTrain's measured iteration_time_ms"),
        args=(note,),
        notes=(f"vocabulary {VOCAB} assumed (GPT-2 BPE), padded to {padded_vocab(VOCAB, t)}",),
        hardware_overlay=row_overlay(int(r.gpus)),
    )  # fmt: skip
