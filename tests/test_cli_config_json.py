"""A user with a Hugging Face config.json and no torch nor GPU: ``sim trace from-config`` and an
experiment whose trace is the config (each test failed before: the command did not exist, and
``trace: config.json`` was refused with "is JSON, not a trace")."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sim.cli import app
from sim.cli.console import setup_logging
from sim.trace.loader import load_trace

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "examples" / "hf" / "tiny-llama-config.json"
runner = CliRunner()


def _run(*args):
    return runner.invoke(app, [str(a) for a in args])


def _tiny_params() -> int:
    """tiny-llama-config.json's parameters by hand (Llama: h=128, 4 heads of 32, 2 KV heads,
    FFN 344, 4 layers, vocabulary 512, untied): embedding V*h; per layer q,o (2*h*h), k,v
    (2*h*32*2), gate/up/down (3*h*344) and two RMSNorms (2*h); the final norm h; the head V*h."""
    h, layer = 128, 2 * 128 * 128 + 2 * 128 * 32 * 2 + 3 * 128 * 344 + 2 * 128
    return 512 * h + 4 * layer + h + 512 * h  # 857,216


def _experiment(tmp_path: Path, model: dict, sweep: dict | None = None) -> Path:
    exp = {
        "name": "hf",
        "hardware": "dgx-h100",
        "models": [{"name": "m", "global_batch": 8, **model}],
        "sweep": sweep or {"schedule": "1f1b", "stages": 2, "dp_width": 1, "microbatch_size": 1},
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(exp))
    return path


def test_from_config_writes_a_trace_without_torch(tmp_path: Path, monkeypatch) -> None:
    """`sim trace from-config` reads the config offline and never imports torch: embedding,
    4 blocks and the head, with the hand-counted parameters, readable back as a trace."""
    monkeypatch.setitem(sys.modules, "torch", None)  # any `import torch` now fails
    out = tmp_path / "traces" / "tiny"
    res = _run("trace", "from-config", TINY, "--seq-len", 128, "-b", 2, "--out", out)
    assert res.exit_code == 0, res.output
    trace = load_trace(f"{out}.csv")
    assert len(trace.layers) == 6 and trace.microbatch_size == 2, trace.layers
    assert trace.parameters == _tiny_params() == 857_216
    assert trace.provenance["seq_len"] == 128 and "H100" in trace.device


def test_sim_memory_takes_a_config_json_as_the_trace(tmp_path: Path) -> None:
    """`trace: config.json` (relative to the experiment) with `seq_len` is read offline; the
    configuration's weights are the hand-counted parameters in bf16 (2 bytes each)."""
    (tmp_path / "tiny.json").write_text(TINY.read_text())
    path = _experiment(tmp_path, {"trace": "tiny.json", "seq_len": 128})
    res = _run("memory", path, "--out", tmp_path / "mem", "--no-plots")
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader((tmp_path / "mem" / "memory.csv").open()))
    assert len(rows) == 2, rows
    assert sum(float(r["weights_bytes"]) for r in rows) == 2 * _tiny_params()


def test_sim_run_takes_a_config_json_as_the_trace(tmp_path: Path) -> None:
    """The same experiment simulates, and its winner.yaml runs again: it kept seq_len (it
    dropped it, and `sim run winner.yaml` asked for models.0.seq_len)."""
    path = _experiment(tmp_path, {"trace": str(TINY), "seq_len": 128})
    res = _run("run", path, "--out", tmp_path / "run", "--no-plots", "--jobs", 1)
    assert res.exit_code == 0, res.output
    winner = yaml.safe_load((tmp_path / "run" / "winner.yaml").read_text())
    assert winner["models"][0]["seq_len"] == 128, winner["models"]
    res = _run("run", tmp_path / "run" / "winner.yaml", "--out", tmp_path / "again", "--no-plots")
    assert res.exit_code == 0, res.output


def test_a_config_json_without_seq_len_names_the_field(tmp_path: Path) -> None:
    """A config states the model, not the training length: the message names models.0.seq_len
    and the command that writes a trace once."""
    path = _experiment(tmp_path, {"trace": str(TINY)})
    res = _run("run", path, "--out", tmp_path / "out")
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())
    assert "exp.yaml" in text and "models.0.seq_len" in text, text
    assert "sim trace from-config" in text and "Traceback" not in text, text
    assert not (tmp_path / "out").exists()


def test_seq_len_on_a_trace_that_has_its_own_is_refused(tmp_path: Path) -> None:
    """seq_len beside a shipped trace would silently do nothing; it is refused by name."""
    path = _experiment(tmp_path, {"trace": "gpt2-1.5b", "seq_len": 4096})
    res = _run("memory", path, "--out", tmp_path / "out", "--no-plots")
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())
    assert "models.0.seq_len" in text and "remove seq_len" in text, text


def test_a_config_missing_a_field_names_the_file_and_the_field(tmp_path: Path) -> None:
    """A config.json without hidden_size: one line naming the config file and the field."""
    cfg = json.loads(TINY.read_text())
    del cfg["hidden_size"]
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps(cfg))
    path = _experiment(tmp_path, {"trace": "config.json", "seq_len": 128})
    for args in (
        ("memory", path, "--out", tmp_path / "out", "--no-plots"),
        ("trace", "from-config", bad, "--seq-len", 128, "--out", tmp_path / "t"),
    ):
        res = _run(*args)
        assert res.exit_code == 2, res.output
        text = " ".join(res.output.split())
        assert str(bad) in text and "'hidden_size'" in text and "Traceback" not in text, text
    assert not (tmp_path / "out").exists() and not (tmp_path / "t.csv").exists()


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--gpu", "dgx-h10"], ["--gpu", "did you mean 'dgx-h100'"]),  # h100: a GPU
        (["--dtype", "bf8"], ["--dtype", "bf16, fp16, fp32"]),
        (["--seq-len", "0"], ["--seq-len", "must be >= 1, got 0"]),
    ],
)
def test_from_config_bad_options_name_the_option(tmp_path: Path, args, names) -> None:
    """An unknown preset, dtype or a zero length: exit 2, the option named, nothing written."""
    res = _run("trace", "from-config", TINY, "--seq-len", 64, *args, "--out", tmp_path / "t")
    assert res.exit_code == 2, res.output
    assert all(n in res.output for n in names), res.output
    assert not (tmp_path / "t.csv").exists()


def test_sim_memory_quiet_prints_only_the_table(tmp_path: Path) -> None:
    """`sim memory` had no -q/-v (`sim run` has): -q leaves the table, without the progress
    and the summary line; -v is accepted."""
    path = _experiment(tmp_path, {"trace": "bert-large"})
    try:
        res = _run("memory", path, "--out", tmp_path / "q", "--no-plots", "-q")
        assert res.exit_code == 0, res.output
        assert "peak memory per GPU" in res.output, res.output
        assert "computing memory" not in res.output and " s; wrote " not in res.output
        res = _run("memory", path, "--out", tmp_path / "v", "--no-plots", "-v")
        assert res.exit_code == 0 and "1 configuration in" in res.output, res.output
    finally:
        setup_logging(0, False)


def test_sim_profile_of_a_config_json_without_torch_names_the_way_without(
    tmp_path: Path, monkeypatch
) -> None:
    """`sim profile --model config.json` without torch said only "this command needs torch";
    it now also gives the `sim trace from-config` command that needs none."""
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None)
    out = tmp_path / "t"
    res = _run("profile", "--model", TINY, "--seq-len", 64, "--for-gpu", "H100", "--out", out)
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())
    assert "needs torch" in text and f"sim trace from-config {TINY} --seq-len 64" in text, text


def test_a_seq_len_beyond_the_configs_positions_is_warned(tmp_path: Path) -> None:
    """tiny-llama's max_position_embeddings is 256: --seq-len 1024 is timed but warned of (on
    the console and in the trace's notes); 256 is not."""
    res = _run("trace", "from-config", TINY, "--seq-len", 1024, "--out", tmp_path / "long")
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "warning: seq_len 1024 exceeds the config's max_position_embeddings 256" in text, text
    assert "max_position_embeddings 256" in load_trace(f"{tmp_path}/long.csv").provenance["notes"]
    res = _run("trace", "from-config", TINY, "--seq-len", 256, "--out", tmp_path / "ok")
    assert res.exit_code == 0 and "warning" not in res.output, res.output


@pytest.mark.parametrize("args", [["partition", "{c}", "--stages", "2"], ["trace", "show", "{c}"]])
def test_a_config_json_given_to_a_command_that_takes_a_trace(args) -> None:
    """`sim partition config.json` (and `sim trace show`) pointed to `sim profile`, which needs
    torch; it names the argument and `sim trace from-config`, not an experiment's seq_len."""
    res = _run(*[a.format(c=TINY) for a in args])
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())
    assert "argument 'TRACE'" in text and f"sim trace from-config {TINY}" in text, text
    assert "seq_len:" not in text, text


def test_an_out_ending_in_csv_names_the_files_written(tmp_path: Path) -> None:
    """`--out traces/x.csv` wrote traces/x.csv and x.yaml but said "wrote traces/x.csv.csv/.yaml"
    and told the user to use traces/x.csv.csv (the same in import-kineto and profile)."""
    res = _run("trace", "from-config", TINY, "--seq-len", 64, "--out", tmp_path / "x.csv")
    assert res.exit_code == 0, res.output
    text = "".join(res.output.split())  # rich wraps long paths anywhere
    assert ".csv.csv" not in text and f"wrote{tmp_path}/x.csv/.yaml" in text, res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.csv", "x.yaml"]
    assert load_trace(f"{tmp_path}/x.csv").name == "x"


def test_from_config_keeps_at_most_the_configs_layers(tmp_path: Path) -> None:
    """--layers 100 of a 4-layer config made a 100-layer model; the first L layers of 4 are at
    most 4: refused, naming the option, and --layers 2 keeps embedding, 2 blocks and the head."""
    res = _run("trace", "from-config", TINY, "--seq-len", 64, "--layers", 100, "-o", tmp_path / "a")
    assert res.exit_code == 2, res.output
    assert "option '--layers'" in res.output and "num_hidden_layers 4" in res.output, res.output
    res = _run("trace", "from-config", TINY, "--seq-len", 64, "--layers", 2, "-o", tmp_path / "b")
    assert res.exit_code == 0, res.output
    assert len(load_trace(f"{tmp_path}/b.csv").layers) == 4
