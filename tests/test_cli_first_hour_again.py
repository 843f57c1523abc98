"""A newcomer's first hour with ``sim``, walked again (session 14): what the console said
that the JSON did not, a table that repeated the answer, a ``--gpu`` that took only presets,
and the small frictions found on the way (each test failed before its fix)."""

from __future__ import annotations

import io
import json
import multiprocessing as mp
import os
import signal
import time
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console
from typer.testing import CliRunner

from sim.cli import app
from sim.plan.executors import _forked, _init_worker
from sim.report.memory_summary import memory_summary
from sim.report.note_merge import merge_by_microbatch
from sim.report.policy_table import policies_shown, policy_table
from sim.trace.loader import load_trace

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "examples" / "hf" / "tiny-llama-config.json"
runner = CliRunner()


def _run(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.mark.parametrize(
    ("gpu", "device"),
    [("H100-SXM5-80GB", "H100-SXM5-80GB"), ("B200", "B200-SXM-180GB"),
     ("A100 80GB", "A100-SXM4-80GB"), ("gh200", "GH200-96GB"), ("dgx-h200", "H200-SXM-141GB")],
)  # fmt: skip
def test_trace_from_config_takes_a_gpu_name(tmp_path, gpu, device) -> None:
    """``--gpu`` took only preset names: 'B200' was "unknown hardware preset"; a GPU model or
    the name a datasheet gives now picks the preset with that GPU ('gh200' the GH200, not
    the H200 its name contains), and a note says which."""
    res = _run("trace", "from-config", TINY, "--seq-len", 64, "--out", tmp_path / "t", "--gpu", gpu)
    assert res.exit_code == 0, res.output
    assert load_trace(tmp_path / "t.csv").device == device
    assert ("the GPU of preset" in res.output) == (gpu != "dgx-h200"), res.output


def test_trace_from_config_lists_the_gpus_for_an_unknown_one(tmp_path) -> None:
    """An unknown ``--gpu`` names the option, every preset and every GPU model it takes."""
    res = _run(
        "trace", "from-config", TINY, "--seq-len", 64, "--out", tmp_path / "t", "--gpu", "X9"
    )
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())
    assert "option '--gpu': 'X9' is neither a hardware preset nor the GPU of one" in text, text
    assert "dgx-b200" in text and "B200-SXM-180GB" in text and "RTX-4090-24GB" in text, text
    assert not (tmp_path / "t.csv").exists()


def _policy_rows(*rows: tuple) -> pd.DataFrame:
    """``(model, parameters, memory_policy, fits, samples/s)`` rows of results.csv."""
    keys = ("model", "parameters", "memory_policy", "fits", "throughput_samples_per_s")
    return pd.DataFrame([dict(zip(keys, r, strict=True)) for r in rows])


def _text(table) -> str:
    console = Console(width=100, record=True, file=io.StringIO())
    console.print(table)
    return console.export_text()


def test_one_models_policy_table_is_a_row_per_policy() -> None:
    """One model over three policies printed a model row (its parameters, fastest policy and
    samples/s: the winner again) and "largest model that fits | — | — | — | m | m"; it is
    now a row per policy, fastest first, with how much slower each is (30 / 40 - 1 = -25 %),
    and a policy that fits nowhere says so."""
    df = _policy_rows(
        ("m", 1e9, "none", False, 50.0),
        ("m", 1e9, "recompute", True, 30.0),
        ("m", 1e9, "dist_opt", True, 40.0),
    )
    text = _text(policy_table(memory_summary(df)))
    lines = [line.split() for line in text.splitlines()]
    assert ["dist_opt", "40.00", "fastest"] in lines, text
    assert ["recompute", "30.00", "-25.0", "%"] in lines, text
    assert ["none", "none", "fits"] in lines, text
    assert "largest model" not in text and "1,000,000,000" not in text, text


def test_policy_table_left_out_when_the_best_configurations_show_each_policy() -> None:
    """``sim run`` of one model printed the policy table even when the table of its best
    configurations already showed each policy's best; it is left out then (and shown when a
    policy's best is below the rows shown, or a policy fits nowhere)."""
    df = _policy_rows(
        ("m", 1e9, "dist_opt", True, 40.0),
        ("m", 1e9, "dist_opt", True, 39.0),
        ("m", 1e9, "recompute", True, 30.0),
    )
    assert policies_shown(df, top=5) and policies_shown(df, top=3)
    assert not policies_shown(df, top=2)  # recompute's 30.0 is the third row
    assert not policies_shown(pd.concat([df, _policy_rows(("m", 1e9, "none", False, 50.0))]), 5)


def test_several_models_policy_table_says_nothing_twice() -> None:
    """With several models, the last row ("largest model that fits") printed — under
    parameters, fastest policy and samples/s; those cells are now blank, and when every
    policy fits the same largest model the row is one caption line."""
    both = [("a", 1e9, "none", True, 10.0), ("a", 1e9, "recompute", True, 8.0),
            ("b", 2e9, "none", True, 5.0), ("b", 2e9, "recompute", True, 4.0)]  # fmt: skip
    text = _text(policy_table(memory_summary(_policy_rows(*both))))
    assert "largest model that fits: b, under every policy" in text, text
    assert "largest model that fits per policy" not in text, text
    both[2] = ("b", 2e9, "none", False, 5.0)  # none fits a, recompute fits b
    text = _text(policy_table(memory_summary(_policy_rows(*both))))
    last = next(line for line in text.splitlines() if line.startswith("largest"))
    assert last.split() == ["largest", "model", "that", "fits", "a", "b"], text


def test_run_json_carries_every_note_the_console_shows(tmp_path) -> None:
    """``sim run --format json`` printed the rows only: the warning that gpu.memory 75 GiB
    was replaced by the H100's CUDA total and the winner's reserve were on the console and
    nowhere in the JSON; it is now ``{"rows": [...], "notes": [...]}`` with each of them
    (``--json`` is ``--format json``, as in ``sim hardware show --json``)."""
    exp = tmp_path / "exp.yaml"
    exp.write_text(
        "name: x\nhardware: {base: dgx-h100, gpu: {memory: 75 GiB}}\n"
        "models: [{name: bert, trace: bert-large, global_batch: 8}]\n"
        "sweep: {schedule: 1f1b, stages: 2, dp_width: 1, microbatch_size: 4}\n"
    )
    res = _run("run", exp, "--out", tmp_path / "o", "--no-plots", "-j", 1, "--json")
    assert res.exit_code == 0, res.output
    said = json.loads(res.stdout)
    assert len(said["rows"]) == 1 and said["rows"][0]["model"] == "bert"
    warnings = [n["text"] for n in said["notes"] if n["level"] == "warning"]
    assert any(t.startswith("gpu.memory 75.00 GiB is within 10 %") for t in warnings), said
    notes = [n["text"] for n in said["notes"] if n["level"] == "note"]
    assert any(t.startswith("bert winner: reserve at gpu") for t in notes), said
    assert any(t.startswith("planner: 1 configuration") for t in notes), said
    logged = [line.split(": ", 1) for line in res.stderr.splitlines()]
    shown = {text for level, *text in logged if level in ("note", "warning") for text in text}
    assert shown and shown <= {n["text"] for n in said["notes"]}, (shown, said["notes"])


def test_memory_json_carries_the_rows_and_the_warnings(tmp_path) -> None:
    """``sim memory`` had no JSON: its gpu.memory warning reached stderr only. ``--json``
    prints ``{"rows": memory.csv's rows, "notes": [{"level", "text"}]}`` and nothing else on
    standard output."""
    exp = tmp_path / "exp.yaml"
    exp.write_text(
        "name: x\nhardware: {base: dgx-h100, gpu: {memory: 75 GiB}}\n"
        "models: [{name: bert, trace: bert-large, global_batch: 8}]\n"
        "sweep: {schedule: 1f1b, stages: 2, dp_width: 1, microbatch_size: 4}\n"
    )
    res = _run("memory", exp, "--out", tmp_path / "o", "--no-plots", "--json")
    assert res.exit_code == 0, res.output
    said = json.loads(res.stdout)
    # one configuration, two pipeline ranks: memory.csv's two rows
    assert len(said["rows"]) == 2 and {r["model"] for r in said["rows"]} == {"bert"}
    warnings = [n["text"] for n in said["notes"] if n["level"] == "warning"]
    assert any(t.startswith("gpu.memory 75.00 GiB is within 10 %") for t in warnings), said


@pytest.mark.parametrize("group", [[], ["trace"], ["hardware"], ["schedule"]])
def test_help_lists_each_command_in_one_uncut_line(group) -> None:
    """``sim --help`` at 80 columns cut most commands' summaries mid-sentence ("run  Simulate
    every configuration of an experiment's grid and...", "trace  ... import a..."); each
    now has a summary that fits."""
    res = runner.invoke(app, [*group, "--help"], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    listed = res.output.split("Commands:")[1].splitlines()[1:]
    assert listed and all(len(line) <= 80 for line in listed), res.output
    assert not any(line.rstrip().endswith("...") for line in listed), res.output
    assert all(line.startswith("  ") and len(line.split()) > 2 for line in listed), res.output


def test_a_second_problem_in_the_experiment_is_named(tmp_path) -> None:
    """A key misspelt in both models was answered for the first "(and 1 more problem(s))":
    fixing it led to a second run and the second error; the message now names where the
    others are."""
    exp = tmp_path / "exp.yaml"
    exp.write_text(
        "name: x\nhardware: dgx-h100\nmodels:\n"
        "  - {name: a, trace: bert-large, global_batch: 8, microbatch_sizes: [1]}\n"
        "  - {name: b, trace: bert-large, global_batch: 8, microbatch_sizes: [2]}\n"
    )
    res = _run("run", exp, "--out", tmp_path / "o")
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())
    assert "field 'models.0.microbatch_sizes' (line 4)" in text, text
    assert "(and 1 more problem, at field 'models.1.microbatch_sizes')" in text, text
    assert not (tmp_path / "o").exists()


RUNS = ROOT / "tests" / "data" / "runs"
ARGV = (
    "torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size 2 "
    "--pipeline-model-parallel-size 2 --num-layers 32 --hidden-size 4096 "
    "--num-attention-heads 32 --seq-length 4096 --max-position-embeddings 4096 "
    "--micro-batch-size 1 --global-batch-size 64 --bf16 --vocab-size 32000"
)


def test_import_of_a_long_command_in_quotes_is_read_as_a_command(tmp_path) -> None:
    """A Megatron launch command over 255 characters, in quotes as the help says, was
    answered "File name too long" (exit 1): the reader asked the file system whether it was a
    file, which raises for such a name; it is now read as the command."""
    assert len(ARGV) > 255
    res = _run("import", ARGV, "--gpu", "H100", "--out", tmp_path)
    assert res.exit_code == 0, res.output
    assert "<command>: 12 arguments" in res.output, res.output
    assert (tmp_path / "pretrain_gpt.yaml").is_file()


def test_import_without_a_gpu_says_to_give_one(tmp_path) -> None:
    """A launch script that names no GPU was refused with "GPU '': no preset matches it";
    it now says the files do not name it and to give --gpu."""
    res = _run("import", RUNS / "megatron_llama3_70b_64xh100.sh", "--out", tmp_path)
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())
    assert "GPU not named by the run's files: give it with --gpu (e.g. H100" in text, text
    assert "GPU ''" not in text, text


def test_torchtitan_shard_degree_minus_one_says_what_it_assumed(tmp_path) -> None:
    """torchtitan's ``data_parallel_shard_degree = -1`` (every GPU left) without ``--gpus``
    was read as 1 GPU and reported "mapped | layout"; it is now "approximated", with the GPU
    count assumed and how to give it, and with ``--gpus 8`` it is 8 (FSDP over 8)."""
    toml = RUNS / "torchtitan_llama3_8b.toml"
    res = _run("import", toml, "--gpu", "H100", "--out", tmp_path / "a")
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "assumed parallelism.data_parallel_shard_degree: -1 is every GPU" in text, text
    assert "1 assumed (give --gpus N)" in text, text
    res = _run("import", toml, "--gpu", "H100", "--gpus", 8, "--out", tmp_path / "b")
    assert res.exit_code == 0 and "assumed" not in res.output, res.output
    assert "dp_width: 8" in (tmp_path / "b" / "torchtitan_llama3_8b.yaml").read_text()


@pytest.mark.parametrize(("command", "metavar"), [("import", "SOURCE"), ("compare", "SOURCE")])
def test_help_names_the_arguments_in_capitals(command, metavar) -> None:
    """``sim import --help`` and ``sim compare --help`` showed "{sources}..." and "sources...
    <list[str]>" (the Python parameter's name) where every other command shows its argument
    in capitals (EXPERIMENT, CONFIG)."""
    res = runner.invoke(app, [command, "--help"], env={"COLUMNS": "100"})
    assert res.exit_code == 0, res.output
    assert f"{{{metavar}}}..." in res.output.splitlines()[0], res.output
    assert "sources" not in res.output, res.output


def test_compare_with_nothing_to_compare_prints_no_empty_table(tmp_path) -> None:
    """``sim compare LOG`` of a log that names no GPU printed an empty table captioned
    "predicted ... on -, from - traces; band: -", the reason cut at its first "; ", and
    "1 runs", "1 run(s)" and exited 0; now the reason whole, no table, "1 run", and exit code 1
    (nothing was compared: a script must see it)."""
    res = _run("compare", RUNS / "megatron_llama_tp2_pp2.log", "--out", tmp_path, "--no-plot")
    assert res.exit_code == 1, res.output
    text = " ".join(res.output.split())
    assert "predicted against measured" not in text and "on -, from -" not in text, text
    assert "give it with --gpu (e.g. H100, B200 or A100-SXM-80GB, as sim hardware" in text, text
    assert "1 run, 0 expressed" in text and "1 run not expressed" in text, text


def _worker_interrupted() -> None:
    """A pool worker's start, then the SIGINT a terminal's Ctrl-C sends the whole group."""
    _forked(os.getppid(), _init_worker, (None,))  # what forked_pool's workers run first
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.05)  # the signal is handled (or not) by now


def test_ctrl_c_leaves_the_pool_workers_quiet() -> None:
    """Ctrl-C of ``sim run`` printed, under "interrupted: the output folder is unchanged",
    each worker's ``KeyboardInterrupt`` traceback of its queue read; a worker now ignores
    SIGINT (its parent stops the pool), so it ends normally (exit code 0, not 1)."""
    proc = mp.get_context("fork").Process(target=_worker_interrupted)
    proc.start()
    proc.join(5)
    assert proc.exitcode == 0


def test_notes_alike_but_for_the_microbatch_size_are_said_once() -> None:
    """``sim run experiments/qwen3-30b-a3b-b200.yaml`` noted "generated trace regenerated by
    the compute model at b=1 on B200-SXM-180GB (was H100-SXM5-80GB)" and the same at b=2, one
    line per size tried; the console now says it once, with the sizes."""
    lines = [
        "q: generated trace regenerated by the compute model at b=1 on B200 (was H100)",
        "q: generated trace regenerated by the compute model at b=2 on B200 (was H100)",
        "q: trace q is analytic, not measured",
        "g: b=16 is outside the measured b=64",
        "g: b=32 is outside the measured b=64",
    ]
    assert merge_by_microbatch(lines) == [
        "q: generated trace regenerated by the compute model at b=1, 2 on B200 (was H100)",
        "q: trace q is analytic, not measured",
        "g: b=16, 32 is outside the measured b=64",
    ]


def test_a_missing_vocabulary_is_asked_for_not_ignored(tmp_path) -> None:
    """A Megatron command without ``--vocab-size`` (and no tokenizer) was answered
    "1 argument(s) change the answer ...: vocab-size = : no vocabulary; give --vocab-size. Pass
    --ignore NAME for each to run without it": an empty value, and advice that cannot work
    (ignored, the model has no vocabulary); it now says the argument is not given, to add it."""
    argv = ARGV.replace(" --vocab-size 32000", "")
    res = _run("import", argv, "--gpu", "H100", "--out", tmp_path)
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())
    assert "1 argument changes the answer" in text and "vocab-size not given" in text, text
    assert "Add each one not given to the command or config" in text, text
    assert "--ignore" not in text and "vocab-size = :" not in text, text


def test_partition_table_says_what_its_columns_are() -> None:
    """``sim partition`` printed time, comm and memory with no word of what they count (per
    micro-batch of how many samples? memory against what?); its caption now says it: one
    micro-batch of the trace's size, the trace's origin, the memory model and the capacity
    (V100-SXM2-16GB: 16,160 MiB as CUDA reports it = 15.78 GiB)."""
    res = runner.invoke(
        app, ["partition", "gnmt16", "-p", "2", "--hardware", "dgx1-v100-16gb"],
        env={"COLUMNS": "200"},
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "forward + backward of one micro-batch (64 samples) from trace gnmt16 (measured)" in text
    assert "8 x the parameter bytes" in text, text
    assert "against 15.78 GiB per GPU (dgx1-v100-16gb, as CUDA reports it)" in text, text
