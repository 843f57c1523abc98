"""A new user's first hour: what ``sim`` says about their input and where its numbers come from
(each test failed before the fix it names)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

import sim.api
import sim.run
from sim.cli import app
from sim.config.load import parse_experiment
from sim.errors import InputError
from sim.plan.memory_grid import Advice
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
    grid = {"schedule": ["gpipe", "1f1b"], "stages": [2, 4], "microbatch_size": 1}
    return _write_exp(tmp_path, _small_bert_exp({"sweep": sweep or grid}))


def _small_bert_exp(change: dict) -> dict:
    """The small experiment (BERT-large on a DGX-1, global batch 8, no sweep) as a mapping,
    with ``change``'s keys added after its own (or replacing them)."""
    return {
        "name": "small",
        "hardware": "dgx1-v100-16gb",
        "models": [{"name": "bert", "trace": "bert-large", "global_batch": 8}],
        **change,
    }


def _parse_error(change: dict) -> str:
    """The :class:`InputError` message that ``parse_experiment`` raises for the small
    experiment with ``change`` (as file ``exp.yaml``)."""
    with pytest.raises(InputError) as err:
        parse_experiment(_small_bert_exp(change), file="exp.yaml")
    return str(err.value)


def _write_exp(tmp_path: Path, exp: dict) -> Path:
    """``exp`` written to ``tmp_path/exp.yaml``."""
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
    path = _write_exp(tmp_path, exp)
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
        ({"sweep": {"stages": 1.5}}, "1 more problem", "1.5 is not an integer or a list"),
        ({"sweep": {"stages": 0}}, "Value error, ", "must be >= 1, got 0"),
    ],
)
def test_experiment_messages_in_a_users_words(change, said_before, says_now) -> None:
    """A wrong type named pydantic's class, a union's other branch counted as a second
    problem, and a validator's message began with pydantic's "Value error, "."""
    text = _parse_error(change)
    assert says_now in text and said_before not in text, text


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
    exp = _small_bert_exp(
        {
            "sweep": {"schedule": "1f1b", "stages": 2, "microbatch_size": 1},
            **({"hardware_overlay": "nope.yaml"} if in_file else {}),
        }
    )
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


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        ({"models": [{"name": "b", "trace": "bert-large", "globl_batch": 8}]},
         "models.0.globl_batch", "did you mean 'global_batch'?"),
        ({"training": {"optimiser": "adam"}}, "training.optimiser", "did you mean 'optimizer'?"),
        ({"sweeep": {}}, "sweeep", "did you mean 'sweep'?"),
        ({"models": []}, "models", "needs at least one entry, got none"),
    ],
)  # fmt: skip
def test_a_misspelt_key_is_answered_with_the_key_it_resembles(change, field, says) -> None:
    """An unknown key said "unknown key (... see `sim run --help`)", whose help lists no key,
    and an empty models list said pydantic's "List should have at least 1 item after
    validation, not 0"; the message now names the closest key and the keys allowed there."""
    text = _parse_error(change)
    assert f"exp.yaml: field '{field}'" in text and says in text, text
    assert "sim run --help" not in text and "List should" not in text, text


def test_a_typo_in_a_trace_or_schedule_name_suggests_the_name(tmp_path: Path) -> None:
    """`trace: bert-larg` listed 60 names with no hint, and a schedule typo listed 10 with
    their aliases; both now say which name was probably meant (as a preset typo does)."""
    with pytest.raises(InputError) as err:
        load_trace("bert-larg", file="exp.yaml", field="models.0.trace")
    assert "(did you mean 'bert-large'?)" in str(err.value), str(err.value)
    with pytest.raises(InputError) as err:  # a path to a shipped trace, from another folder
        load_trace("../traces/gpt-tiny-cpu.csv", base_dir=tmp_path)
    assert "(did you mean 'gpt-tiny-cpu'?)" in str(err.value), str(err.value)
    path = _small_bert(tmp_path, {"schedule": "interleaved_1fb1", "stages": 2})
    res = _run("memory", path, "--out", tmp_path / "out")
    assert res.exit_code == 2, res.output
    assert "field 'sweep.schedule.0'" in res.output, res.output
    assert "(did you mean 'interleaved_1f1b'?)" in res.output, res.output


@pytest.mark.parametrize(
    ("args", "names", "not_named"),
    [
        (["schedule", "show", "1f1bb", "-p", "4", "-m", "8"], "argument 'NAME'", "'--stages'"),
        (["schedule", "show", "1f1b", "-p", "4", "-m", "2"], "option '--microbatches'",
         "sweep.stages"),
        (["hardware", "show", "h100"], "command line: argument 'NAME'", "'hardware'"),
    ],
)  # fmt: skip
def test_a_command_names_its_own_argument(args, names, not_named) -> None:
    """`sim schedule show 1f1bb` blamed option '--stages' for the name, `-m 2 < -p 4` blamed
    an experiment's field 'sweep.stages' and `sim hardware show h100` a field 'hardware':
    none of which the user typed."""
    res = _run(*args)
    assert res.exit_code == 2, res.output
    assert names in res.output and not_named not in res.output, res.output


def test_the_comparison_plot_leaves_nothing_when_drawing_fails(tmp_path: Path, monkeypatch):
    """compare.scatter saved into a fixed '.NAME.tmp.png' beside the plot and renamed it: a
    failure mid-save left that file behind (and two runs shared its name); it now draws into
    memory and writes through sim.atomic."""
    import matplotlib.figure
    import pandas as pd

    from sim.compare import scatter

    def broken(self, fname, **kw):
        if hasattr(fname, "write"):
            fname.write(b"\x89PNG partial")
        else:
            Path(fname).write_bytes(b"\x89PNG partial")
        raise OSError("disk full")

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", broken)
    df = pd.DataFrame(
        {"measured_time_s": [1.0], "predicted_time_s": [1.1], "measured_memory_bytes": [None],
         "predicted_memory_bytes": [None], "framework": ["megatron"]}
    )  # fmt: skip
    with pytest.raises(OSError):
        scatter(df, tmp_path / "compare.png")
    assert list(tmp_path.iterdir()) == []


def test_an_expert_parallel_grid_with_no_room_says_what_to_change(tmp_path: Path) -> None:
    """Mixtral with expert_parallel 2 on p=4 x t=2 of 8 GPUs (dp_width 1) said only
    "expert_parallel 2 must divide dp_width x context_parallel = 1"; it now names the change."""
    exp = {
        "name": "moe",
        "hardware": "dgx-h100",
        "models": [{"name": "m", "trace": "mixtral-8x7b", "global_batch": 8}],
        "sweep": {"schedule": "1f1b", "stages": 4, "tensor_parallel": 2, "expert_parallel": 2},
    }
    path = _write_exp(tmp_path, exp)
    res = _run("memory", path, "--out", tmp_path / "out")
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())
    assert "field 'sweep'" in text and "raise dp_width or lower expert_parallel" in text, text


@pytest.mark.parametrize("command", ["run", "memory"])
def test_the_experiment_argument_is_named_alike(command) -> None:
    """`sim memory` without its argument said "Missing argument 'experiment'" and its help
    `{experiment}`, where `sim run` says EXPERIMENT."""
    res = _run(command)
    assert res.exit_code == 2 and "Missing argument 'EXPERIMENT'" in res.output, res.output


def test_compare_with_nothing_compared_prints_no_nan(tmp_path: Path) -> None:
    """`sim compare` of a file with no usable run printed "MAPE nan%, signed +nan%"; with
    nothing compared the error is n/a, the reason listed above it."""
    log = tmp_path / "launch.sh"  # a command of no known GPU: listed, not expressed
    log.write_text("python pretrain_gpt.py --num-layers 2\n")
    res = _run("compare", log, "--out", tmp_path / "o", "--no-plot")
    text = " ".join(res.output.split())
    assert "nan%" not in text and "0 compared, MAPE n/a, signed n/a" in text, text
    assert "not expressed" in text, text


@pytest.mark.parametrize("command", ["import", "compare"])
def test_a_file_that_is_no_run_is_named_as_such(tmp_path: Path, command) -> None:
    """A file of neither command, config nor log was read as a launch command: `sim import`
    said "option '--vocab-size': ... give --vocab-size" (no such option of sim import) and
    `sim compare` compared nothing with exit code 0."""
    log = tmp_path / "g.log"
    log.write_text("garbage\n")
    res = _run(command, log, "--out", tmp_path / "o")
    text = " ".join(res.output.split())
    assert res.exit_code == 2 and f"{log}: not recognised" in text, text
    assert "--vocab-size" not in text and not (tmp_path / "o").exists(), text


def test_configurations_within_the_winners_band_are_named_as_in_the_table() -> None:
    """The note 'N other configurations are within each other's band ... best: ...' and
    winner.yaml named a row without its v, cp, +sp and precision, so two rows of the table
    (p=8 v=5 t=4+sp cp=2 and p=8 t=4) read alike (it printed 'interleaved_1f1b p=8 w=1 t=4 b=1
    m=128 dist_opt' for the first)."""
    import pandas as pd

    from sim.bands import Bands, Residual, build_bands
    from sim.report.row_bands import winner_bands, with_bands

    bands = Bands(build_bands([Residual("megatron-lm", 4, 1, 1.0 + i / 18) for i in range(10)]))
    row = {
        "model": "m",
        "framework": "megatron-lm",
        "schedule": "interleaved_1f1b",
        "stages": 8,
        "virtual_stages": 5,
        "dp_width": 1,
        "dp_shard": 1,
        "tensor_parallel": 4,
        "sequence_parallel": True,
        "context_parallel": 2,
        "expert_parallel": 1,
        "expert_tensor_parallel": None,
        "microbatch_size": 1,
        "microbatches": 128,
        "memory_policy": "dist_opt",
        "precision": "fp8-delayed",
        "fits": True,
        "error": "",
    }
    df = pd.DataFrame(
        [
            {**row, "iteration_time_s": 1.0, "throughput_samples_per_s": 128.0},
            {**row, "iteration_time_s": 1.05, "throughput_samples_per_s": 122.0},
        ]
    )
    best = winner_bands(with_bands(df, bands))["m"]["within_band"]["best"]
    assert best == ["interleaved_1f1b p=8 v=5 w=1 t=4+sp cp=2 b=1 m=128 dist_opt fp8-delayed"]


def test_a_rack_scale_preset_shows_in_a_terminal() -> None:
    """`sim hardware show gb300-nvl72` printed 72 equal GPU rows, 36 host rows, 144 link rows
    and a 72 x 72 route matrix that no terminal renders (382 lines of box characters); equal
    rows now merge (gpu0 .. gpu71) and the routes are grouped: 72 x 71 = 5112 ordered pairs,
    all through the NVLink switch at 900 GB/s."""
    res = _run("hardware", "show", "gb300-nvl72")
    assert res.exit_code == 0, res.output
    assert "gpu0 .. gpu71 (72)" in res.output and "cpu0 .. cpu35 (36)" in res.output
    assert "5112" in res.output and "900.0" in res.output
    # The tables no longer grow with the GPU count; what is left is mostly the preset's prose
    # description and its sources table, whose length follows the text (382 lines before).
    assert len(res.output.splitlines()) < 120
    assert "│ gpu5 " not in res.output  # no row of its own for a GPU in the middle


def test_a_grid_that_leaves_gpus_idle_says_so(tmp_path: Path) -> None:
    """dp_width defaults to 1: the getting-started grid on a DGX H100 compared configurations
    of 1 to 4 of its 8 GPUs by samples/s without a word; now a note says how many GPUs the
    configurations use and to set sweep.gpus (and none once it is set)."""
    from sim.config import load_experiment
    from sim.plan.sweep import expand
    from sim.point.experiment import prepare
    from sim.run import unused_gpus_note

    def note(sweep: dict) -> str | None:
        path = _small_bert(tmp_path, sweep)
        prep = prepare(load_experiment(path), str(path))
        return unused_gpus_note(prep, expand(prep)[0])

    grid = {"schedule": "1f1b", "stages": [2, 4], "microbatch_size": 1}
    said = note(grid)
    assert said is not None and "uses 2 to 4 of dgx1-v100-16gb's 8 GPUs" in said, said
    assert "sweep.gpus: 8" in said
    assert note({**grid, "gpus": 8}) is None
    assert note({**grid, "dp_width": 1}) is None
    path = _small_bert(tmp_path, grid)  # a model's own dp_width (megatron-scaling.yaml's form)
    exp = yaml.safe_load(path.read_text())
    exp["models"][0]["dp_width"] = 1
    path.write_text(yaml.safe_dump(exp))
    prep = prepare(load_experiment(path), str(path))
    assert unused_gpus_note(prep, expand(prep)[0]) is None


def test_an_fsdp_option_in_a_grid_without_fsdp_is_refused(tmp_path: Path) -> None:
    """options.fsdp_reshard_after_forward with sweep.dp_shard left at 1 was silently ignored
    (the run predicted as if it were not there); now exit 2 naming the field and the fix, and
    accepted once the grid has FSDP."""
    grid = {"schedule": "1f1b", "stages": 2, "dp_width": 2, "microbatch_size": 1}
    path = _small_bert(tmp_path, grid)
    exp = yaml.safe_load(path.read_text())
    exp["options"] = {"fsdp_reshard_after_forward": False}
    path.write_text(yaml.safe_dump(exp))
    res = _run("memory", path, "--out", tmp_path / "m", "--no-plots", "--no-advice")
    assert res.exit_code == 2, res.output
    assert "options.fsdp_reshard_after_forward" in res.output and "sweep.dp_shard" in res.output
    assert "Traceback" not in res.output and not (tmp_path / "m").exists()
    exp["sweep"]["dp_shard"] = -1
    exp["sweep"]["memory_policy"] = "none"
    path.write_text(yaml.safe_dump(exp))
    res = _run("memory", path, "--out", tmp_path / "m", "--no-plots", "--no-advice")
    assert res.exit_code in (0, 1), res.output


def test_one_model_over_several_policies_draws_no_empty_comparison(tmp_path: Path) -> None:
    """One model, two memory policies: 'largest trainable model per policy' was drawn with one
    bar per policy, all the same model (deepseek-v3-256xgb200: two 671.0 B bars), and the
    console's memory-policy table printed the parameter count as 671026404352; now no such
    plot, and (session 14) no such table when the best configurations show each policy's
    best (it repeated them: tests/test_cli_first_hour_again.py)."""
    from sim.report.memory_summary import write_memory_summary

    rows = [
        dict(model="m", parameters=8e9, memory_policy=pol, fits=True, throughput_samples_per_s=t)
        for pol, t in (("none", 2.0), ("recompute", 1.5))
    ]
    _, written = write_memory_summary(pd.DataFrame(rows), tmp_path, True)
    assert [p.name for p in written] == ["memory_summary.csv"]
    grid = {"schedule": "1f1b", "stages": 2, "microbatch_size": 1,
            "memory_policy": ["none", "recompute"]}  # fmt: skip
    res = _run("run", _small_bert(tmp_path, grid), "--out", tmp_path / "o", "--no-plots", "-j", 1)
    assert res.exit_code == 0, res.output
    assert "Memory policies" not in res.output and "recompute" in res.output, res.output


@pytest.mark.parametrize(
    ("name", "suggested"),
    [("8x-dgx-h200x", "'8x-dgx-h200'"), ("nvl72x4-gb20", "'nvl72x4-gb200'"),
     ("4x-gb200", "'4x-gb200-nvl72'"), ("dgx-h10", "'dgx-h100'")],
)  # fmt: skip
def test_a_misspelt_cluster_preset_suggests_the_cluster_name(name, suggested) -> None:
    """'8x-dgx-h200x' was answered "did you mean 'dgx-h200'?" (one server: pasting it changes
    the job from 64 GPUs to 8); the suggestion now keeps the 'Nx-' / 'nvlDxN-' form."""
    res = _run("hardware", "show", name)
    assert res.exit_code == 2
    assert f"(did you mean {suggested}?)" in res.output, res.output


def test_sim_memory_names_configurations_as_sim_run_does() -> None:
    """`sim memory` labelled t=2 with and without sequence parallelism alike ('p1 w32 t2 b1 m2
    none' twice in llama3.1-8b-torchtitan-fsdp2-tp), dropped FSDP's shard and the precision,
    and wrote 'p1 w4' where `sim run` writes 'p=1 w=4'; it now uses sim run's label."""
    from types import SimpleNamespace

    from sim.point.config import PointConfig
    from sim.report.memory_ranks import label

    common = dict(model="l", schedule="1f1b", stages=1, dp_width=32, dp_shard=32,
                  microbatch_size=1, tensor_parallel=2, microbatches=2, memory_policy="none",
                  global_batch=64, precision="fp8-rowwise")  # fmt: skip
    sp, no_sp = (label(SimpleNamespace(point=PointConfig(**common, sequence_parallel=x)))
                 for x in (True, False))  # fmt: skip
    assert sp == "l 1f1b p=1 w=32 shard=32 t=2+sp b=1 m=2 none fp8-rowwise"
    assert no_sp == "l 1f1b p=1 w=32 shard=32 t=2 b=1 m=2 none fp8-rowwise"


def test_the_throughput_plot_names_every_knob_it_maximises_over() -> None:
    """llama3-70b-fp8-64xh100's throughput.png said 'each point: best config over stages, DP
    width' while tensor and context parallelism were swept too (t=4 or 8, cp=1 or 2)."""
    from sim.report.plots import plot_throughput

    rows = [
        dict(model="m", schedule="1f1b", microbatches=m, fits=True, stages=4, dp_width=8 // t // cp,
             tensor_parallel=t, context_parallel=cp, throughput_samples_per_s=float(t + cp + m))
        for m in (4, 8) for t in (4, 8) for cp in (1, 2)
    ]  # fmt: skip
    fig = plot_throughput(pd.DataFrame(rows))
    title = fig._suptitle.get_text().replace("\n", " ")
    assert "tensor parallel" in title and "context parallel" in title and "DP width" in title
    assert "stages" not in title  # not varied


def test_the_throughput_plot_shows_each_points_band() -> None:
    """The table gives each prediction its band ('12.7 (11.8–15.7)') but throughput.png drew
    bare points; now the best fitting row's band is an error bar, named in the legend."""
    from matplotlib.container import ErrorbarContainer

    from sim.report.plots import BAND_LABEL, plot_throughput

    rows = [
        dict(model="m", schedule="1f1b", microbatches=8, fits=True, stages=p,
             throughput_samples_per_s=t, throughput_low_samples_per_s=t - 1,
             throughput_high_samples_per_s=t + 2)
        for p, t in ((2, 10.0), (4, 12.0))
    ]  # fmt: skip
    fig = plot_throughput(pd.DataFrame(rows))
    ax = fig.axes[0]
    bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    assert len(bars) == 1
    (segment,) = bars[0].lines[2][0].get_segments()
    assert [y for _, y in segment] == [11.0, 14.0]  # the best row (12 samples/s): 12 - 1, 12 + 2
    assert BAND_LABEL in [t.get_text() for t in ax.get_legend().get_texts()]


def test_a_band_below_its_prediction_still_draws() -> None:
    """experiments/megatron-scaling.yaml's t = 8 rows have bands wholly below the prediction
    (measured / predicted p90 < 1): the bars were anchored on the prediction, so one side was
    negative and matplotlib refused the plot (internal error, rc 3); the bar spans the band."""
    from matplotlib.container import ErrorbarContainer

    from sim.report.plots import plot_throughput

    row = dict(model="m", schedule="1f1b", microbatches=8, fits=True, stages=2,
               throughput_samples_per_s=120.0, throughput_low_samples_per_s=86.0,
               throughput_high_samples_per_s=118.0)  # fmt: skip
    ax = plot_throughput(pd.DataFrame([row])).axes[0]
    (bars,) = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    (segment,) = bars.lines[2][0].get_segments()
    assert [y for _, y in segment] == [86.0, 118.0]


def test_an_indivisible_batch_names_where_the_batch_is_set(tmp_path: Path) -> None:
    """A micro-batch that does not divide a model's own global_batch said 'change
    training.global_batch', a key the experiment did not have (qwen3-30b-a3b-b200 sets
    models[0].global_batch); it names the key the batch comes from."""
    grid = {"schedule": "1f1b", "stages": 2, "microbatch_size": 3}
    res = _run("memory", _small_bert(tmp_path, grid), "--out", tmp_path / "m", "--no-plots")
    assert res.exit_code == 2, res.output
    assert "change models.0.global_batch or sweep.microbatch_size" in res.output, res.output


def test_a_rank_holding_several_stage_chunks_is_labelled_with_all_of_them() -> None:
    """Without tensor parallelism the log's placement listed ranks, not stage chunks, so
    deepseek-v3-256xgb200's timeline (p=4, v=4) labelled the rank of stages 0, 4, 8, 12
    'stage 0' (with t > 1, llama3-70b's read 'stage 0,4,8,12,16'); both now list every chunk."""
    from sim.report.scale import gpu_stage_labels

    one = sim.api.simulate(
        {
            "name": "v",
            "hardware": "dgx1-v100-16gb",
            "models": [{"name": "bert", "trace": "bert-large", "global_batch": 8}],
            "sweep": {
                "schedule": "interleaved_1f1b",
                "stages": 2,
                "virtual_stages": 2,
                "microbatch_size": 1,
            },
        },  # fmt: skip
        model="bert",
        schedule="interleaved_1f1b",
        stages=2,
        virtual_stages=2,
        dp_width=1,
        microbatch_size=1,
        memory_policy="none",
    )
    labels = gpu_stage_labels(one.log)
    stages = sorted(text.split(" (", 1)[1] for text in labels.values())
    assert stages == ["stages 0,2)", "stages 1,3)"], labels


def test_hardware_list_says_what_each_preset_is() -> None:
    """`sim hardware list` printed bare names ('grand-teton-h100', 'pcie-8gpu'): which GPUs and
    how many took a `show` each, and the 'Nx-' cluster form was nowhere in it."""
    res = _run("hardware", "list")
    assert res.exit_code == 0
    lines = res.output.splitlines()
    assert any(x.split()[:4] == ["pcie-8gpu", "8", "x", "RTX-4090-24GB"] for x in lines), lines
    assert any(x.split()[:4] == ["gb300-nvl72", "72", "x", "GB300-288GB"] for x in lines)
    assert "'Nx-PRESET'" in res.output


def test_winner_yaml_keeps_a_relative_trace_path_with_plots(tmp_path: Path, monkeypatch) -> None:
    """With plots, the experiment's path was overwritten by throughput.png's inside the
    staging folder, so winner.yaml named a relative trace (a config.json beside the
    experiment) as '<out>/.<name>.new-PID/config.json', a folder gone after the run: `sim run
    winner.yaml` failed with 'trace not found'."""
    import shutil

    for ext in ("csv", "yaml"):
        shutil.copy(ROOT / "traces" / f"bert-large.{ext}", tmp_path / f"mine.{ext}")
    path = _small_bert(tmp_path)
    exp = yaml.safe_load(path.read_text())
    exp["models"][0]["trace"] = "mine.csv"
    path.write_text(yaml.safe_dump(exp))
    # the plots are asked for but not drawn (drawing takes seconds and is not what is tested)
    monkeypatch.setattr(sim.run._Pending, "finish", lambda self, jobs, say, meanwhile: meanwhile())
    res = _run("run", path, "--out", tmp_path / "o", "-j", 1)
    assert res.exit_code == 0, res.output
    winner = yaml.safe_load((tmp_path / "o" / "winner.yaml").read_text())
    assert winner["models"][0]["trace"] == str((tmp_path / "mine.csv").resolve())


def test_memory_ranks_legend_names_the_dashed_line(tmp_path: Path, monkeypatch) -> None:
    """memory_ranks.png (sim memory) dashed each panel's capacity with no legend entry; the
    legend now says what the dashed line is."""
    import sim.report.memory_ranks as mr

    figs = []
    monkeypatch.setattr(mr, "save_figure", lambda fig, path: figs.append(fig) or Path(path))
    res = _run("memory", _small_bert(tmp_path), "--out", tmp_path / "m", "--no-advice")
    assert res.exit_code == 0, res.output
    (fig,) = figs
    assert "GPU capacity" in [t.get_text() for t in fig.legends[0].get_texts()]


def test_hardware_show_says_which_peak_it_prints() -> None:
    """`sim hardware show` headed GB300's 2500 'peak TFLOPS' though the preset's FP8 peak is
    5000 and NVFP4's 15000: the column is the dense 16-bit tensor peak (MFU's denominator)."""
    from sim.hardware import load_hardware
    from sim.hardware.describe import gpu_table

    table = gpu_table(load_hardware("gb300-nvl72"))
    headers = [str(c.header) for c in table.columns]
    assert "16-bit dense TFLOPS" in headers and "peak TFLOPS" not in headers


def test_memory_advice_reads_as_a_sentence_for_a_plural_category() -> None:
    """'activations overflows' read wrong; the advice names the bytes over and the largest
    category: 3 GiB over with activations the largest."""
    text = Advice(category="activations", over_bytes=3 * 2.0**30).text()
    assert text.startswith("3.00 GiB over capacity (largest category: activations)")
    assert "overflows" not in text
