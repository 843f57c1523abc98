"""Session 18's UX audit: bad input a new user writes that ``sim`` silently read as something
else, or answered with an internal error, or in pydantic's words (each test failed before its
fix). Each case: exit code 2, the file and the field named, no traceback, nothing written."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from sim.cli import app
from sim.cli.console import friendly
from sim.plan.memory_grid import Advice
from sim.report.tables import rate_text

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "tests" / "data" / "runs"
runner = CliRunner()


def _run(*args):
    return runner.invoke(app, [str(a) for a in args])


def _refused(res, *said: str) -> str:
    text = " ".join(res.output.split())
    assert res.exit_code == 2, res.output
    assert "Traceback" not in text and "internal error" not in text, text
    assert all(s in text for s in said), text
    return text


def _measured(tmp_path: Path, column: str, value: str) -> Path:
    """tests/data/runs/measured_sample.csv with ``column`` of its first row set to ``value``."""
    with (RUNS / "measured_sample.csv").open(newline="") as fh:
        rows = list(csv.reader(fh))
    rows[1][rows[0].index(column)] = value
    path = tmp_path / "runs.csv"
    with path.open("w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    return path


@pytest.mark.parametrize(
    ("column", "value", "says"),
    [
        ("step_time_s", "0,5", "'0,5' is not a positive number (seconds)"),
        ("tp", "0", "0 is not a whole number >= 1"),
        ("layers", "four", "'four' is not a whole number >= 1"),
    ],
)
def test_a_measured_csv_cell_that_is_no_number_is_named(tmp_path, column, value, says) -> None:
    """A measured-runs CSV read such a cell as empty: a step time of '0,5' left the run out
    of `sim compare` and of `sim calibrate --from-runs` (which fitted the rest, exit 0), tp 0
    ran at tensor parallelism 1, layers 'four' said "model shape incomplete". Now both
    commands refuse the file, naming it, the row and the column."""
    path = _measured(tmp_path, column, value)
    res = _run("compare", path, "--out", tmp_path / "cmp", "--no-plot")
    _refused(res, "runs.csv: field", f"'{column}'", "row 2:", says)
    assert not (tmp_path / "cmp").exists()
    res = _run("calibrate", "--from-runs", path, "--out", tmp_path / "o.yaml")
    _refused(res, "runs.csv", f"'{column}'", "row 2:")
    assert not (tmp_path / "o.yaml").exists()


def test_a_vtrain_cell_that_is_no_number_says_what_it_holds(tmp_path) -> None:
    """vTrain's layout said "every column must be positive (iteration_time_ms is not)" of a
    cell holding 'fast'; it now says what the cell holds."""
    lines = (RUNS / "vtrain_sample.csv").read_text().splitlines()
    path = tmp_path / "vt.csv"
    path.write_text("\n".join([lines[0], lines[1].rsplit(",", 1)[0] + ",fast"]) + "\n")
    res = _run("compare", path, "--gpu", "A100", "--out", tmp_path / "cmp", "--no-plot")
    _refused(res, "vt.csv: field 'iteration_time_ms'", "row 2: 'fast' is not a positive number")


def test_a_torchtitan_degree_that_is_no_number_names_the_key(tmp_path) -> None:
    """`tensor_parallel_degree = "two"` in a torchtitan TOML was an internal error
    (ValueError from int(), exit 3); a negative seq_len was read as given."""
    toml = (RUNS / "torchtitan_llama3_8b.toml").read_text()
    assert "tensor_parallel_degree = 1" in toml
    bad = tmp_path / "job.toml"
    bad.write_text(toml.replace("tensor_parallel_degree = 1", 'tensor_parallel_degree = "two"'))
    res = _run("import", bad, "--gpu", "H100", "--gpus", 8, "--out", tmp_path / "imp")
    _refused(res, "job.toml: field 'parallelism.tensor_parallel_degree'", "'two' is not a whole")
    assert not (tmp_path / "imp").exists()


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("stage", "three", "field 'zero_optimization.stage': 'three' is not a whole number"),
        ("micro", "auto", "'auto' is filled in by Hugging Face's Trainer"),
    ],
)
def test_a_deepspeed_value_that_is_no_number_names_the_key(tmp_path, key, value, says) -> None:
    """`"stage": "three"` and the Trainer's `"auto"` batch sizes in a DeepSpeed JSON were
    internal errors (ValueError from int(), exit 3)."""
    cfg = json.loads((RUNS / "deepspeed_zero3.json").read_text())
    if key == "stage":
        cfg["zero_optimization"]["stage"] = value
    else:
        cfg["train_micro_batch_size_per_gpu"] = value
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(cfg))
    res = _run("import", path, "--gpu", "A100", "--gpus", 8, "--seq-len", 2048,
               "--out", tmp_path / "imp")  # fmt: skip
    _refused(res, "ds.json", says)
    assert not (tmp_path / "imp").exists()


def test_a_megatron_command_with_a_negative_batch_is_refused(tmp_path) -> None:
    """`--global-batch-size -8` was imported into an experiment that `sim run` then refused
    (exit 0 from import); `--micro-batch-size 0` said "global batch is not a multiple of
    micro-batch x data-parallel width". Both now name the flag and its bound, and say to
    correct it (not to pass --ignore, which would run with the default batch)."""
    base = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 4 --hidden-size 1024 "
            "--num-attention-heads 16 --seq-length 1024 --max-position-embeddings 1024 --bf16 "
            "--vocab-size 32000 ")  # fmt: skip
    for flags, flag, bound in (
        ("--micro-batch-size 1 --global-batch-size -8", "--global-batch-size", "got -8"),
        ("--micro-batch-size 0 --global-batch-size 8", "--micro-batch-size", "got 0"),
    ):
        res = _run("import", base + flags, "--gpu", "A100", "--out", tmp_path / "imp")
        text = _refused(res, f"option '{flag}'", f"must be >= 1, {bound}", "Correct it")
        assert "--ignore" not in text, text  # leaving the batch out is no fix
        assert not (tmp_path / "imp").exists()


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        ({"models": [{"global_batch": -64}]}, "models.0.global_batch", "must be > 0, got -64"),
        ({"training": {"dtype": "fp9"}}, "training.dtype",
         "'fp9' is not one of 'fp16', 'bf16' or 'fp32'"),
        ({"sweep": None}, "sweep", "null is not a mapping"),
        ({"sweep": {"stages": True}}, "sweep.stages", "true is not an integer"),
    ],
)  # fmt: skip
def test_experiment_errors_in_the_files_own_words(tmp_path, change, field, says) -> None:
    """pydantic's "Input should be greater than 0" and "Input should be 'fp16', 'bf16' or
    'fp32'", Python's None and True for YAML's null and true: now as the rest of pipesim
    says them ("must be >= 1, got 0", "'x' is not one of ...")."""
    exp = {
        "name": "x",
        "hardware": "dgx1-v100-16gb",
        "models": [{"name": "g", "trace": "gpt2-1.5b", "global_batch": 64}],
        "training": {"optimizer": "adam"},
        "sweep": {"stages": 2},
    }
    for key, value in change.items():
        if isinstance(value, dict):
            exp[key] = {**exp[key], **value}
        elif isinstance(value, list):
            exp[key] = [{**exp[key][0], **value[0]}]
        else:
            exp[key] = value
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump(exp, sort_keys=False))
    res = _run("run", path, "--out", tmp_path / "out", "--no-plots")
    _refused(res, f"e.yaml: field '{field}'", says)
    assert "Input should" not in res.output
    assert not (tmp_path / "out").exists()


def test_a_closed_pipe_ends_the_command_quietly(capsys) -> None:
    """`sim partition gnmt16 -p 4 --json | head -2` printed "error: Broken pipe" once head
    had what it wanted; a closed standard output now ends the command with exit code 1 and
    nothing said (as `cat` does)."""

    @friendly
    def cmd() -> None:
        raise BrokenPipeError(32, "Broken pipe")

    with pytest.raises(typer.Exit) as done:
        cmd()
    assert done.value.exit_code == 1
    assert "Broken pipe" not in capsys.readouterr().err


def test_a_config_json_missing_a_size_says_to_use_the_whole_config(tmp_path) -> None:
    """A Llama config.json without hidden_size was answered "model_type 'llama' has no
    hidden_size: profile another model as a function", as if Llama were not supported; it
    now says every Llama-like config has it and to use the published config whole."""
    cfg = json.loads((ROOT / "examples" / "hf" / "tiny-llama-config.json").read_text())
    del cfg["hidden_size"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    res = _run("trace", "from-config", path, "--seq-len", 64, "--out", tmp_path / "t")
    text = _refused(res, "config.json: field 'hidden_size'", "missing field 'hidden_size'")
    assert "use the model's whole config.json as published" in text, text
    assert "has no hidden_size" not in text, text
    assert not (tmp_path / "t.csv").exists()


def test_an_unknown_calibration_parameter_suggests_the_declared_one(tmp_path) -> None:
    """`--parameters gemm,nvlink` said "unknown parameter(s) ['nvlink']" (a Python list), and
    only once every run had been read and expressed; it now names the parameter meant, first."""
    res = _run("calibrate", "--from-runs", RUNS / "vtrain_sample.csv", "--gpu", "A100",
               "--parameters", "gemm,nvlink", "--out", tmp_path / "o.yaml")  # fmt: skip
    text = _refused(res, "option '--parameters'", "'nvlink' (did you mean 'nvlink_busbw'?)")
    assert "['" not in text, text
    assert not (tmp_path / "o.yaml").exists()


def test_a_misspelt_megatron_flag_names_the_flag_meant(tmp_path) -> None:
    """`--tensor-model-paralel-size 2` was "not in pipesim's Megatron table: pass --ignore
    tensor-model-paralel-size if it changes neither time nor memory" (advice that drops the
    layout silently); it now names the flag it misspells."""
    cmd = ("torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-paralel-size 2 "
           "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 "
           "--max-position-embeddings 1024 --micro-batch-size 1 --global-batch-size 8 --bf16 "
           "--vocab-size 32000")  # fmt: skip
    res = _run("import", cmd, "--gpu", "A100", "--out", tmp_path / "imp")
    _refused(res, "option '--tensor-model-paralel-size'",
             "a misspelling of --tensor-model-parallel-size?")  # fmt: skip
    assert not (tmp_path / "imp").exists()


def test_a_negative_hardware_figure_is_said_in_the_files_words(tmp_path) -> None:
    """`gpu: {memory: -80 GiB}` was answered "Input should be greater than 0" (pydantic's
    words); it is now "must be > 0", as an experiment's bounds are said."""
    hw = tmp_path / "hw.yaml"
    hw.write_text("base: dgx-h100\ngpu: {memory: -80 GiB}\n")
    res = _run("hardware", "show", hw)
    text = _refused(res, "hw.yaml: field 'gpu.memory' (line 2): must be > 0")
    assert "Input should" not in text, text


def test_a_slow_configurations_throughput_keeps_its_digits() -> None:
    """A 70B model on eight V100s was shown "0.0 (0.0436–0.0544)" samples/s: the throughput
    at one decimal, its band at three digits. Below 10 samples/s it now keeps three."""
    assert rate_text(0.043621) == "0.0436"
    assert rate_text(5.0) == "5.00"
    assert rate_text(23.114) == "23.1" and rate_text(23.114, 2) == "23.11"
    assert rate_text(1083.4) == "1,083.4"


@pytest.mark.parametrize("command", ["compare", "import", "calibrate", "partition"])
def test_every_command_reading_files_takes_quiet_and_verbose(command) -> None:
    """`sim compare runs.csv -q` was "No such option: -q" (exit 2), as were `sim import`,
    `sim calibrate` and `sim partition`, while `sim run`, `sim memory` and `sim validate`
    take -q and -v after the command."""
    res = _run(command, "--help")
    assert res.exit_code == 0, res.output
    assert "-q, --quiet" in res.output and "-v, --verbose" in res.output, res.output


def test_a_run_without_a_size_names_the_size(tmp_path) -> None:
    """A measured-runs CSV without its hidden column said "model shape incomplete (layers,
    hidden, heads, vocabulary, sequence length)", every size it needs; it now names the one
    missing."""
    with (RUNS / "measured_sample.csv").open(newline="") as fh:
        rows = list(csv.reader(fh))
    at = rows[0].index("hidden")
    path = tmp_path / "runs.csv"
    with path.open("w", newline="") as fh:
        csv.writer(fh).writerows([r[:at] + r[at + 1 :] for r in rows])
    res = _run("compare", path, "--out", tmp_path / "cmp", "--no-plot")
    assert res.exit_code == 1, res.output  # nothing to compare
    assert "model shape incomplete: no hidden (needs" in " ".join(res.output.split())


def test_nothing_fits_says_how_many_more_gpus_the_state_needs() -> None:
    """`sim memory` of Llama-3-70B on two V100s said "no single change of dist_opt,
    recompute, b, tp, pp fits" and no more; it now says what the model state alone asks:
    100 GiB of state on a 16 GiB GPU is 6.25x, so at least 7x the GPUs (ceil), an
    estimate; a state that fits says to combine changes."""
    gib = 2.0**30
    text = Advice("optimizer", 90 * gib, state_bytes=100 * gib, capacity_bytes=16 * gib).text()
    assert "no single change" in text and "is 100.00 GiB, 6.2x the 16.00 GiB" in text, text
    assert "at least 7x the GPUs" in text and "an estimate" in text, text
    text = Advice("activations", 9 * gib, state_bytes=8 * gib, capacity_bytes=16 * gib).text()
    assert text.endswith("is 8.00 GiB of 16.00: combine changes"), text


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("traces/gpt2-1.5b.csv", "is a CSV file, not an experiment"),
        ("examples/hf/tiny-llama-config.json", "is a Hugging Face config.json, not an experiment"),
    ],
)
def test_a_trace_or_config_json_given_as_the_experiment_says_where_it_goes(given, says) -> None:
    """`sim run traces/gpt2-1.5b.csv` said "the experiment must be a YAML mapping"; `sim run
    config.json` "field 'name': required field is missing (and 22 more problems...)". Both
    now say what the file is and where it goes (a model's trace: in an experiment)."""
    for command in ("run", "memory"):
        res = _run(command, ROOT / given)
        text = _refused(res, given.rsplit("/", 1)[-1], says, "trace")
        assert "required field" not in text, text


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["run", "x.yaml", "-j", "-1"], "'--jobs' / '-j': must be >= 0, got -1"),
        (["run", "x.yaml", "--format", "yaml"], "'yaml' is not one of 'table', 'csv', 'json'"),
        (["schedule", "show", "1f1b", "-p", "0", "-m", "2"], "must be >= 1, got 0"),
    ],
)
def test_an_option_out_of_range_is_said_in_our_words(args, says) -> None:
    """typer 0.29 printed pydantic's words for an option's value: "Input should be greater
    than or equal to 0", "Value error, 'yaml' is not one of ..."."""
    res = _run(*args)
    text = _refused(res, says)
    assert "Input should" not in text and "Value error" not in text, text


def test_an_unknown_replay_schedule_names_the_option_as_typed() -> None:
    """`sim validate W -s gpipe -s 1f1` named "option '--schedule (2.)'"; it is now the
    option as typed (the message names the value)."""
    experiment = ROOT / "experiments" / "cpu-gpt-tiny.yaml"
    res = _run("validate", experiment, "-s", "gpipe", "-s", "1f1")
    text = _refused(res, "option '--schedule': unknown schedule '1f1' (did you mean '1f1b'?)")
    assert "(2.)" not in text, text


def test_a_models_own_layout_that_cannot_fit_names_the_model_entry(tmp_path) -> None:
    """A model entry with stages 3, tensor_parallel 2, dp_width 2 on 8 GPUs (12) was
    reported at "field 'sweep'", a key the file did not have; it now names models.0. A
    sweep's own layout still names the sweep."""
    exp = tmp_path / "e.yaml"
    exp.write_text(
        "name: x\nhardware: dgx-h100\nmodels:\n  - name: a\n    trace: gpt2-1.5b\n"
        "    global_batch: 64\n    stages: 3\n    tensor_parallel: 2\n    dp_width: 2\n"
    )
    res = _run("run", exp, "--out", tmp_path / "out", "--no-plots")
    _refused(res, "e.yaml: field 'models.0' (line 4)", "= 12 exceeds the 8 GPUs of dgx-h100")
    exp.write_text(
        "name: x\nhardware: dgx-h100\nmodels:\n  - name: a\n    trace: gpt2-1.5b\n"
        "    global_batch: 64\nsweep:\n  stages: 4\n  dp_width: 4\n"
    )
    res = _run("run", exp, "--out", tmp_path / "out", "--no-plots")
    _refused(res, "e.yaml: field 'sweep'", "= 16 exceeds the 8 GPUs of dgx-h100")
    assert not (tmp_path / "out").exists()


def test_a_config_json_of_an_unsupported_type_says_what_to_do_instead(tmp_path) -> None:
    """A BERT or T5 config.json was told the supported model types only; it now also says
    how such a model gets a trace (sim profile --model FILE.py:FUNC, --kind bert)."""
    cfg = json.loads((ROOT / "examples" / "hf" / "tiny-llama-config.json").read_text())
    cfg["model_type"], cfg["architectures"] = "bert", ["BertForMaskedLM"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    res = _run("trace", "from-config", path, "--seq-len", 64, "--out", tmp_path / "t")
    _refused(res, "config.json: field 'model_type'", "'bert' is not supported",
             "sim profile --model FILE.py:FUNC", "sim profile --kind bert")  # fmt: skip


def test_ctrl_c_says_no_file_is_half_written(capsys) -> None:
    """Ctrl-C in `sim memory` or `sim compare` left the progress line and exited 130 without
    a word (typer's handler), while `sim run` says what it keeps; every command now says
    that no file is half-written (each is written to a temporary file, then renamed)."""

    @friendly
    def cmd() -> None:
        raise KeyboardInterrupt

    with pytest.raises(typer.Exit) as done:
        cmd()
    assert done.value.exit_code == 130
    said = " ".join(capsys.readouterr().err.split())
    assert "interrupted: no output file is left half-written" in said, said


@pytest.mark.parametrize("command", ["compare", "import"])
def test_a_folder_or_an_experiment_given_as_a_run_says_what_it_is(tmp_path, command) -> None:
    """A folder of logs given to `sim compare` was "not found"; a pipesim experiment "not a
    Megatron-Bridge config: no 'model' section". Both now say what they are."""
    (tmp_path / "runs").mkdir()
    res = _run(command, tmp_path / "runs", "--gpu", "A100", "--out", tmp_path / "out")
    _refused(res, "runs: is a folder: give the run files in it")
    (tmp_path / "runs" / "empty.csv").write_text("")
    res = _run(command, tmp_path / "runs" / "empty.csv", "--out", tmp_path / "out")
    _refused(res, "empty.csv: is empty")  # was "cannot read it as CSV (No columns to parse...)"
    res = _run(command, ROOT / "experiments" / "dgx1.yaml", "--gpu", "A100",
               "--out", tmp_path / "out")  # fmt: skip
    text = _refused(res, "dgx1.yaml: is a pipesim experiment, not a measured run")
    assert "no 'model' section" not in text, text
    assert not (tmp_path / "out").exists()


def test_an_experiment_given_as_hardware_or_trace_says_what_it_is() -> None:
    """`sim hardware show experiments/dgx1.yaml` listed six unknown keys and three missing
    fields; `sim trace show` / `sim partition` of it said "unknown key(s) ['description',
    ...]" (a Python list). Both now say it is an experiment and name what it uses."""
    exp = ROOT / "experiments" / "dgx1.yaml"
    res = _run("hardware", "show", exp)
    text = _refused(res, "dgx1.yaml: is a pipesim experiment, not a hardware description",
                    "sim hardware show dgx1-v100-16gb")  # fmt: skip
    assert "unknown key" not in text, text
    for args in (["trace", "show", exp], ["partition", exp, "-p", 2]):
        res = _run(*args)
        text = _refused(res, "is a pipesim experiment, not a trace: its traces are gnmt16, gpt2")
        assert "['" not in text, text


def test_another_experiment_into_a_run_folder_is_refused(tmp_path) -> None:
    """`sim run b.yaml --out results/a` replaced experiment a's results (winner.yaml, its
    plots) with b's, without a word: the folder was "written by an earlier sim run". The
    manifest now names the experiment; another one is refused, the same one replaces."""

    def exp(name: str) -> Path:
        path = tmp_path / f"{name}.yaml"
        path.write_text(
            f"name: {name}\nhardware: dgx1-v100-16gb\nmodels:\n  - name: g\n    trace: gnmt16\n"
            "    global_batch: 64\nsweep: {stages: 2, schedule: 1f1b, microbatch_size: 16}\n"
        )
        return path

    out = tmp_path / "out"
    assert _run("run", exp("a"), "--out", out, "--no-plots").exit_code == 0
    before = (out / "results.csv").read_bytes()
    res = _run("run", exp("b"), "--out", out, "--no-plots")
    _refused(res, "option '--out'", "holds the results of experiment 'a'", "'b' would replace")
    assert (out / "results.csv").read_bytes() == before
    res = _run("run", tmp_path / "a.yaml", "--out", out, "--no-plots")
    assert res.exit_code == 0, res.output


def test_import_does_not_overwrite_an_edited_experiment(tmp_path) -> None:
    """A second `sim import` of a log into the same folder replaced the experiment YAML the
    user had edited since, without a word; it now refuses (exit 2, nothing written), and a
    rerun onto an unedited folder still succeeds."""
    log = RUNS / "megatron_llama_tp2_pp2.log"
    out = tmp_path / "imp"
    assert _run("import", log, "--gpu", "A100", "--out", out).exit_code == 0
    exp = out / "megatron_llama_tp2_pp2.yaml"
    assert _run("import", log, "--gpu", "A100", "--out", out).exit_code == 0  # unedited
    edited = exp.read_text() + "# my change\n"
    exp.write_text(edited)
    res = _run("import", log, "--gpu", "A100", "--out", out)
    _refused(res, "option '--out'", "megatron_llama_tp2_pp2.yaml exists and differs")
    assert exp.read_text() == edited


def test_from_config_does_not_replace_a_measured_trace(tmp_path) -> None:
    """`sim trace from-config config.json -o traces/gnmt16` replaced PipeDream's measured
    profile with an analytic estimate, without a word; it now refuses. An analytic trace
    is still replaced (a rerun)."""
    for suffix in (".csv", ".yaml"):
        (tmp_path / f"gnmt16{suffix}").write_text((ROOT / "traces" / f"gnmt16{suffix}").read_text())
    cfg = ROOT / "examples" / "hf" / "tiny-llama-config.json"
    res = _run("trace", "from-config", cfg, "--seq-len", 64, "--out", tmp_path / "gnmt16")
    _refused(res, "option '--out'", "gnmt16.csv holds a measured trace (github.com/msr-fiddle")
    assert (tmp_path / "gnmt16.csv").read_text() == (ROOT / "traces" / "gnmt16.csv").read_text()
    for _ in range(2):
        res = _run("trace", "from-config", cfg, "--seq-len", 64, "--out", tmp_path / "t")
        assert res.exit_code == 0, res.output


def test_the_winners_band_says_where_it_comes_from_under_quiet(tmp_path) -> None:
    """`sim run -q` prints only the winner lines: "947.80 samples/s (band 903.9–1,127.1)"
    with no caption saying what the band is; the line now names it."""
    exp = tmp_path / "e.yaml"
    exp.write_text(
        "name: e\nhardware: dgx1-v100-16gb\nmodels:\n  - name: g\n    trace: gnmt16\n"
        "    global_batch: 64\nsweep: {stages: 2, schedule: 1f1b, microbatch_size: 16}\n"
    )
    res = _run("run", exp, "--out", tmp_path / "out", "--no-plots", "-q")
    assert res.exit_code == 0, res.output
    line = next(s for s in res.output.splitlines() if "samples/s (band" in s)
    assert ": p10–p90 of measured/predicted, " in line and "(n=" in line, line


def test_a_misspelt_gpu_of_a_run_suggests_the_gpu(tmp_path) -> None:
    """`sim import run.log --gpu H10` said "GPU 'H10': no preset matches it"; it now names
    the GPU it misspells."""
    res = _run("import", RUNS / "megatron_llama_tp2_pp2.log", "--gpu", "H10", "--out", tmp_path)
    _refused(res, "GPU 'H10': no preset matches it (did you mean 'H100'?)")


def test_a_sidecar_missing_several_keys_names_them_all(tmp_path) -> None:
    """A hand-written trace sidecar without device and provenance was told "missing: the
    GPU ..." and, once that was added, "missing: where the times come from": a run per key.
    Both are now named at once."""
    (tmp_path / "t.csv").write_text(
        "name,fwd_s,bwd_s,param_bytes,act_bytes,out_bytes\nl0,0.001,0.002,100,100,100\n"
    )
    (tmp_path / "t.yaml").write_text("name: t\nmicrobatch_size: 4\ndtype: fp16\n")
    res = _run("trace", "show", tmp_path / "t.csv")
    _refused(res, "t.yaml: field 'device'", "missing: the GPU the times were measured on",
             "; and provenance: where the times come from")  # fmt: skip
