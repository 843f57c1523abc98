"""``sim profile --model ... --concurrent N``: profile a user's model in N simultaneous processes.

The replay's CPU ranks share the machine's cores and memory bandwidth, so a layer runs slower
beside another rank than alone; :mod:`backends.torch.profile.concurrent` explains the method
(copies start together at a barrier; per-layer median over the copies) and combines the copies'
traces (its ``median_over_copies``). This module starts the copies for
:func:`backends.torch.profile.user.profile_user_model`.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from pathlib import Path
from queue import Empty
from typing import Any

from backends.torch.profile.concurrent import median_over_copies
from sim.errors import InputError
from sim.procs import die_with_parent
from sim.trace.native import write_trace
from sim.trace.schema import Trace


def _child(barrier: Any, queue: Any, index: int, kwargs: dict, parent: int) -> None:
    die_with_parent(parent)  # kill -9 of `sim profile` takes the copies with it
    from backends.torch.profile.user import profile_user_model  # torch after die_with_parent

    try:
        barrier.wait(timeout=120)
        queue.put((index, profile_user_model(**kwargs), None))
    except (Exception, SystemExit) as exc:  # reported by the parent with the copy's index
        queue.put((index, None, f"{type(exc).__name__}: {exc}"))


def profile_user_concurrent(
    *, copies: int, path: str | Path | None = None, timeout_s: float = 900.0, **kwargs: Any
) -> Trace:
    """:func:`~backends.torch.profile.user.profile_user_model` in ``copies`` processes at once.

    The model is checked in this process first, so bad input fails with its clear message.

    Returns:
        Copy 0's trace with every layer's times the median over the copies; provenance
        records ``concurrent_copies``.

    Raises:
        sim.errors.InputError: bad model, layers, loss or sample; a copy failed; the copies
            did not finish within ``timeout_s`` (``--timeout``; every copy is killed).
    """
    from backends.torch.profile.user import prepare, profile_user_model  # torch on first use

    if copies <= 1:
        return profile_user_model(path=path, **kwargs)
    prepare(
        kwargs["source"],
        layers=kwargs.get("layers"),
        loss=kwargs.get("loss"),
        microbatch_size=kwargs.get("microbatch_size"),
        dtype=kwargs.get("dtype", "fp32"),
        kwargs=kwargs.get("kwargs"),
    )
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(copies), ctx.Queue()
    me = os.getpid()
    procs = [
        ctx.Process(target=_child, args=(barrier, queue, i, kwargs, me)) for i in range(copies)
    ]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout_s
    try:
        results = [queue.get(timeout=max(0.0, deadline - time.monotonic())) for _ in procs]
    except Empty:
        raise InputError(
            f"the {copies} copies did not finish within {timeout_s:g} s (user code that never "
            "returns? every copy was stopped); raise --timeout for a model that needs longer",
            field="--timeout",
        ) from None
    finally:
        for p in procs:
            p.join(timeout=1)
            if p.is_alive():
                p.kill()
                p.join()
    failed = [f"copy {i}: {err}" for i, _, err in results if err]
    if failed:
        raise InputError("concurrent profiling failed: " + "; ".join(failed), field="--model")
    trace = median_over_copies([t for _, t, _ in sorted(results, key=lambda r: r[0])])
    if path is not None:
        write_trace(trace, path)
    return trace
