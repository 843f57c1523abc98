"""One rank of a multi-process run: ``python -m backends.torch.replay.worker WORKDIR RANK``.

Started by :func:`backends.torch.replay.launch.run_ranks`. Reads ``WORKDIR/spec.json``
(``target`` = ``"module:function"``, ``payload``, ``world_size``, ``device``,
``pg_timeout_s``, ``threads``, optional ``process_group``: false for one process that needs
none), joins the process group (gloo on CPU, NCCL on CUDA) through a
file store in ``WORKDIR`` with a hard timeout, calls ``function(payload, ctx)`` and gathers
every rank's JSON-able return value to rank 0, which writes ``WORKDIR/result.json``.

A rank dies with its launcher (``PIPESIM_PARENT_PID``, :func:`sim.procs.die_with_parent`).
On an exception the rank writes ``WORKDIR/rank<r>.error.json`` (time, error, traceback) and
exits with code 1. ``SIGUSR1`` dumps every thread's Python stack to the rank's log, which the
launcher uses to say where a hung rank is waiting.
"""

from __future__ import annotations

import datetime
import faulthandler
import importlib
import json
import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

if __name__ == "__main__" and os.environ.get("PIPESIM_PARENT_PID"):
    from sim.procs import die_with_parent  # before the slow torch import

    die_with_parent(int(os.environ["PIPESIM_PARENT_PID"]))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


@dataclass(frozen=True)
class RankContext:
    """What a rank function gets besides its payload.

    Attributes:
        rank: this process's rank (= pipeline stage).
        world_size: number of ranks.
        device: the compute device (``cpu`` or ``cuda:<local index>``).
        workdir: the run's scratch directory.
    """

    rank: int
    world_size: int
    device: torch.device
    workdir: Path


def _device(kind: str, rank: int) -> torch.device:
    if kind.startswith("cuda"):
        index = rank % max(1, torch.cuda.device_count())
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")


def main(workdir: str, rank: int) -> int:
    """Run one rank; returns the process exit code."""
    work = Path(workdir)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    spec = json.loads((work / "spec.json").read_text())
    try:
        if spec.get("threads"):
            torch.set_num_threads(int(spec["threads"]))
        device = _device(spec["device"], rank)
        if not spec.get("process_group", True):  # one process on its own (a single-rank run)
            return _run_alone(spec, work, device)
        dist.init_process_group(
            "nccl" if device.type == "cuda" else "gloo",
            init_method=f"file://{work / 'store'}",
            rank=rank,
            world_size=spec["world_size"],
            timeout=datetime.timedelta(seconds=spec["pg_timeout_s"]),
            **({"device_id": device} if device.type == "cuda" else {}),  # type: ignore[arg-type]
        )
        module, name = spec["target"].split(":")
        fn = getattr(importlib.import_module(module), name)
        ctx = RankContext(rank, spec["world_size"], device, work)
        stats = fn(spec["payload"], ctx)
        gathered: list[object] | None = [None] * ctx.world_size if rank == 0 else None
        dist.gather_object(stats, gathered, dst=0)
        if rank == 0:
            tmp = work / "result.json.tmp"
            tmp.write_text(json.dumps({"ranks": gathered}))
            os.replace(tmp, work / "result.json")
        dist.destroy_process_group()
        return 0
    except BaseException as exc:  # noqa: BLE001 - report every failure, then exit non-zero
        error = {
            "rank": rank,
            "time": time.time(),
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(),
        }
        (work / f"rank{rank}.error.json").write_text(json.dumps(error))
        print(error["traceback"], file=sys.stderr, flush=True)
        return 1


def _run_alone(spec: dict, work: Path, device: torch.device) -> int:
    """Rank 0 of 1 without a process group: call the target and write ``result.json``."""
    module, name = spec["target"].split(":")
    fn = getattr(importlib.import_module(module), name)
    stats = fn(spec["payload"], RankContext(0, 1, device, work))
    tmp = work / "result.json.tmp"
    tmp.write_text(json.dumps({"ranks": [stats]}))
    os.replace(tmp, work / "result.json")
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1], int(sys.argv[2]))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no interpreter teardown: a broken process group must not hang the exit
