"""Run :mod:`backends.torch.calibrate.tp_layers` on ``t`` gloo ranks and record it in a trace.

Torch-free (the ranks import torch), so ``sim profile`` can offer ``--tensor-parallel`` without
loading torch in the CLI (tests/test_no_torch.py).
"""

from __future__ import annotations

from dataclasses import asdict, is_dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from backends.torch.replay.launch import default_threads, run_ranks
from sim.trace.native import write_trace
from sim.trace.schema import Trace

SPEC_FIELDS = ("name", "kind", "layers", "hidden", "heads", "seq_len", "vocab", "ffn_mult")


def measure(
    spec: Any,
    t: int,
    microbatch_sizes: list[int],
    *,
    threads: int,
    reps: int = 9,
    timeout_s: float = 600.0,
) -> list[dict[str, Any]]:
    """A GPT's tensor-parallel layer overheads on ``t`` gloo ranks of ``threads`` threads.

    Args:
        spec: the model (a GPT shape; only one block is built).
        t: tensor-parallel ranks (processes).
        microbatch_sizes: samples per micro-batch to measure.
        threads: CPU threads per rank (the replay's: cores / ranks).
        reps: measured forward-backward iterations (median kept).
        timeout_s: limit on the whole multi-process run.

    Returns:
        One entry per ``(sequence_parallel, microbatch_size)`` (sequence parallelism only where
        ``t`` divides ``seq_len``): ``tensor_parallel``, ``sequence_parallel``,
        ``microbatch_size`` and, for ``embedding``, ``block`` and ``head``, ``<kind>_fwd_s``,
        ``<kind>_bwd_s`` (the overheads, module doc) and ``<kind>_raw_s`` (the medians
        ``sharded``, ``local`` as ``[forward, backward]`` and ``comm`` per phase); the rank
        whose sharded block was slowest (a collective ends on all ranks together).

    Raises:
        backends.torch.replay.launch.ReplayError: a rank failed or the run timed out.
    """
    fields = asdict(spec) if is_dataclass(spec) else dict(spec)  # type: ignore[arg-type]
    fields = {k: v for k, v in fields.items() if k in SPEC_FIELDS}
    sps = [False, True] if int(fields["seq_len"]) % t == 0 else [False]
    payload = {
        "spec": fields,
        "microbatch_sizes": list(microbatch_sizes),
        "sequence_parallel": sps,
        "reps": reps,
    }
    ranks = run_ranks(
        "backends.torch.calibrate.tp_layers:run_rank",
        payload,
        nproc=t,
        threads=threads,
        timeout_s=timeout_s,
    )
    return [
        max(row, key=lambda e: sum(e["block_raw_s"]["sharded"])) for row in zip(*ranks, strict=True)
    ]


def with_tp_overhead(trace: Trace, spec: Any, t: int, *, reps: int,
                     path: str | Path | None = None, timeout_s: float = 600.0) -> Trace:  # fmt: skip
    """``trace`` with :func:`measure`'s entries for every micro-batch size it holds as
    ``provenance.tensor_parallel_overhead`` (replacing earlier entries at ``t``), on ``t`` ranks
    of :func:`backends.torch.replay.launch.default_threads` threads each (what
    ``sim validate --nproc t`` runs); written to ``path`` (:func:`sim.trace.native.write_trace`)
    when given.

    Raises:
        backends.torch.replay.launch.ReplayError: a rank failed or the run timed out.
    """
    threads = default_threads(t)
    entries = measure(
        spec, t, trace.measured_sizes, threads=threads, reps=reps, timeout_s=timeout_s
    )
    source = (
        "backends.torch.calibrate.tp_overhead.measure (ranks: backends.torch.calibrate.tp_layers.run_rank) on "
        f"{datetime.now(UTC).isoformat(timespec='seconds')}: "
        f"{t} gloo ranks x {threads} thread(s), median of {reps}"
    )
    old = [
        e
        for e in trace.provenance.get("tensor_parallel_overhead", [])
        if e.get("tensor_parallel") != t
    ]
    prov = {
        **trace.provenance,
        "tensor_parallel_overhead": old + [{**e, "source": source} for e in entries],
    }
    out = replace(trace, provenance=prov)
    if path is not None:
        write_trace(out, path)
    return out
