"""A corpus of malformed inputs: each must end in exit code 2, one message naming the file (or
option) and the field, no traceback, no output written, within a bounded time (issue 7)."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sim.cli import app

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()

EXP = {
    "name": "small",
    "hardware": "dgx1-v100-16gb",
    "models": [{"name": "bert", "trace": "bert-large", "global_batch": 8}],
    "sweep": {"schedule": ["gpipe", "1f1b"], "stages": [2, 4], "microbatch_size": 1},
}
TINY = (ROOT / "traces" / "gpt-tiny-cpu.csv").read_text()
# the sidecar without its further micro-batch sizes, so the copy is one self-contained file pair
TINY_SIDE = yaml.safe_dump(
    {
        k: v
        for k, v in yaml.safe_load((ROOT / "traces" / "gpt-tiny-cpu.yaml").read_text()).items()
        if k != "profiles"
    },
    sort_keys=False,
)
HW = (ROOT / "sim" / "hardware" / "calibrated" / "cpu-2rank.yaml").read_text()


def _exp(**changes) -> str:
    data = {**EXP, **changes}
    return yaml.safe_dump(data)


def _with_trace(csv: str | bytes = TINY, side: str | bytes = TINY_SIDE) -> dict:
    exp = _exp(
        models=[{"name": "t", "trace": "t.csv", "global_batch": 8}],
        sweep={"schedule": "1f1b", "stages": 2},
    )
    return {"exp.yaml": exp, "t.csv": csv, "t.yaml": side}


def _csv_times(value: str) -> str:
    lines = TINY.splitlines()
    head = lines[0].split(",")
    i, j = head.index("fwd_s"), head.index("bwd_s")
    out = [lines[0]]
    for line in lines[1:]:
        cells = line.split(",")
        cells[i] = cells[j] = value
        out.append(",".join(cells))
    return "\n".join(out) + "\n"


NESTED = "a: " + "[" * 50_000 + "]" * 50_000 + "\n"


@dataclass
class Case:
    """Files to write into tmp_path, the command (``{d}`` is tmp_path), what the message names."""

    id: str
    files: dict[str, str | bytes]
    args: list[str]
    mentions: list[str]
    setup: Callable[[Path], None] | None = field(default=None)


RUN = ["run", "{d}/exp.yaml", "--out", "{d}/out", "--jobs", "1", "--no-plots"]

CASES = [
    # --- undecodable files ---------------------------------------------------------------
    Case(
        "experiment-not-utf8",
        {"exp.yaml": "name: caf\xe9\n".encode("latin-1")},
        RUN,
        ["exp.yaml", "not UTF-8", "line 1"],
    ),
    Case(
        "experiment-binary",
        {"exp.yaml": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"},
        RUN,
        ["exp.yaml", "binary"],
    ),
    Case("experiment-nested", {"exp.yaml": NESTED}, RUN, ["exp.yaml", "nested"]),
    Case(
        "experiment-alias-bomb",
        {
            "exp.yaml": "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
            + "".join(
                f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
                for p, c in zip("abcdefgh", "bcdefghi", strict=True)
            )
        },
        RUN,
        ["exp.yaml", "values"],
    ),
    Case("experiment-is-directory", {"exp.yaml/x": "x"}, RUN, ["exp.yaml", "directory"]),
    Case(
        "hardware-not-utf8",
        {
            "exp.yaml": _exp(hardware="hw.yaml"),
            "hw.yaml": HW.encode() + "# \xff\n".encode("latin-1"),
        },
        RUN,
        ["hw.yaml", "not UTF-8"],
    ),
    Case(
        "hardware-binary",
        {"exp.yaml": _exp(hardware="hw.yaml"), "hw.yaml": b"\x00" * 64},
        RUN,
        ["hw.yaml", "binary"],
    ),
    Case(
        "hardware-nested",
        {"exp.yaml": _exp(hardware="hw.yaml"), "hw.yaml": NESTED},
        RUN,
        ["hw.yaml", "nested"],
    ),
    Case(
        "trace-csv-binary",
        _with_trace(csv=b"\x1f\x8b\x08\x00" + b"\x00" * 100),
        RUN,
        ["t.csv", "binary"],
    ),
    Case(
        "trace-csv-not-utf8",
        _with_trace(csv=TINY.encode() + b"caf\xe9,1,1,1,1,1\n"),
        RUN,
        ["t.csv", "not UTF-8"],
    ),
    Case(
        "trace-sidecar-not-utf8",
        _with_trace(side=TINY_SIDE.encode() + b"# \xe9\n"),
        RUN,
        ["t.yaml", "not UTF-8"],
    ),
    Case("trace-sidecar-binary", _with_trace(side=b"\x00\x01\x02"), RUN, ["t.yaml", "binary"]),
    Case("trace-sidecar-nested", _with_trace(side=NESTED), RUN, ["t.yaml", "nested"]),
    Case(
        "winner-not-utf8",
        {"winner.yaml": _exp().encode() + b"# \xe9\n"},
        ["run", "{d}/winner.yaml", "--out", "{d}/out"],
        ["winner.yaml", "not UTF-8"],
    ),
    Case(
        "validate-winner-binary",
        {"winner.yaml": b"\x00\xff" * 10},
        ["validate", "{d}/winner.yaml", "--out", "{d}/out"],
        ["winner.yaml", "binary"],
    ),
    # --- absurd sizes ------------------------------------------------------------------
    Case(
        "global-batch-1e7",
        {
            "exp.yaml": _exp(
                models=[{"name": "b", "trace": "bert-large", "global_batch": 10_000_000}],
                sweep={"schedule": "1f1b", "stages": 2},
            )
        },
        RUN,
        ["exp.yaml", "sweep", "10000000 micro-batches"],
    ),
    Case(
        "num-gpus-100000",
        {"exp.yaml": _exp(hardware={"base": "dgx1-v100-16gb", "num_gpus": 100_000})},
        RUN,
        ["exp.yaml", "hardware.num_gpus", "100000"],
    ),
    Case(
        "iterations-huge",
        {"exp.yaml": _exp(training={"iterations": 10**9})},
        RUN,
        ["exp.yaml", "training.iterations"],
    ),
    Case(
        "grid-1e12-combinations",
        {
            "exp.yaml": _exp(
                sweep={
                    "schedule": "1f1b",
                    "stages": list(range(1, 1001)),
                    "dp_width": list(range(1, 1001)),
                    "microbatch_size": list(range(1, 1001)),
                }
            )
        },
        RUN,
        ["exp.yaml", "sweep", "combinations"],
    ),
    Case(
        "trace-show-binary",
        {"t.csv": b"\x00\x01", "t.yaml": TINY_SIDE},
        ["trace", "show", "{d}/t.csv"],
        ["t.csv", "binary"],
    ),
    Case(
        "hardware-show-not-utf8",
        {"hw.yaml": b"name: \xff\n"},
        ["hardware", "show", "{d}/hw.yaml"],
        ["hw.yaml", "not UTF-8"],
    ),
    Case(
        "partition-hardware-nested",
        {"hw.yaml": NESTED},
        ["partition", "gnmt16", "-p", "2", "--hardware", "{d}/hw.yaml"],
        ["hw.yaml", "nested"],
    ),
    Case(
        "schedule-show-m-1e7",
        {},
        ["schedule", "show", "1f1b", "-p", "4", "-m", "10000000"],
        ["--microbatches"],
    ),
    Case(
        "schedule-show-iterations-huge",
        {},
        ["schedule", "show", "1f1b", "-p", "4", "-m", "8", "--iterations", "100000000"],
        ["--iterations"],
    ),
    Case("trace-all-zero-times", _with_trace(csv=_csv_times("0")), RUN, ["t.csv", "fwd_s", "zero"]),
    Case(
        "trace-1e300-times", _with_trace(csv=_csv_times("1e300")), RUN, ["t.csv", "fwd_s", "row 1"]
    ),
    # --- names -------------------------------------------------------------------------
    Case(
        "duplicate-model-name",
        {
            "exp.yaml": _exp(
                models=[
                    {"name": "m", "trace": "bert-large", "global_batch": 8},
                    {"name": "m", "trace": "gnmt16", "global_batch": 8},
                ]
            )
        },
        RUN,
        ["exp.yaml", "models.1.name", "'m'"],
    ),
    Case(
        "experiment-name-path",
        {"exp.yaml": _exp(name="../../escaped")},
        ["run", "{d}/exp.yaml", "--jobs", "1"],
        ["exp.yaml", "field 'name'", "../../escaped"],
    ),
    Case(
        "model-name-path",
        {"exp.yaml": _exp(models=[{"name": "../x", "trace": "bert-large", "global_batch": 8}])},
        RUN,
        ["exp.yaml", "models.0.name"],
    ),
    Case(
        "model-named-like-an-output",
        {
            "exp.yaml": _exp(
                models=[
                    {"name": "results.csv", "trace": "bert-large", "global_batch": 8},
                    {"name": "b", "trace": "bert-large", "global_batch": 8},
                ]
            )
        },
        RUN,
        ["exp.yaml", "models.0.name", "output file"],
    ),
    # --- options checked before the sweep ------------------------------------------------
    Case(
        "boundaries-out-of-range",
        {
            "exp.yaml": _exp(
                sweep={"schedule": "1f1b", "stages": 2}, options={"boundaries": [0, 500]}
            )
        },
        RUN,
        ["exp.yaml", "options.boundaries.1", "500"],
    ),
    Case(
        "boundaries-decreasing",
        {
            "exp.yaml": _exp(
                sweep={"schedule": "1f1b", "stages": 3}, options={"boundaries": [0, 9, 4]}
            )
        },
        RUN,
        ["exp.yaml", "options.boundaries.2"],
    ),
    Case(
        "boundaries-not-from-0",
        {"exp.yaml": _exp(sweep={"schedule": "1f1b", "stages": 2}, options={"boundaries": [3, 9]})},
        RUN,
        ["exp.yaml", "options.boundaries.0"],
    ),
    Case(
        "placement-no-such-gpu",
        {
            "exp.yaml": _exp(
                sweep={"schedule": "1f1b", "stages": 2}, options={"placement": [[0, 8]]}
            )
        },
        RUN,
        ["exp.yaml", "options.placement.0.1", "GPU 8"],
    ),
    Case(
        "placement-gpu-twice",
        {
            "exp.yaml": _exp(
                sweep={"schedule": "1f1b", "stages": 2}, options={"placement": [[3, 3]]}
            )
        },
        RUN,
        ["exp.yaml", "options.placement.0.1"],
    ),
    # --- --out ---------------------------------------------------------------------------
    Case("out-is-a-file", {"exp.yaml": _exp(), "out": "not a directory"}, RUN, ["--out", "out"]),
    Case(
        "out-under-a-file",
        {"exp.yaml": _exp(), "f": "x"},
        ["run", "{d}/exp.yaml", "--out", "{d}/f/out", "--jobs", "1"],
        ["--out", "f/out"],
    ),
    Case(
        "out-not-ours",
        {"exp.yaml": _exp(), "out/notes.txt": "mine"},
        RUN,
        ["--out", "not written by `sim run`"],
    ),
    Case(
        "out-is-working-dir",
        {"exp.yaml": _exp()},
        ["run", "{d}/exp.yaml", "--out", ".", "--jobs", "1"],
        ["--out", "working directory"],
    ),
    Case("jobs-negative", {"exp.yaml": _exp()}, RUN[:-3] + ["--jobs", "-3"], ["--jobs"]),
    # --- options of the other commands ---------------------------------------------------
    Case("profile-dtype", {}, ["profile", "--out", "{d}/p", "--dtype", "fp8"], ["--dtype"]),
    Case("profile-device", {}, ["profile", "--out", "{d}/p", "--device", "tpu"], ["--device"]),
    Case("profile-threads", {}, ["profile", "--out", "{d}/p", "--threads", "0"], ["--threads"]),
    Case("profile-microbatch", {}, ["profile", "--out", "{d}/p", "-b", "0"], ["--microbatch-size"]),
    Case("profile-reps", {}, ["profile", "--out", "{d}/p", "--reps", "0"], ["--reps"]),
    Case(
        "profile-concurrent",
        {},
        ["profile", "--out", "{d}/p", "--concurrent", "0"],
        ["--concurrent"],
    ),
    Case(
        "profile-heads",
        {},
        ["profile", "--out", "{d}/p", "--hidden", "100", "--heads", "3"],
        ["--heads"],
    ),
    Case("profile-out-is-dir", {"p.csv/x": "x"}, ["profile", "--out", "{d}/p"], ["--out"]),
    Case("profile-out-under-file", {"f": "x"}, ["profile", "--out", "{d}/f/p"], ["--out"]),
    Case("calibrate-nproc", {}, ["calibrate", "--out", "{d}/hw.yaml", "--nproc", "0"], ["--nproc"]),
    Case(
        "calibrate-device",
        {},
        ["calibrate", "--out", "{d}/hw.yaml", "--device", "gpu"],
        ["--device"],
    ),
    Case(
        "calibrate-out-under-file", {"f": "x"}, ["calibrate", "--out", "{d}/f/hw.yaml"], ["--out"]
    ),
    Case(
        "validate-iterations",
        {"w.yaml": _exp()},
        ["validate", "{d}/w.yaml", "--iterations", "0"],
        ["--iterations"],
    ),
    Case(
        "validate-warmup",
        {"w.yaml": _exp()},
        ["validate", "{d}/w.yaml", "--warmup", "-1"],
        ["--warmup"],
    ),
    Case(
        "validate-nproc",
        {"w.yaml": _exp()},
        ["validate", "{d}/w.yaml", "--nproc", "0"],
        ["--nproc"],
    ),
    Case(
        "validate-microbatches",
        {"w.yaml": _exp()},
        ["validate", "{d}/w.yaml", "-m", "0"],
        ["--microbatches"],
    ),
    Case(
        "validate-device",
        {"w.yaml": _exp()},
        ["validate", "{d}/w.yaml", "--device", "mps"],
        ["--device"],
    ),
    Case(
        "validate-schedule",
        {"w.yaml": _exp()},
        ["validate", "{d}/w.yaml", "-s", "zigzag"],
        ["--schedule", "zigzag"],
    ),
    Case(
        "validate-out-is-file",
        {"w.yaml": _exp(), "o": "x"},
        ["validate", "{d}/w.yaml", "--out", "{d}/o"],
        ["--out"],
    ),
    Case("partition-stages", {}, ["partition", "gnmt16", "--stages", "0"], ["--stages"]),
    Case(
        "partition-stages-too-many", {}, ["partition", "gnmt16", "--stages", "100000"], ["--stages"]
    ),
    Case(
        "partition-microbatch",
        {},
        ["partition", "gnmt16", "-p", "2", "-b", "0"],
        ["--microbatch-size"],
    ),
    Case("schedule-stages", {}, ["schedule", "show", "1f1b", "-p", "0", "-m", "4"], ["--stages"]),
    Case(
        "schedule-csv-under-file",
        {"f": "x"},
        ["schedule", "show", "1f1b", "-p", "2", "-m", "4", "--csv", "{d}/f/s.csv"],
        ["--csv"],
    ),
]


# --- the 22 inputs and faults of issue 19 mishandled before (kill -9: tests/test_kill.py) -----
USER = (
    "import sys, time, torch\n"
    "class Shrinks(torch.nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__(); self.lin = torch.nn.Linear(4, 4); self.calls = 0\n"
    "    def forward(self, x):\n"
    "        self.calls += 1\n"
    "        return self.lin(x)[:, : 4 - self.calls % 2]\n"
    "def exits():\n"
    "    sys.exit(0)\n"
    "def shrinks():\n"
    "    return torch.nn.Sequential(Shrinks(), torch.nn.ReLU()), torch.randn(2, 4)\n"
    "def hangs():\n"
    "    while True:\n"
    "        time.sleep(0.05)\n"
)
LLAMA = json.loads((ROOT / "examples" / "hf" / "tiny-llama-config.json").read_text())


def _hf(**changes: object) -> str:
    return json.dumps({**LLAMA, **changes})


def _gz_cut() -> bytes:
    return gzip.compress(b'{"traceEvents": []}' * 50)[:30]


PROFILE = ["profile", "--out", "{d}/t", "--reps", "1"]
KINETO = ["trace", "import-kineto", "{d}/k.json", "--out", "{d}/k"]
TORCH_CASES = [
    Case("kineto-b-zero", {"k.json": "{}"}, [*KINETO, "-b", "0"], ["--microbatch-size"]),
    Case("kineto-b-negative", {"k.json": "{}"}, [*KINETO, "-b", "-8"], ["--microbatch-size"]),
    Case("kineto-dtype", {"k.json": "{}"}, [*KINETO, "-b", "4", "--dtype", "fp8"], ["--dtype"]),
    Case(
        "kineto-corrupt-gz",
        {"k.json.gz": _gz_cut()},
        ["trace", "import-kineto", "{d}/k.json.gz", "--out", "{d}/k", "-b", "4"],
        ["k.json.gz", ".gz"],
    ),
    Case(
        "kineto-nested",
        {"k.json": "[" * 100_000 + "]" * 100_000},
        [*KINETO, "-b", "4"],
        ["k.json", "nested"],
    ),
    Case("model-sys-exit", {"m.py": USER}, [*PROFILE, "--model", "{d}/m.py:exits"], ["SystemExit"]),
    Case(
        "model-layer-shape-changes",
        {"m.py": USER},
        [*PROFILE, "--model", "{d}/m.py:shrinks"],
        ["--model", "different shapes"],
    ),
    Case(
        "model-never-returns",
        {"m.py": USER},
        [*PROFILE, "--model", "{d}/m.py:hangs", "--timeout", "2"],
        ["--timeout", "did not finish within 2 s"],
    ),
    Case("loss-without-model", {}, [*PROFILE, "--loss", "{d}/m.py:f"], ["--loss", "--model"]),
    Case("seq-len-absurd", {}, [*PROFILE, "--seq-len", "100000000"], ["--seq-len"]),
    Case("seq-len-not-integer", {}, [*PROFILE, "--seq-len", "1e8"], ["--seq-len"]),
    Case(
        "hf-layers-negative",
        {"c.json": _hf(num_hidden_layers=-3)},
        [*PROFILE, "--model", "{d}/c.json"],
        ["c.json", "num_hidden_layers", "positive integer"],
    ),
    Case(
        "hf-hidden-negative",
        {"c.json": _hf(hidden_size=-128)},
        [*PROFILE, "--model", "{d}/c.json"],
        ["c.json", "hidden_size", "-128"],
    ),
    Case(
        "hf-size-absurd",
        {"c.json": _hf(vocab_size=10**12)},
        [*PROFILE, "--model", "{d}/c.json"],
        ["c.json", "vocab_size", "parameters"],
    ),
    Case(
        "hf-kv-heads",
        {"c.json": _hf(num_key_value_heads=3)},
        [*PROFILE, "--model", "{d}/c.json"],
        ["c.json", "num_key_value_heads", "divide"],
    ),
    Case(
        "hf-seq-len-beyond-positions",
        {"c.json": _hf()},
        [*PROFILE, "--model", "{d}/c.json", "--seq-len", "100000", "--for-gpu", "H100"],
        ["--seq-len", "max_position_embeddings"],
    ),
    Case(
        "experiment-bool-for-integer",
        {"exp.yaml": _exp(sweep={"schedule": "1f1b", "stages": 2, "tensor_parallel": True})},
        RUN,
        ["exp.yaml", "sweep.tensor_parallel", "true is not an integer"],
    ),
    Case(
        "profile-out-unwritable-system-path",
        {},
        ["profile", "--out", "/proc/pipesim-nowhere/t"],
        ["--out", "/proc"],
    ),
    Case(
        "layers-name-keeps-brackets",
        {"m.py": USER},
        [*PROFILE, "--model", "{d}/m.py:shrinks", "--layers", "blocks[0]"],
        ["--layers", "'blocks[0]'"],
    ),
]


def _write_files(d: Path, files: dict[str, str | bytes]) -> None:
    for name, content in files.items():
        p = d / name
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content)


def _snapshot(d: Path) -> set[str]:
    return {str(p.relative_to(d)) for p in d.rglob("*")}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, tmp_path: Path, monkeypatch) -> None:
    _check_case(case, tmp_path, monkeypatch)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", TORCH_CASES, ids=[c.id for c in TORCH_CASES])
def test_bad_input_of_the_torch_backend(case: Case, tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("torch")
    if "json" in " ".join(case.files) and case.id.startswith("hf"):
        pytest.importorskip("transformers")
    _check_case(case, tmp_path, monkeypatch)


def _check_case(case: Case, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # a default results/ folder would land here
    _write_files(tmp_path, case.files)
    before = _snapshot(tmp_path)
    args = [a.replace("{d}", str(tmp_path)) for a in case.args]
    res = runner.invoke(app, args)
    out = res.output
    assert res.exit_code == 2, f"exit {res.exit_code}: {out}\n{res.exception!r}"
    assert "Traceback" not in out
    assert not isinstance(res.exception, Exception) or isinstance(res.exception, SystemExit), repr(
        res.exception
    )
    flat = " ".join(out.replace("│", " ").split())
    for text in case.mentions:
        assert text in flat, f"{text!r} not in {flat!r}"
    assert _snapshot(tmp_path) == before, "bad input must not write anything"
    assert not (tmp_path.parent / "escaped").exists()


def test_names_never_escape_results(tmp_path, monkeypatch):
    """A model name that is a path is refused before anything is written anywhere."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "exp.yaml").write_text(
        _exp(
            models=[
                {"name": "..", "trace": "bert-large", "global_batch": 8},
                {"name": "b", "trace": "bert-large", "global_batch": 8},
            ]
        )
    )
    res = runner.invoke(app, ["run", "exp.yaml", "--jobs", "1"])
    assert res.exit_code == 2 and "models.0.name" in res.output
    assert not (tmp_path / "results").exists()


def test_profile_cuda_without_cuda(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this torch has CUDA")
    res = runner.invoke(app, ["profile", "--out", str(tmp_path / "p"), "--device", "cuda"])
    assert res.exit_code == 2, res.output
    assert "--device" in res.output and "CUDA" in res.output
    assert not list(tmp_path.iterdir())
