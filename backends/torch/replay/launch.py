"""Launch N ranks, with hard timeouts, and collect rank 0's JSON: :func:`replay`, :func:`run_ranks`.

Each rank is ``python -m backends.torch.replay.worker WORKDIR RANK`` in its own session (process
group), so it and anything it starts can be killed as a whole; a CPU rank on Linux is forked
from a process that has imported torch already (:mod:`backends.torch.replay.start`). The
process group of the ranks is joined through a file store in ``WORKDIR`` (no rendezvous port to
race for; gloo's own connections listen on ports the kernel assigns, ``bind`` to port 0) with
``init_process_group(timeout=pg_timeout_s)``; the launcher itself enforces ``timeout_s`` on the
whole run. A rank that raises, or a run that outlives ``timeout_s``, ends with a
:class:`ReplayError` naming the rank and its error (or, for a hang, where each live rank is
waiting, from a ``faulthandler`` stack dump), and every rank is killed: no process is left.
If the launcher itself is killed (``kill -9``), each rank dies with it
(:func:`sim.procs.die_with_parent`; a forked rank with its forkserver, which ends with the
launcher), and the next launch removes its scratch folder
(:func:`remove_stale_workdirs`; the folder's name holds the launcher's pid).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from backends.torch.replay.job import ReplayJob, ReplayResult, collect_result
from backends.torch.replay.start import RankProcess, StartTimeout, start_rank
from sim.atomic import pid_alive
from sim.replay import ReplayFailed

_REPO_ROOT = Path(__file__).resolve().parents[3]
WORKDIR_PREFIX = "pipesim-run-"
"""Scratch folders are ``<tmp>/pipesim-run-<launcher pid>-<random>``."""
PARENT_ENV = "PIPESIM_PARENT_PID"

__all__ = ["ReplayError", "ReplayJob", "ReplayResult", "replay", "run_ranks"]


class ReplayError(ReplayFailed):
    """A multi-process run failed: a rank raised or crashed, or the run timed out
    (:class:`sim.replay.ReplayFailed`, which ``sim validate`` reports)."""


def default_threads(nproc: int) -> int:
    """CPU threads per rank: the machine's cores shared evenly, at least 1."""
    return max(1, (os.cpu_count() or 1) // nproc)


def _env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(_REPO_ROOT), env.get("PYTHONPATH", "")) if p
    )
    env["OMP_NUM_THREADS"] = str(threads)
    env[PARENT_ENV] = str(os.getpid())  # the worker dies with this process
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _kill(procs: list[RankProcess]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [p for p in procs if p.poll() is None]
        for p in alive:
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:  # a forked rank that has not made its group yet
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, sig)
        deadline = time.monotonic() + 3.0
        for p in alive:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
    for p in procs:  # reap; after SIGKILL this returns at once
        if p.poll() is None:
            p.wait()


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _failure_message(work: Path, codes: list[int | None]) -> str:
    errors = []
    for r in range(len(codes)):
        f = work / f"rank{r}.error.json"
        if f.exists():
            errors.append(json.loads(f.read_text()))
    if errors:
        first = min(errors, key=lambda e: e["time"])
        others = [
            f"rank {r}: " + ("killed while still running" if c is None else f"exit code {c}")
            for r, c in enumerate(codes)
            if r != first["rank"]
        ]
        return (
            f"rank {first['rank']} failed: {first['error']}\n{first['traceback']}"
            f"other ranks (stopped after it): {', '.join(others) or 'none'}"
            + _crash_logs(work, codes, {e["rank"] for e in errors})
        )
    crashed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
    r, c = crashed[0]
    return f"rank {r} died with exit code {c} (signal {-c} if negative); log:\n{_tail(work / f'rank{r}.log')}"


def _crash_logs(work: Path, codes: list[int | None], reported: set[int]) -> str:
    """The log tails of the ranks that ended by a signal they did not get from the launcher
    (e.g. an abort inside gloo: its reason is in the log only), beside the first error."""
    crashed = [r for r, c in enumerate(codes) if c is not None and c < 0 and r not in reported]
    return "".join(
        f"\nrank {r}'s log (exit code {codes[r]}):\n{_tail(work / f'rank{r}.log')}" for r in crashed
    )


def run_ranks(
    target: str,
    payload: dict[str, Any],
    *,
    nproc: int,
    device: str = "cpu",
    timeout_s: float = 300.0,
    pg_timeout_s: float = 60.0,
    threads: int | None = None,
    process_group: bool = True,
) -> list[Any]:
    """Run ``target(payload, ctx)`` on ``nproc`` ranks and return every rank's result.

    Args:
        target: ``"module:function"``; the function takes ``(payload, RankContext)`` and
            returns something JSON-serialisable (see :mod:`backends.torch.replay.worker`).
        payload: JSON-serialisable input for every rank.
        nproc: number of ranks.
        device: ``cpu`` (gloo) or ``cuda`` (NCCL).
        timeout_s: hard limit on the whole run, seconds.
        pg_timeout_s: ``init_process_group`` timeout, seconds.
        threads: CPU threads per rank (default :func:`default_threads`).
        process_group: join a process group (``False`` only with ``nproc == 1``: the rank
            runs alone, e.g. a single-rank replay, and no NCCL communicator takes GPU memory).

    Returns:
        The per-rank return values, gathered by rank 0, in rank order.

    Raises:
        ReplayError: a rank failed or the run timed out (every rank is killed first).
    """
    if not process_group and nproc != 1:
        raise ValueError("process_group=False runs one process (nproc 1)")
    threads = threads or default_threads(nproc)
    remove_stale_workdirs()
    with scratch_dir("ranks") as work:
        return _run_in(work, target, payload, nproc, device, timeout_s, pg_timeout_s, threads,
                       process_group)  # fmt: skip


def _run_in(
    work: Path,
    target: str,
    payload: dict[str, Any],
    nproc: int,
    device: str,
    timeout_s: float,
    pg_timeout_s: float,
    threads: int,
    process_group: bool,
) -> list[Any]:
    """:func:`run_ranks` in the scratch folder ``work``."""
    spec = {
        "target": target,
        "payload": payload,
        "world_size": nproc,
        "device": device,
        "pg_timeout_s": pg_timeout_s,
        "threads": threads,
        "process_group": process_group,
    }
    (work / "spec.json").write_text(json.dumps(spec))
    procs: list[RankProcess] = []
    started = time.monotonic()
    try:
        for r in range(nproc):
            try:
                procs.append(start_rank(work, r, device, _env(threads), started + timeout_s))
            except StartTimeout:
                raise ReplayError(
                    f"run timed out after {timeout_s:g} s; ranks still starting: "
                    f"{list(range(r, nproc))} (the rank forkserver was importing torch)"
                ) from None
            except OSError as exc:
                raise ReplayError(f"rank {r} could not be started: {exc}") from exc
        _wait(procs, work, timeout_s, started)
        result = work / "result.json"
        if not result.exists():
            raise ReplayError(f"rank 0 wrote no result; log:\n{_tail(work / 'rank0.log')}")
        return json.loads(result.read_text())["ranks"]
    finally:
        _kill(procs)


GUARD = (
    "import shutil, sys\n"
    "sys.stdin.buffer.read()\n"  # returns when the launcher's end of the pipe closes
    "shutil.rmtree(sys.argv[1], ignore_errors=True)\n"
)
"""The guard of a scratch folder (:func:`scratch_dir`), run as ``python -c``."""


@contextlib.contextmanager
def scratch_dir(what: str) -> Iterator[Path]:
    """A scratch folder ``<tmp>/pipesim-run-<pid>-<what>-*``, removed on exit, and removed even
    when this process is killed with ``kill -9``: a guard process blocks reading a pipe only
    this process holds open; the kernel closes it when this process ends, however it ends,
    and the guard then removes the folder and exits (:func:`remove_stale_workdirs` still
    sweeps what a killed guard left)."""
    path = Path(tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{os.getpid()}-{what}-"))
    read_end, write_end = os.pipe()
    try:
        guard = subprocess.Popen(
            [sys.executable, "-c", GUARD, str(path)],
            stdin=read_end,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C of the launcher does not stop it first
        )
    finally:
        os.close(read_end)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        os.close(write_end)
        guard.wait()


def remove_stale_workdirs(root: str | os.PathLike[str] | None = None) -> list[Path]:
    """Remove the scratch folders (``<tmp>/pipesim-run-<pid>-*``) of launchers that are dead
    (e.g. ``sim validate`` killed with ``kill -9``). Returns what was removed."""
    removed = []
    base = Path(root) if root is not None else Path(tempfile.gettempdir())
    for p in base.glob(f"{WORKDIR_PREFIX}*"):
        pid = p.name[len(WORKDIR_PREFIX) :].split("-", 1)[0]
        if p.is_dir() and pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed


def _wait(procs: list[RankProcess], work: Path, timeout_s: float, started: float) -> None:
    deadline = started + timeout_s
    while True:
        codes = [p.poll() for p in procs]
        if any(c not in (None, 0) for c in codes):
            time.sleep(0.2)  # let simultaneous failures land, then pick the first
            raise ReplayError(_failure_message(work, [p.poll() for p in procs]))
        if all(c == 0 for c in codes):
            return
        if time.monotonic() > deadline:
            alive = [r for r, c in enumerate(codes) if c is None]
            for r in alive:
                try:
                    os.kill(procs[r].pid, signal.SIGUSR1)  # faulthandler stack dump to the log
                except ProcessLookupError:
                    pass
            time.sleep(1.0)
            where = "\n".join(f"--- rank {r} ---\n{_tail(work / f'rank{r}.log')}" for r in alive)
            raise ReplayError(
                f"run timed out after {timeout_s:g} s; ranks still running: {alive}; "
                f"their stacks:\n{where}"
            )
        time.sleep(0.05)


def replay(job: ReplayJob) -> ReplayResult:
    """Replay ``job`` on ``job.nproc`` ranks and measure it.

    ``backend="ours"`` runs :mod:`backends.torch.replay.runtime` (every schedule, exact action
    lists); ``backend="torch"`` runs torch's ``ScheduleGPipe`` / ``Schedule1F1B``
    (:mod:`backends.torch.replay.torch_schedules`). A job with ``single_rank`` runs that stage alone
    in one process without a process group (:mod:`backends.torch.replay.single_rank`);
    ``tensor_parallel > 1`` runs :mod:`backends.torch.replay.tp`.

    Raises:
        ReplayError: a rank failed or the run exceeded ``job.timeout_s``.
    """
    target = {
        "ours": "backends.torch.replay.runtime:run_rank",
        "torch": "backends.torch.replay.torch_schedules:run_rank",
    }[job.backend]
    if job.single_rank is not None:
        target = "backends.torch.replay.single_rank:run_rank"
    if job.tensor_parallel > 1:
        target = "backends.torch.replay.tp:run_rank"
    ranks = run_ranks(
        target,
        job.to_dict(),
        nproc=job.nproc or (1 if job.single_rank is not None else job.stages),
        device=job.device,
        timeout_s=job.timeout_s,
        pg_timeout_s=job.pg_timeout_s,
        threads=job.threads,
        process_group=job.single_rank is None,
    )
    return collect_result(job, ranks)
