"""A process that has imported torch once and forks the ranks of many runs:
``python -m backends.torch.replay.forkserver LAUNCHER_PID ROOM``.

Started (once per launcher process) by :func:`backends.torch.replay.launch.run_ranks`. A rank
started as its own ``python -m backends.torch.replay.worker`` spends about 2 CPU seconds
importing torch and ``torch.distributed`` before it runs anything (measured: ``/usr/bin/time
python -c 'import backends.torch.replay.runtime'``, 1.9 CPU s on this project's machines); a
forked one starts with them imported. The server imports :data:`PRELOAD` and nothing else (no
tensor, no thread pool, no CUDA context: a child of a process that initialised CUDA or ran an
OpenMP region cannot use them), then reads one JSON request a line on its standard input::

    {"work": WORKDIR, "rank": R, "env": {...}, "cwd": DIR}

and answers each with the forked rank's pid on its standard output. The rank is what
``python -m backends.torch.replay.worker WORKDIR R`` would be: its own session (process group),
``os.environ`` set to ``env``, the working directory ``cwd``, its output in
``WORKDIR/rank<R>.log``, :func:`backends.torch.replay.worker.main`, then ``os._exit``; its
command line (``ps``, ``/proc/PID/cmdline``) is rewritten to that command, in the room the
launcher left for it (``ROOM``, an argument of blanks). torch's default CPU generator and numpy's
are seeded from the OS again, as in a new process (forked ranks would otherwise share the
server's draws).

The server reaps its ranks and writes each one's exit code (negative: the signal) to
``WORKDIR/rank<R>.exit``, which the launcher polls. It ends when its standard input closes or
its launcher ends (its parent pid changes), killing every rank it still has; each rank dies
with it (:func:`sim.procs.die_with_parent`).
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import select
import signal
import sys
from pathlib import Path

PRELOAD = (
    "backends.torch.replay.worker",  # torch, torch.distributed
    "backends.torch.replay.runtime",
    "backends.torch.replay.torch_schedules",  # torch.distributed.pipelining
    "backends.torch.replay.single_rank",
    "backends.torch.replay.reference",
)
"""What every rank of a replay imports (the rank functions of ``sim validate``'s replays and
their numerics check); a rank function elsewhere imports the rest itself."""

POLL_S = 0.05
"""Seconds between two reaps of finished ranks (and checks of the launcher)."""


def _write_exit(path: str, code: int) -> None:
    try:
        Path(path + ".tmp").write_text(str(code))
        os.replace(path + ".tmp", path)
    except OSError:  # the launcher has already removed the run's folder
        pass


def set_command_line(args: list[str]) -> None:
    """Rewrite this process's ``/proc/self/cmdline`` to ``args`` (cut to the room there is),
    in the memory its arguments occupy (``arg_start``/``arg_end``, proc(5))."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])  # fields 48 and 49 of proc(5)
    except (OSError, IndexError, ValueError):
        return
    room = end - start
    text = "\0".join(args).encode()[: room - 1]
    ctypes.memmove(start, text + b"\0" * (room - len(text)), room)


def _child(req: dict, server_pid: int) -> None:
    """The forked rank (module doc); never returns."""
    code = 1
    try:
        os.setsid()
        # imports in the child only: the server imports PRELOAD and nothing else (module doc)
        from sim.procs import die_with_parent

        die_with_parent(server_pid)
        work, rank = req["work"], int(req["rank"])
        log = os.open(os.path.join(work, f"rank{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(null)
        os.environ.clear()
        os.environ.update(req["env"])
        os.chdir(req["cwd"])
        argv = ["-m", "backends.torch.replay.worker", work, str(rank)]
        set_command_line([sys.executable, *argv])
        sys.argv = [sys.modules["backends.torch.replay.worker"].__file__ or "", work, str(rank)]
        import torch

        torch.default_generator.seed()  # a new process's: from the OS, not the server's
        if "numpy" in sys.modules:  # a new process seeds numpy's generator from the OS
            sys.modules["numpy"].random.seed()
        from backends.torch.replay.worker import main

        code = main(work, rank)
    except BaseException:  # noqa: BLE001 - the launcher reads the log and the exit code
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def _reap(ranks: dict[int, str]) -> None:
    """Write the exit code of every rank that has ended (module doc)."""
    while ranks:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        path = ranks.pop(pid, None)
        if path is not None:
            _write_exit(path, os.waitstatus_to_exitcode(status))


def serve(launcher_pid: int) -> None:
    """Preload, then fork a rank for each request until the launcher goes (module doc)."""
    for name in PRELOAD:
        importlib.import_module(name)
    me, pending = os.getpid(), b""
    ranks: dict[int, str] = {}  # pid -> the exit-code file
    try:
        while os.getppid() == launcher_pid:
            ready, _, _ = select.select([0], [], [], POLL_S)
            _reap(ranks)
            if not ready:
                continue
            data = os.read(0, 1 << 16)
            if not data:  # the launcher closed its end
                return
            *lines, pending = (pending + data).split(b"\n")
            for line in lines:
                req = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    _child(req, me)
                ranks[pid] = os.path.join(req["work"], f"rank{int(req['rank'])}.exit")
                os.write(1, f"{pid}\n".encode())
    finally:
        for pid in ranks:  # each is its own process group (or about to be)
            for kill in (os.killpg, os.kill):
                try:
                    kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


if __name__ == "__main__":
    serve(int(sys.argv[1]))
