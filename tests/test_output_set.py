"""The output folder of `sim run` always holds one run's complete set; cached rows are checked;
results are readable by others; progress shows without a terminal (issue 7)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from sim.cli import app
from sim.config import config_hash
from sim.plan.rowcache import open_cache, read_cached
from sim.report.drawing import sharing
from sim.report.outputs import MANIFEST, draw, recover_out_dir

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()
FITS = {
    "name": "fits",
    "hardware": "dgx1-v100-16gb",
    "models": [{"name": "bert", "trace": "bert-large", "global_batch": 8}],
    "sweep": {"schedule": ["gpipe", "1f1b"], "stages": [2, 4], "microbatch_size": 1},
}
# GPipe keeps all m stashes: BERT-Large at b=16 on 2 x 16 GB does not fit (test_cli.py)
NOTHING_FITS = {
    "name": "nofit",
    "hardware": "dgx1-v100-16gb",
    "models": [{"name": "bert", "trace": "bert-large", "global_batch": 256, "microbatch_size": 16}],
    "sweep": {"schedule": "gpipe", "stages": 2},
}


def _exp(tmp_path: Path, data: dict, name: str = "exp.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data))
    return p


def dead_pid() -> int:
    """The pid of a process that has ended (reaped)."""
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


@pytest.mark.timeout(120)
def test_rerun_where_nothing_fits_leaves_no_old_winner(tmp_path):
    out = tmp_path / "out"
    res = runner.invoke(app, ["run", str(_exp(tmp_path, FITS)), "--out", str(out), "-j", "1"])
    assert res.exit_code == 0, res.output
    for name in ("winner.yaml", "timeline.png", "timeline.json", "memory_per_gpu.png"):
        assert (out / name).is_file()
    (out / "validation.csv").write_text("mine\n")  # e.g. written by `sim validate`
    edited = {**NOTHING_FITS, "name": FITS["name"]}  # the same experiment, edited: no fit
    res = runner.invoke(
        app, ["run", str(_exp(tmp_path, edited, "b.yaml")), "--out", str(out), "-j", "1"]
    )
    assert res.exit_code == 1, res.output
    left = {p.name for p in out.iterdir()}
    assert "winner.yaml" not in left and "timeline.png" not in left
    assert "memory_per_gpu.png" not in left and "timeline.json" not in left
    assert len(pd.read_csv(out / "results.csv")) == 1  # the new run's single row
    assert (out / "validation.csv").read_text() == "mine\n"  # not ours: kept
    assert (out / ".cache").is_dir()
    assert json.loads((out / MANIFEST).read_text())["entries"] == sorted(
        ["config.resolved.yaml", "results.csv"]  # one row: no one-point throughput plot
    )
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]


@pytest.mark.timeout(120)
def test_results_are_readable_by_others(tmp_path):
    out = tmp_path / "out"
    old = os.umask(0o022)
    try:
        res = runner.invoke(
            app, ["run", str(_exp(tmp_path, FITS)), "--out", str(out), "-j", "1", "--no-plots"]
        )
    finally:
        os.umask(old)
    assert res.exit_code == 0, res.output
    for name in ("results.csv", "winner.yaml", "config.resolved.yaml"):
        mode = stat.S_IMODE((out / name).stat().st_mode)
        assert mode == 0o644, (name, oct(mode))


@pytest.mark.timeout(120)
def test_corrupt_and_forged_cache_entries_are_recomputed(tmp_path):
    out = tmp_path / "out"
    args = ["run", str(_exp(tmp_path, FITS)), "--out", str(out), "-j", "1", "--no-plots"]
    args.append("--exhaustive")  # every point simulated, so every point has a cache entry
    assert runner.invoke(app, args).exit_code == 0
    truth = pd.read_csv(out / "results.csv")
    with open_cache(out / ".cache") as cache:
        keys = sorted(cache.iterkeys())
        assert len(keys) == 4
        cache[keys[0]] = b"\x00\xffgarbage"  # unreadable
        edited = json.loads(cache[keys[1]])  # edited, checksum left as it was
        edited["row"]["bubble_fraction"] = 0.0
        cache[keys[1]] = json.dumps(edited)
        forged = json.loads(cache[keys[2]])  # forged: 10x the throughput, checksum redone
        forged["row"]["throughput_samples_per_s"] *= 10
        forged["sha256"] = config_hash({"key": forged["key"], "row": forged["row"]})
        cache[keys[2]] = json.dumps(forged)
        other = json.loads(cache[keys[3]])  # filed under another configuration's key
        cache[keys[3]] = json.dumps({**other, "key": "0" * 64})
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    warnings = [line for line in res.output.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 4, res.output
    for key, why in zip(
        keys, ("unreadable", "damaged", "inconsistent (throughput", "not an entry"), strict=True
    ):
        assert any(key in w and why in w for w in warnings), (key, why, warnings)
    again = pd.read_csv(out / "results.csv")
    pd.testing.assert_frame_equal(again, truth)
    assert runner.invoke(app, args).output.count("warning:") == 0  # rewritten


def test_a_pickled_cache_entry_is_not_unpickled(tmp_path):
    """The cache holds JSON text; a pickled value put there by someone else reads as bytes
    (unreadable, recomputed), so reading a cache never runs code."""
    with open_cache(tmp_path) as cache:
        cache["k"] = _Boom()  # diskcache pickles what is not text or bytes
        entry = cache["k"]
    assert isinstance(entry, bytes)
    assert str(read_cached(entry, "k", None)).startswith("unreadable")  # type: ignore[arg-type]


class _Boom:
    def __reduce__(self):
        return (pytest.fail, ("unpickled",))


def test_recover_a_swap_killed_between_the_renames(tmp_path):
    out = tmp_path / "out"
    pid = dead_pid()
    new = tmp_path / f".out.new-{pid}"
    new.mkdir()
    (new / "results.csv").write_text("new\n")
    (new / MANIFEST).write_text(json.dumps({"entries": ["results.csv"]}))
    old = tmp_path / f".out.old-{pid}"
    old.mkdir()
    (old / "results.csv").write_text("old\n")
    (old / "winner.yaml").write_text("old\n")
    (old / "validation.csv").write_text("mine\n")
    (old / MANIFEST).write_text(json.dumps({"entries": ["results.csv", "winner.yaml"]}))
    recover_out_dir(out)
    assert (out / "results.csv").read_text() == "new\n"
    assert (out / "validation.csv").read_text() == "mine\n"
    assert not (out / "winner.yaml").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_recover_an_unfinished_staging_keeps_the_old_set(tmp_path):
    out = tmp_path / "out"
    pid = dead_pid()
    (tmp_path / f".out.new-{pid}").mkdir()  # killed while writing: no manifest yet
    (tmp_path / f".out.new-{pid}" / "results.csv").write_text("half")
    old = tmp_path / f".out.old-{pid}"
    old.mkdir()
    (old / "results.csv").write_text("old\n")
    recover_out_dir(out)
    assert (out / "results.csv").read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.timeout(120)
def test_progress_lines_without_a_terminal(tmp_path):
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "sim.cli",
            "run",
            str(_exp(tmp_path, FITS)),
            "--out",
            str(tmp_path / "out"),
            "-j",
            "1",
            "--no-plots",
        ],
        capture_output=True,
        text=True,
        timeout=110,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert res.returncode == 0, res.stderr
    assert "simulating: 4/4 configurations (100%)" in res.stderr


def _slow_file(path: Path, seconds: float) -> None:
    time.sleep(seconds)
    path.write_text(str(os.getpid()))


def test_drawings_are_shared_as_processes_free_up(tmp_path):
    # sim.report.drawing.draw: each drawing is drawn exactly once, by whichever process is free;
    # one slow drawing first: whichever process takes it, the other draws all the quick ones
    # meanwhile (a fixed split would have given the slow one's process every other file)
    files = [tmp_path / f"{k}.txt" for k in range(7)]
    calls = [partial(_slow_file, f, 1.0 if k == 0 else 0.01) for k, f in enumerate(files)]
    assert draw(list(zip(files, calls, strict=True)), jobs=2) == files
    pids = [f.read_text() for f in files]
    assert len(set(pids)) == 2
    assert set(pids[1:]) == {pids[1]} != {pids[0]}


@pytest.mark.timeout(120)
def test_children_draw_while_this_process_works_and_stop_on_its_error(tmp_path):
    # sim.report.drawing.sharing: the children start at once (sim run writes results.csv
    # meanwhile); this process joins them; an error before it does stops them
    files = [tmp_path / f"{k}.txt" for k in range(4)]
    calls = [partial(_slow_file, f, 0.01) for f in files]
    with sharing(list(zip(files, calls, strict=True)), jobs=2) as share:
        deadline = time.monotonic() + 60
        while not files[0].exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert files[0].read_text() != str(os.getpid())  # drawn by a child, this one busy
        share.join_in()
    assert all(f.exists() for f in files)
    slow = [partial(_slow_file, tmp_path / f"s{k}.txt", 30.0) for k in range(2)]
    with pytest.raises(KeyError), sharing(list(zip(files[:2], slow, strict=True)), 2) as share:
        children = list(share.children)
        raise KeyError("writing results.csv failed")
    assert children and not any(p.is_alive() for p in children)


def test_the_costliest_drawings_are_taken_first(tmp_path):
    names = ["timeline.json", "memory_timeline.png", "x.csv", "timeline.png", "throughput.png"]
    drawings = [(tmp_path / n, partial(Path.touch, tmp_path / n)) for n in names]
    with sharing(drawings, jobs=2) as share:
        order = [d for d in sorted(drawings, key=lambda d: share.calls.index(d[1]))]
        share.join_in()
    assert [p.name for p, _ in order] == [
        "timeline.png", "throughput.png", "memory_timeline.png", "timeline.json", "x.csv"
    ]  # fmt: skip
