"""kill -9 of `sim run` / `sim validate` leaves no process and, after the next run, no
temporary file or folder (issue 7). Processes are found through /proc (Linux)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")

SLOW = {
    "name": "slow",
    "hardware": "dgx1-v100-16gb",
    "models": [{"name": "g", "trace": "gpt2-1.5b", "global_batch": 1024}],
    "sweep": {
        "schedule": ["gpipe", "1f1b", "pipedream_2bw"],
        "stages": [2, 4, 8],
        "dp_width": [1, 2],
        "microbatch_size": [1, 2],
    },
}
QUICK = {
    "name": "quick",
    "hardware": "dgx1-v100-16gb",
    "models": [{"name": "b", "trace": "bert-large", "global_batch": 8}],
    "sweep": {"schedule": "1f1b", "stages": 2},
}


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of ``pid``, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[1])


def children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            st = _stat(int(d.name))
            if st and st[1] == pid and st[0] != "Z":
                out.append(int(d.name))
    return out


def descendants(pid: int) -> list[int]:
    todo, out = [pid], []
    while todo:
        kids = children(todo.pop())
        out += kids
        todo += kids
    return out


def alive(pid: int) -> bool:
    st = _stat(pid)
    return st is not None and st[0] != "Z"


def _wait_for(cond, timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.1)
    return cond()


def _sim(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "sim.cli", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        **kw,
    )


def _leftovers(folder: Path) -> list[str]:
    return [
        str(p)
        for p in folder.rglob("*")
        if p.name.endswith(".tmp") or ".new-" in p.name or ".old-" in p.name
    ]


@pytest.mark.timeout(180)
def test_kill_9_of_sim_run_leaves_no_process_and_no_temp_files(tmp_path):
    exp = tmp_path / "slow.yaml"
    exp.write_text(yaml.safe_dump(SLOW))
    out = tmp_path / "out"
    proc = _sim("run", str(exp), "--out", str(out), "--jobs", "2", "--no-plots")
    try:
        assert _wait_for(lambda: len(children(proc.pid)) >= 2, 90), "no pool workers started"
        time.sleep(1.0)  # mid-sweep
        workers = descendants(proc.pid)
        assert proc.poll() is None, proc.stderr.read().decode()
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert _wait_for(lambda: not any(alive(p) for p in workers), 15), (
            f"workers left running: {[p for p in workers if alive(p)]}"
        )
    finally:
        if proc.poll() is None:
            proc.kill()
    # what a kill while writing leaves: a staging folder and a half-written cache entry
    dead = subprocess.Popen(["true"])
    dead.wait()
    (tmp_path / f".out.new-{dead.pid}").mkdir()
    (out / ".cache").mkdir(parents=True, exist_ok=True)
    (out / ".cache" / f".abc.json.{dead.pid}.x1y2.tmp").write_text("{half")
    quick = tmp_path / "quick.yaml"
    quick.write_text(yaml.safe_dump(QUICK))
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "sim.cli",
            "run",
            str(quick),
            "--out",
            str(out),
            "-j",
            "1",
            "--no-plots",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert _leftovers(tmp_path) == []
    assert (out / "results.csv").is_file()


def _tiny_winner(tmp_path: Path) -> Path:
    """A 2-rank 1F1B configuration of the tiny GPT profiled on this CPU."""
    exp = yaml.safe_load((ROOT / "experiments" / "cpu-gpt-tiny.yaml").read_text())
    exp["hardware"] = str(ROOT / "sim" / "hardware" / "calibrated" / "cpu-2rank.yaml")
    exp["models"][0]["trace"] = str(ROOT / "traces" / "gpt-tiny-cpu.csv")
    exp["models"][0]["microbatch_size"] = 2
    exp["sweep"]["schedule"] = "1f1b"
    winner = tmp_path / "w.yaml"
    winner.write_text(yaml.safe_dump(exp))
    return winner


def _processes_naming(text: str) -> list[int]:
    """Live processes whose command line contains ``text``."""
    out = []
    for d in Path("/proc").iterdir():
        try:
            cmd = (d / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if d.name.isdigit() and text in cmd and alive(int(d.name)):
            out.append(int(d.name))
    return out


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_replay_past_its_timeout_is_a_failed_row_and_leaves_no_process(tmp_path):
    # 1 s is less than a rank takes to import torch: both ranks are still running at the limit
    pytest.importorskip("torch")
    import pandas as pd

    from backends.torch.replay.launch import WORKDIR_PREFIX

    proc = _sim("validate", str(_tiny_winner(tmp_path)), "--nproc", "2", "--iterations", "1",
                "--no-numerics", "--timeout", "1", "--out", str(tmp_path / "v"))  # fmt: skip
    _, stderr = proc.communicate(timeout=240)
    text = " ".join(stderr.decode().split())
    assert proc.returncode == 1, text
    assert "replay failed" in text and "timed out after 1 s" in text, text
    row = pd.read_csv(tmp_path / "v" / "validation.csv").iloc[0]
    assert row.status == "failed" and "timed out after 1 s" in row.reason
    assert _wait_for(lambda: not _processes_naming(f"{WORKDIR_PREFIX}{proc.pid}-"), 20), (
        f"ranks left running: {_processes_naming(f'{WORKDIR_PREFIX}{proc.pid}-')}"
    )
    assert not list(Path(tempfile.gettempdir()).glob(f"{WORKDIR_PREFIX}{proc.pid}-*"))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("start", ["fork", "exec"])  # backends.torch.replay.start's two ways
def test_kill_9_of_an_interleaved_sim_validate_leaves_no_rank_and_no_scratch_folder(
    tmp_path, monkeypatch, start
):
    pytest.importorskip("torch")
    from backends.torch.replay.launch import WORKDIR_PREFIX
    from backends.torch.replay.start import START_ENV

    monkeypatch.setenv(START_ENV, start)  # _sim passes os.environ on

    winner = _tiny_winner(tmp_path)
    proc = _sim(
        "validate", str(winner), "--nproc", "2", "--iterations", "100", "-s", "interleaved_1f1b",
        "--out", str(tmp_path / "v"),
    )  # fmt: skip
    tmp = Path(tempfile.gettempdir())
    try:  # the scratch folder's guard and the two ranks
        assert _wait_for(lambda: len(descendants(proc.pid)) >= 3, 120), (
            proc.stderr.read().decode() if proc.poll() is not None else "no ranks started"
        )
        time.sleep(1.0)
        ranks = descendants(proc.pid)
        assert list(tmp.glob(f"{WORKDIR_PREFIX}{proc.pid}-*")), "scratch named by the pid"
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert _wait_for(lambda: not any(alive(p) for p in ranks), 20), (
            f"processes left running: {[p for p in ranks if alive(p)]}"
        )
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _wait_for(lambda: not list(tmp.glob(f"{WORKDIR_PREFIX}{proc.pid}-*")), 10)
    from sim.validate.staging import remove_stale_stages

    stages = list((tmp_path / "v").glob(".validation.new-*"))
    assert [p.name for p in stages] == [f".validation.new-{proc.pid}"]
    remove_stale_stages(tmp_path / "v")  # what the next `sim validate` there does first
    assert not stages[0].exists()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_kill_9_of_a_concurrent_user_model_profile_leaves_no_process(tmp_path):
    pytest.importorskip("torch")
    src = tmp_path / "slow_model.py"
    src.write_text(
        "import time, torch\n"
        "class Slow(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        time.sleep(0.05)\n"
        "        return x * 2\n"
        "def build():\n"
        "    m = torch.nn.Sequential(torch.nn.Linear(4, 4), Slow(), torch.nn.Linear(4, 4))\n"
        "    return m, torch.randn(2, 4)\n"
    )
    proc = _sim(
        "profile", "--model", f"{src}:build", "--concurrent", "2", "--reps", "500",
        "--out", str(tmp_path / "t"),
    )  # fmt: skip
    try:
        assert _wait_for(lambda: len(descendants(proc.pid)) >= 2, 120), "no copies started"
        time.sleep(3.0)  # the copies are profiling
        copies = descendants(proc.pid)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert _wait_for(lambda: not any(alive(p) for p in copies), 20), (
            f"processes left running: {[p for p in copies if alive(p)]}"
        )
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not (tmp_path / "t.csv").exists()
