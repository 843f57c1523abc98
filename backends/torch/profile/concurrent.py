"""Profile under the replay's process layout: ``copies`` processes profile at the same time.

On a CPU the ranks of a replay share the machine's cores, caches and memory bandwidth, so a
layer runs slower while the other rank computes than in an idle machine (measured here: about
10 % with 2 ranks on 2 cores). Profiling ``copies`` identical processes simultaneously, started
together at a barrier, and keeping each layer's median over the copies, puts that contention
into the trace, as :mod:`backends.torch.calibrate.hardware` does for links. On GPUs each rank has
its own device, so one copy is enough.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

from sim.procs import die_with_parent
from sim.trace.native import write_trace
from sim.trace.schema import Trace


def _child(barrier: Any, queue: Any, index: int, spec: dict, kwargs: dict, parent_pid: int) -> None:
    die_with_parent(parent_pid)
    from backends.torch.profile.layers import profile_model  # torch after die_with_parent

    try:
        barrier.wait(timeout=120)
        queue.put((index, profile_model(spec, **kwargs), None))
    except Exception as exc:  # reported by the parent with the copy's index
        queue.put((index, None, f"{type(exc).__name__}: {exc}"))


def profile_concurrent(
    spec: Any,
    *,
    copies: int,
    path: str | Path | None = None,
    timeout_s: float = 900.0,
    microbatch_sizes: list[int] | None = None,
    **kwargs: Any,
) -> Trace:
    """Like :func:`backends.torch.profile.layers.profile_model`, in ``copies`` simultaneous
    processes.

    Args:
        spec: the model (``ModelSpec`` or a dict of its fields).
        copies: processes profiling at once (the replay's ranks); 1 profiles in this process.
        path: write the combined trace there (``x`` -> ``x.csv`` + ``x.yaml``).
        timeout_s: limit for all copies together, in seconds (per micro-batch size).
        microbatch_sizes: profile each of these sizes and merge them into one trace
            (:func:`backends.torch.profile.layers.merge_sizes`); overrides ``microbatch_size``.
        **kwargs: passed to ``profile_model`` (``microbatch_size``, ``threads``, ``reps`` ...).

    Returns:
        The trace of copy 0 with every layer's ``fwd_s``, ``bwd_s`` (and split backward) the
        median over the copies; provenance records ``concurrent_copies``.

    Raises:
        RuntimeError: a copy failed or the copies did not finish within ``timeout_s``.
    """
    # torch on first use: `sim profile` imports this module before it knows it profiles
    from backends.torch.models.transformer import as_spec
    from backends.torch.profile.layers import profile_model

    spec = as_spec(spec)
    if microbatch_sizes:
        from backends.torch.profile.layers import merge_sizes  # torch, as above

        kwargs.pop("microbatch_size", None)
        trace = merge_sizes(
            [
                profile_concurrent(
                    spec, copies=copies, timeout_s=timeout_s, microbatch_size=b, **kwargs
                )
                for b in sorted(set(microbatch_sizes))
            ]
        )
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            write_trace(trace, path)
        return trace
    if copies <= 1:
        return profile_model(spec, path=path, **kwargs)
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(copies), ctx.Queue()
    procs = [
        ctx.Process(target=_child, args=(barrier, queue, i, spec.to_dict(), kwargs, os.getpid()))
        for i in range(copies)
    ]
    for p in procs:
        p.start()
    try:
        results = [queue.get(timeout=timeout_s) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
    failed = [f"copy {i}: {err}" for i, _, err in results if err]
    if failed:
        raise RuntimeError("concurrent profiling failed: " + "; ".join(failed))
    traces = [t for _, t, _ in sorted(results, key=lambda r: r[0])]
    trace = median_over_copies(traces)
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        write_trace(trace, path)
    return trace


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return None if values[0] is None else statistics.median(present)


def median_over_copies(traces: list[Trace]) -> Trace:
    """One trace from the copies' traces of the same model: copy 0's, with every layer's
    ``fwd_s``, ``bwd_s`` (and split backward) the median over the copies; the provenance
    records ``concurrent_copies`` and a note."""
    layers = []
    for parts in zip(*(t.layers for t in traces), strict=True):
        layers.append(
            replace(
                parts[0],
                fwd_s=statistics.median(p.fwd_s for p in parts),
                bwd_s=statistics.median(p.bwd_s for p in parts),
                bwd_input_s=_median([p.bwd_input_s for p in parts]),
                bwd_weight_s=_median([p.bwd_weight_s for p in parts]),
            )
        )
    prov = dict(traces[0].provenance)
    prov["concurrent_copies"] = len(traces)
    prov["notes"] = (
        prov.get("notes", "") + f"; profiled by {len(traces)} simultaneous "
        "processes (the replay's layout), per-layer median over the copies"
    )
    return replace(traces[0], layers=tuple(layers), provenance=prov)
