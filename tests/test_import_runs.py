"""``sim import``: launch arguments, configs and logs as experiments that ``sim run`` runs; every
argument mapped, ignored or refused by name (sim.import_runs, sim.cli.import_runs)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sim import api
from sim.cli import app
from sim.errors import InputError
from sim.import_runs import import_runs
from sim.runs.argv import parse_command

DATA = Path(__file__).resolve().parent / "data" / "runs"
GOLDEN = DATA / "golden" / "gpt" / "gpt3_tiny_tp2_pp2" / "golden_values_dev_dgx_a100.json"
MEGATRON = DATA / "megatron_llama3_70b_64xh100.sh"


def test_unexpressible_argument_is_an_error_naming_it(tmp_path):
    command = tmp_path / "offload.sh"
    command.write_text(MEGATRON.read_text().rstrip() + " \\\n    --optimizer-cpu-offload\n")
    with pytest.raises(InputError) as exc:
        import_runs([command], out=tmp_path / "out", gpu="H100")
    msg = str(exc.value)
    assert str(command) in msg and "'--optimizer-cpu-offload'" in msg
    assert not (tmp_path / "out").exists()


def test_ignored_on_request_and_every_argument_reported(tmp_path):
    command = tmp_path / "offload.sh"
    command.write_text(MEGATRON.read_text().rstrip() + " \\\n    --optimizer-cpu-offload\n")
    done = import_runs([command], out=tmp_path, gpu="H100", ignore=["--optimizer-cpu-offload"])
    (item,) = done
    exp = yaml.safe_load(item.experiment.read_text())
    model = exp["models"][0]
    assert exp["hardware"] == "8x-dgx-h100"
    assert exp["framework"] == (
        "megatron-lm[overlap_grad_reduce=true,overlap_param_gather=true,log_interval=1]"
    )  # the sample's --log-interval 1: a log (its reads, its barrier) every iteration
    assert (model["tensor_parallel"], model["stages"], model["dp_width"]) == (8, 4, 2)
    assert (model["virtual_stages"], model["schedule"]) == (4, "interleaved_1f1b")
    assert exp["sweep"]["memory_policy"] == "dist_opt:recompute"
    rows = list(csv.DictReader((tmp_path / "pretrain_gpt.arguments.csv").open()))
    flags = parse_command(command.read_text()).flags
    assert {r["name"] for r in rows} >= set(flags)  # every flag of the command is reported
    by = {r["name"]: r for r in rows}
    assert by["optimizer-cpu-offload"]["status"] == "ignored"
    assert "ignored on request" in by["optimizer-cpu-offload"]["reason"]
    assert by["overlap-grad-reduce"]["status"] == "mapped"
    assert by["tensor-model-parallel-size"]["status"] == "mapped"
    assert by["lr"]["status"] == "ignored"


def test_golden_json_becomes_an_experiment_that_runs(tmp_path):
    (item,) = import_runs([GOLDEN], out=tmp_path)
    assert (tmp_path / f"{item.experiment.stem}.measured.csv").is_file()
    plan = api.plan(item.experiment)
    (row,) = plan.rows
    assert row.error == "" and row.iteration_time_s is not None
    assert (row.tensor_parallel, row.stages, row.dp_width, row.microbatches) == (2, 2, 2, 4)
    # the functional test's logging flags: host work per iteration (sim.framework.megatron_host);
    # its deterministic mode: the fills of its TE layers (sim.framework.deterministic)
    spec = (
        "megatron-lm[attention_backend=unfused,deterministic_mode,gradient_accumulation_fusion"
        "=false,log_interval=1,log_num_zeros_in_grad,log_params_norm,tensorboard]"
    )
    assert row.framework == spec and row.memory_policy == "none"


def test_sweep_around_the_run(tmp_path):
    (item,) = import_runs([DATA / "torchtitan_llama3_8b.toml"], out=tmp_path, gpu="H100",
                          num_gpus=8, sweep=True)  # fmt: skip
    exp = yaml.safe_load(item.experiment.read_text())
    assert exp["sweep"]["gpus"] == 8 and exp["sweep"]["tensor_parallel"] == [1, 2]
    assert exp["sweep"]["memory_policy"] == ["recompute:full", "none"]
    assert exp["sweep"]["dp_shard"] == -1  # FSDP2 over every data-parallel rank
    assert exp["models"][0]["microbatch_size"] == [1, 2, 4]
    assert "stages" not in exp["models"][0]


def test_cli_exit_2_names_file_and_field(tmp_path):
    bad = tmp_path / "offload.sh"  # optimizer CPU offload: not a pipesim policy
    launch = (DATA / "megatron_llama3_70b_64xh100.sh").read_text().rstrip()
    bad.write_text(launch + " --optimizer-cpu-offload\n")
    res = CliRunner().invoke(app, ["import", str(bad), "--gpu", "H100", "--out", str(tmp_path)])
    assert res.exit_code == 2
    assert "offload.sh" in res.output and "optimizer-cpu-offload" in res.output
    res = CliRunner().invoke(app, ["import", str(tmp_path / "nope.log")])
    assert res.exit_code == 2 and "nope.log" in res.output


def test_cli_writes_the_mixtral_recipe(tmp_path):
    res = CliRunner().invoke(app, ["import", str(DATA / "bridge_mixtral_8x7b.yaml"), "--gpu",
                                   "B200", "--gpus", "32", "--out", str(tmp_path)])  # fmt: skip
    assert res.exit_code == 0, res.output
    exp = yaml.safe_load((tmp_path / "bridge_mixtral_8x7b.yaml").read_text())
    assert exp["sweep"]["expert_parallel"] == 8 and exp["hardware"] == "4x-dgx-b200"
