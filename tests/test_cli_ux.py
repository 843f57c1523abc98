"""A new user's first hour: what ``sim`` says about their input and where its numbers come from
(each test failed before the fix it names)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import sim.api
from sim.cli import app
from sim.config.load import parse_experiment
from sim.errors import InputError
from sim.trace.hf_checks import check_sizes
from sim.trace.loader import load_trace

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def _run(*args):
    return runner.invoke(app, [str(a) for a in args])


def _small_bert(tmp_path: Path, sweep: dict | None = None) -> Path:
    """A small experiment (BERT-large on a DGX-1, global batch 8) written to
    ``tmp_path/exp.yaml``; ``sweep`` replaces its grid (default: gpipe and 1f1b over 2 and 4
    stages, micro-batch 1)."""
    exp = {
        "name": "small",
        "hardware": "dgx1-v100-16gb",
        "models": [{"name": "bert", "trace": "bert-large", "global_batch": 8}],
        "sweep": sweep or {"schedule": ["gpipe", "1f1b"], "stages": [2, 4], "microbatch_size": 1},
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(exp))
    return path


def test_analytic_trace_note_names_the_gpu_it_is_timed_on(tmp_path: Path) -> None:
    """gpt2-1.5b ships generated on a V100; on a DGX H100 it is regenerated there, so the note
    of where its times come from names the H100, not the V100 (it named the V100)."""
    exp = {
        "name": "h100",
        "hardware": "dgx-h100",
        "models": [{"name": "g", "trace": "gpt2-1.5b", "global_batch": 8}],
        "sweep": {"schedule": "1f1b", "stages": 4, "dp_width": 1, "microbatch_size": 1},
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(exp))
    res = _run("run", path, "--out", tmp_path / "out", "--jobs", 1, "--no-plots")
    assert res.exit_code == 0, res.output
    note = next(line for line in res.output.splitlines() if "is analytic" in line)
    assert "on H100" in note and "V100" not in note, note


def test_a_config_json_of_another_family_says_what_is_read() -> None:
    """GPT-2's config.json names its sizes n_embd, n_head, n_layer: the message said only
    "missing field 'hidden_size'", which adding hidden_size does not cure; it now says which
    configs are read and what to do with another model."""
    gpt2 = {"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12, "vocab_size": 50257}
    with pytest.raises(InputError) as err:
        check_sizes(gpt2, "config.json")
    text = str(err.value)
    assert "hidden_size" in text and "Llama-like" in text and "'gpt2'" in text, text
    assert "FILE.py:FUNC" in text, text


def test_a_folder_given_as_the_experiment(tmp_path: Path) -> None:
    """`sim run FOLDER` said "expected a experiment file"."""
    res = _run("run", tmp_path, "--out", tmp_path / "out")
    assert res.exit_code == 2, res.output
    assert "is a directory, expected an experiment file" in res.output, res.output
    assert not (tmp_path / "out").exists()


def test_ctrl_c_says_what_is_kept(tmp_path: Path, monkeypatch) -> None:
    """Ctrl-C mid-sweep ended `sim run` with exit code 130 and not a word; it now says the
    output folder is unchanged and the rows simulated so far are cached for the next run."""

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(sim.api, "run", interrupted)
    res = _run("run", ROOT / "experiments" / "dgx1.yaml", "--out", tmp_path / "out")
    assert res.exit_code == 130, res.output
    assert "interrupted: the output folder is unchanged" in res.output, res.output
    assert ".cache" in res.output and "Traceback" not in res.output


def test_a_rerun_says_it_reused_the_cache(tmp_path: Path) -> None:
    """A second `sim run` into the same folder reads every simulated row from OUT/.cache; the
    planner's line said "N simulated" both times, so the reuse was invisible."""
    path = _small_bert(tmp_path)
    args = ("run", path, "--out", tmp_path / "out", "--jobs", 1, "--no-plots")
    first = _run(*args)
    assert first.exit_code == 0, first.output
    assert "read from the cache" not in first.output, first.output
    resolved = (tmp_path / "out" / "config.resolved.yaml").read_text()
    second = _run(*args)
    assert second.exit_code == 0, second.output
    line = next(x for x in second.output.splitlines() if "planner:" in x)
    simulated = int(line.split(" simulated")[0].rsplit(" ", 1)[1])
    assert f"{simulated} simulated ({simulated} of them read from the cache)" in line, line
    assert (tmp_path / "out" / "config.resolved.yaml").read_text() == resolved


def test_sim_memory_shows_progress(tmp_path: Path) -> None:
    """`sim memory` on a large grid (llama3-70b-64xh100: 92 configurations with advice, about
    a minute on a loaded 2-core machine) printed nothing until it was done; it now reports
    its progress as `sim run` does."""
    path = _small_bert(tmp_path)
    res = _run("memory", path, "--out", tmp_path / "out", "--no-plots")
    assert res.exit_code == 0, res.output
    assert "computing memory: 4/4 configurations (100%)" in res.output, res.output


@pytest.mark.parametrize(
    ("change", "said_before", "says_now"),
    [
        ({"training": "adam"}, "instance of TrainingConfig", "'adam' is not a mapping"),
        ({"sweep": {"stages": 1.5}}, "(and 1 more problem(s))", "1.5 is not an integer or a list"),
        ({"sweep": {"stages": 0}}, "Value error, ", "must be >= 1, got 0"),
    ],
)
def test_experiment_messages_in_a_users_words(change, said_before, says_now) -> None:
    """A wrong type named pydantic's class, a union's other branch counted as a second
    problem, and a validator's message began with pydantic's "Value error, "."""
    exp = {
        "name": "small",
        "hardware": "dgx1-v100-16gb",
        "models": [{"name": "bert", "trace": "bert-large", "global_batch": 8}],
        **change,
    }
    with pytest.raises(InputError) as err:
        parse_experiment(exp, file="exp.yaml")
    assert says_now in str(err.value) and said_before not in str(err.value), str(err.value)


@pytest.mark.parametrize(
    ("in_file", "option", "names"),
    [
        (True, [], ["exp.yaml", "field 'hardware_overlay'", "nope.yaml not found"]),
        (False, ["--hardware-overlay", "nope.yaml"], ["option '--hardware-overlay'", "nope.yaml"]),
    ],
)
def test_a_missing_hardware_overlay_names_where_it_was_given(
    tmp_path: Path, monkeypatch, in_file, option, names
) -> None:
    """A missing overlay said only "nope.yaml: hardware overlay not found", naming neither the
    experiment's field nor the option that gave it."""
    monkeypatch.chdir(tmp_path)
    exp = {
        "name": "small",
        "hardware": "dgx1-v100-16gb",
        "models": [{"name": "bert", "trace": "bert-large", "global_batch": 8}],
        "sweep": {"schedule": "1f1b", "stages": 2, "microbatch_size": 1},
        **({"hardware_overlay": "nope.yaml"} if in_file else {}),
    }
    Path("exp.yaml").write_text(yaml.safe_dump(exp))
    res = _run("run", "exp.yaml", "--out", "out", *option)
    assert res.exit_code == 2, res.output
    assert all(n in res.output for n in names), res.output
    assert not Path("out").exists()


def test_sim_memory_table_states_its_unit_and_columns(tmp_path: Path) -> None:
    """The table of `sim memory` printed 15.24, 15.41, 15.81 against 15.78 with no unit and no
    word on what allocated, reserved, device and capacity are."""
    path = _small_bert(tmp_path, {"schedule": "1f1b", "stages": 2, "microbatch_size": 1})
    res = _run("memory", path, "--out", tmp_path / "out", "--no-plots")
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "peak memory per GPU, GiB" in text, res.output
    assert "allocated: torch.cuda.max_memory_allocated" in text, res.output
    assert "capacity: the GPU's memory as CUDA reports it" in text, res.output


def test_the_getting_started_experiment_loads() -> None:
    """docs/getting-started.md's "your own experiment" named trace llama3-8b, which is not
    shipped (`sim run` of the copied block ended in "trace 'llama3-8b' not found")."""
    text = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    block = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    exp = parse_experiment(yaml.safe_load(block), file="getting-started.md")
    for model in exp.models:
        assert load_trace(model.trace).layers, model.trace
