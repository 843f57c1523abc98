"""How :func:`backends.torch.replay.launch.run_ranks` starts a rank process: :func:`start_rank`.

Two ways, one result: a process ``python -m backends.torch.replay.worker WORKDIR RANK`` in its
own session, writing ``WORKDIR/rank<R>.log``, that the launcher polls, kills by process group
and reaps.

* ``fork`` (the default for CPU ranks on Linux): the rank is forked from this launcher's forkserver
  (:mod:`backends.torch.replay.forkserver`), a process that imported torch once, so a rank
  starts in milliseconds instead of spending about 2 CPU seconds importing torch (a test
  session starts several hundred ranks; ``sim validate`` starts two launches of
  ``stages x tensor_parallel`` ranks and a reference per replay). The server starts with the
  launcher's first rank and ends with the launcher.
* ``exec``: ``subprocess.Popen`` of that command (``PIPESIM_RANK_START=exec``; always for CUDA
  ranks, whose start is small beside their run and whose CUDA and NCCL state has not been
  checked after a fork here, and elsewhere than Linux).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Protocol

START_ENV = "PIPESIM_RANK_START"
"""``exec`` starts each rank as its own interpreter; anything else (or unset) forks it."""


class RankProcess(Protocol):
    """What the launcher needs of a rank: :class:`subprocess.Popen`'s ``pid``, ``poll`` and
    ``wait`` (``subprocess.TimeoutExpired`` when ``timeout`` passes)."""

    pid: int

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


class StartTimeout(Exception):
    """The forkserver did not fork a rank before the run's deadline (it is killed)."""


def forking(device: str) -> bool:
    """Whether ranks on ``device`` (``cpu``, ``cuda``) are forked from the forkserver (module
    doc)."""
    return (
        device == "cpu"
        and sys.platform.startswith("linux")
        and os.environ.get(START_ENV, "fork") != "exec"
    )


def start_rank(
    work: Path, rank: int, device: str, env: dict[str, str], deadline: float
) -> RankProcess:
    """Start rank ``rank`` of the run in ``work`` on ``device`` with environment ``env`` (module
    doc).

    Raises:
        StartTimeout: forking, the rank was not started before ``deadline`` (``time.monotonic``).
    """
    if forking(device):
        return _server(env).fork(work, rank, env, deadline)
    with open(work / f"rank{rank}.log", "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "backends.torch.replay.worker", str(work), str(rank)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


class ForkedRank:
    """A rank the forkserver forked; its exit code (negative: the signal) is the file
    ``WORKDIR/rank<R>.exit`` the server writes when it reaps it."""

    def __init__(self, pid: int, exit_file: Path, server: subprocess.Popen[bytes]) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._exit_file, self._server = exit_file, server

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._read()
            if self.returncode is None and self._server.poll() is not None:
                code = self._read()  # else it died with the server, which kills its ranks
                self.returncode = -signal.SIGKILL if code is None else code
        return self.returncode

    def _read(self) -> int | None:
        try:
            return int(self._exit_file.read_text())
        except (OSError, ValueError):
            return None

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if end is not None and time.monotonic() > end:
                raise subprocess.TimeoutExpired(f"rank pid {self.pid}", timeout or 0.0)
            time.sleep(0.01)
        return code


class _Forkserver:
    """This launcher's forkserver process and the pipe pair to it."""

    def __init__(self, env: dict[str, str]) -> None:
        # blanks the forked ranks' command lines are written over (forkserver module doc)
        room = " " * (len(tempfile.gettempdir()) + 200)
        self.owner = os.getpid()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "backends.torch.replay.forkserver", str(self.owner), room],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            start_new_session=True,  # a Ctrl-C of the launcher reaches its ranks through it
        )
        self.lock = threading.Lock()

    def alive(self) -> bool:
        return self.owner == os.getpid() and self.proc.poll() is None

    def fork(self, work: Path, rank: int, env: dict[str, str], deadline: float) -> ForkedRank:
        request = {"work": str(work), "rank": rank, "env": env, "cwd": os.getcwd()}
        assert self.proc.stdin is not None and self.proc.stdout is not None
        with self.lock:
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
            reply = b""
            while not reply.endswith(b"\n"):
                wait_s = deadline - time.monotonic()
                fd = self.proc.stdout.fileno()
                if wait_s <= 0 or not select.select([fd], [], [], wait_s)[0]:
                    self.stop()  # it may still fork the rank: it must not outlive the run
                    raise StartTimeout(f"rank {rank} not started")
                chunk = os.read(fd, 64)
                if not chunk:
                    raise OSError(f"the rank forkserver ended (exit code {self.proc.wait()})")
                reply += chunk
        return ForkedRank(int(reply), work / f"rank{rank}.exit", self.proc)

    def stop(self) -> None:
        """Kill the server; each rank it forked dies with it."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


_SERVER: _Forkserver | None = None
_SERVER_LOCK = threading.Lock()


def _server(env: dict[str, str]) -> _Forkserver:
    """This process's forkserver, started (again, with ``env``) where there is none alive."""
    global _SERVER
    with _SERVER_LOCK:
        if _SERVER is None or not _SERVER.alive():
            _SERVER = _Forkserver(env)
        return _SERVER


@atexit.register
def _stop_server() -> None:
    if _SERVER is not None and _SERVER.owner == os.getpid():
        _SERVER.stop()
