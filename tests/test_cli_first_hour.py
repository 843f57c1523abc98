"""An ML-systems engineer's first hour with ``sim`` (session 13's pass): the names, units and
fields a newcomer gets wrong, and what ``sim`` answers (each test failed before its fix)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sim.cli import app
from sim.trace.loader import load_trace
from sim.trace.origin import origin_warning

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def _run(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_a_gpu_name_or_its_case_suggests_the_presets_of_that_gpu() -> None:
    """'dgx-h100-80gb' was answered "did you mean 'dgx-a100-80gb'?" (another GPU, one letter
    away); 'H100', 'B200' and 'DGX-H100' got no suggestion, '8xdgx-h100' one server."""
    cases = {
        "dgx-h100-80gb": "(did you mean 'dgx-h100' or 'grand-teton-h100-96gb' or "
        "'grand-teton-h100'?)",
        "H100": "(did you mean 'dgx-h100' or 'grand-teton-h100' or 'grand-teton-h100-96gb'?)",
        "B200": "(did you mean 'dgx-b200'?)",
        "DGX-H100": "(did you mean 'dgx-h100'?)",
        "8xdgx-h100": "(did you mean '8x-dgx-h100'?)",
    }
    for name, says in cases.items():
        res = _run("hardware", "show", name)
        assert res.exit_code == 2, res.output
        assert says in res.output, res.output


def test_a_unit_in_the_wrong_case_suggests_the_unit(tmp_path) -> None:
    """'80 gb' was refused with "unknown unit 'gb'" and no hint; it now offers GB and GiB
    (a datasheet's 80 GB is often meant as GiB), and 'tflops' TFLOPS."""
    exp = tmp_path / "exp.yaml"
    exp.write_text(
        "name: x\nhardware: {base: dgx-h100, gpu: {memory: 80 gb}}\n"
        "models: [{name: bert, trace: bert-large, global_batch: 8}]\n"
    )
    res = _run("memory", exp, "--out", tmp_path / "o")
    assert res.exit_code == 2, res.output
    assert "field 'hardware.gpu.memory'" in res.output, res.output
    assert "(did you mean 'GB' (1e9 B) or 'GiB' (2**30 B)?)" in res.output, res.output
    exp.write_text(exp.read_text().replace("memory: 80 gb", "peak_flops: 989 tflops"))
    res = _run("memory", exp, "--out", tmp_path / "o")
    assert "(did you mean 'TFLOPS'?)" in res.output, res.output


def test_a_gpu_figure_without_its_unit_is_refused(tmp_path) -> None:
    """'memory: 80' was read as 80 bytes: every configuration was "over capacity", exit 1,
    with no word of the unit; a GPU figure under 1 MiB (1 MFLOP/s, 1 MB/s) is now an input
    error that names the unit a bare number is in and writes the number with one."""
    exp = tmp_path / "exp.yaml"
    exp.write_text(
        "name: x\nhardware: {base: dgx-h100, gpu: {memory: 80}}\n"
        "models: [{name: bert, trace: bert-large, global_batch: 8}]\n"
    )
    res = _run("memory", exp, "--out", tmp_path / "o")
    assert res.exit_code == 2, res.output
    assert "field 'hardware.gpu.memory'" in res.output, res.output
    assert "a number without a unit is in bytes" in res.output and "'80 GiB'" in res.output


def test_a_misnamed_hardware_key_is_named_first_with_the_key_meant(tmp_path) -> None:
    """`hardware: {preset: dgx-b200, gpu_memory: ...}` was answered first with "field
    'hardware.name': Field required" (the keys a preset would have set), the misnamed keys last
    and with no hint; the unknown keys now come first, each with the key it probably meant."""
    exp = tmp_path / "exp.yaml"
    exp.write_text(
        "name: x\nhardware: {preset: dgx-b200, gpu_memory: 80 GiB}\n"
        "models: [{name: bert, trace: bert-large, global_batch: 8}]\n"
    )
    res = _run("memory", exp, "--out", tmp_path / "o")
    assert res.exit_code == 2, res.output
    first = res.output.splitlines()[0]
    assert "field 'hardware.preset'" in first and "(did you mean 'base'?)" in first, first
    assert "unknown key 'gpu_memory' (did you mean 'gpu: {memory: ...}'?)" in res.output


@pytest.mark.parametrize("key", ["num_hidden_layers", "num_key_value_heads"])
def test_a_misspelt_config_json_size_is_named_with_the_spelling_found(tmp_path, key) -> None:
    """A hand-written config.json with 'num_hidden_layer' was answered "model_type 'llama'
    has no num_hidden_layers: profile another model as a function"; one with
    'num_key_value_head' was read as multi-head attention (KV heads = heads), silently. Both
    now name the key the config has."""
    cfg = json.loads((ROOT / "examples" / "hf" / "tiny-llama-config.json").read_text())
    cfg[key[:-1]] = cfg.pop(key)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    res = _run("trace", "from-config", path, "--seq-len", 64, "--out", tmp_path / "t")
    assert res.exit_code == 2, res.output
    assert f"field '{key}'" in res.output, res.output
    assert f"(the config has '{key[:-1]}': a misspelling of it?)" in res.output, res.output


def test_the_memory_policy_summary_wraps_to_the_terminal() -> None:
    """`sim run` printed the policy summary with pandas' to_string: one 210-column line per
    row for DeepSeek-V3's two selective-recompute policies, headers run together
    ('parameters fastest policy samples/s'); it is now a table that folds to the width."""
    import pandas as pd
    from rich.console import Console

    from sim.report.memory_summary import memory_summary
    from sim.report.policy_table import policy_table

    long = ["dist_opt:recompute:selective:mla_up_proj", "dist_opt:recompute:selective:moe_act"]
    # two models: one model's table is a row per policy (session 14)
    rows = [
        dict(model=m, parameters=n, memory_policy=p, fits=i == 0 or m == "small",
             throughput_samples_per_s=190.0 - i)
        for m, n in (("small", 16e9), ("dsv3", 671e9)) for i, p in enumerate(long)
    ]  # fmt: skip
    console = Console(width=80, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(policy_table(memory_summary(pd.DataFrame(rows))))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80, text
    assert "671,000,000,000" in text and "190.00" in text and "189.00" in text, text
    assert "largest model that fits" in text and "dsv3" in text and "small" in text, text


def test_a_config_json_trace_is_named_as_the_user_named_it(tmp_path) -> None:
    """`trace: config.json` was noted as "trace config is analytic" (the file's stem, a name
    the user never wrote); now "trace config.json (a Hugging Face config)", and a shipped trace
    written from a config says so."""
    (tmp_path / "config.json").write_text(
        (ROOT / "examples" / "hf" / "tiny-llama-config.json").read_text()
    )
    exp = tmp_path / "exp.yaml"
    exp.write_text(
        "name: x\nhardware: dgx-h100\n"
        "models: [{name: m, trace: config.json, seq_len: 64, global_batch: 8}]\n"
        "sweep: {schedule: 1f1b, stages: 2, dp_width: 1, microbatch_size: 1}\n"
    )
    res = _run("run", exp, "--out", tmp_path / "o", "--no-plots", "-j", 1)
    assert res.exit_code == 0, res.output
    said = " ".join(res.output.split())
    assert "m: trace config.json (a Hugging Face config) is analytic" in said, said
    shipped = origin_warning("q", load_trace("qwen3-30b-a3b"), "qwen3-30b-a3b")
    assert "q: trace qwen3-30b-a3b (from a Hugging Face config) is analytic" in str(shipped)


def test_the_winners_plots_name_the_winner(tmp_path) -> None:
    """timeline.png, memory_per_gpu.png and memory_timeline.png never said which configuration
    they draw (the Perfetto trace's title did, without ep, cp or the memory policy); each is now
    titled with the winner as the console's table names it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import sim.api
    from sim.report.outputs import winner_artifacts

    exp = {
        "name": "v",
        "hardware": "dgx1-v100-16gb",
        "models": [{"name": "bert", "trace": "bert-large", "global_batch": 8}],
        "sweep": {"schedule": "1f1b", "stages": 2, "microbatch_size": 1},
    }
    log = sim.api.simulate(exp, memory_policy="none").log
    for path, call in winner_artifacts(tmp_path, log, "bert winner: 1f1b p=2 w=1 b=1 m=8 none"):
        if path.suffix == ".png":
            fig = call()
            assert fig.axes[0].get_title().startswith("bert winner: 1f1b p=2"), path
            plt.close(fig)


def test_a_missing_experiment_suggests_the_file_meant(tmp_path, monkeypatch) -> None:
    """`sim run dgx1` (README: `sim run experiments/dgx1.yaml`) and `sim run experiments/dgx.yaml`
    were answered "experiment file not found" and nothing more; now with the file meant, in
    the folder given or in experiments/."""
    monkeypatch.chdir(ROOT)
    for given in ("dgx1", "experiments/dgx.yaml", "llama3-70b-fp8-64xh100.yaml"):
        res = _run("run", given, "--out", tmp_path / "o")
        assert res.exit_code == 2, res.output
        assert "experiment file not found (did you mean 'experiments/" in res.output, res.output
    res = _run("memory", "no-such-thing.yaml")
    assert res.exit_code == 2 and "did you mean" not in res.output, res.output


def test_winner_yaml_states_one_global_batch_and_the_whole_configuration(tmp_path) -> None:
    """winner.yaml said `training: {global_batch: 64}` (the default for models without their
    own) beside the model's `global_batch: 512`, and its description left out ep, cp, the
    micro-batch count and the memory policy; now one global batch and the table's label."""
    import yaml

    exp = tmp_path / "exp.yaml"
    exp.write_text(
        "name: x\nhardware: dgx1-v100-16gb\n"
        "models: [{name: bert, trace: bert-large, global_batch: 16}]\n"
        "sweep: {schedule: 1f1b, stages: 2, dp_width: 1, microbatch_size: 1, "
        "memory_policy: recompute}\n"
    )
    res = _run("run", exp, "--out", tmp_path / "o", "--no-plots", "-j", 1)
    assert res.exit_code == 0, res.output
    winner = yaml.safe_load((tmp_path / "o" / "winner.yaml").read_text())
    assert winner["training"]["global_batch"] == winner["models"][0]["global_batch"] == 16
    assert winner["description"].endswith("bert 1f1b p=2 w=1 b=1 m=16 recompute"), winner


def test_a_choice_written_another_way_suggests_the_choice() -> None:
    """`optimizer: adamw` and `dtype: bfloat16` (a training script's words) were answered with
    the choices alone; now with the one meant (AdamW: Adam's state, so 'adam')."""
    import pytest

    from sim.config.load import parse_experiment
    from sim.errors import InputError

    base = {"name": "x", "hardware": "dgx-h100", "models": [{"name": "b", "trace": "bert-large"}]}
    for training, says in (
        ({"optimizer": "adamw"}, "(did you mean 'adam'? AdamW keeps Adam's state"),
        ({"dtype": "bfloat16"}, "(did you mean 'bf16'?)"),
        ({"dtype": "BF16"}, "(did you mean 'bf16'?)"),
    ):
        with pytest.raises(InputError) as err:
            parse_experiment({**base, "training": training}, file="exp.yaml")
        assert says in str(err.value), str(err.value)


def test_more_gpus_than_the_hardware_names_the_cluster_preset(tmp_path) -> None:
    """`sweep: {gpus: 64}` on `hardware: dgx-b200` was answered "no valid configuration in the
    grid: stages x dp_width = 64 exceeds the 8 GPUs of dgx-b200", not how to get 64."""
    exp = tmp_path / "exp.yaml"
    exp.write_text(
        "name: x\nhardware: dgx-b200\n"
        "models: [{name: b, trace: bert-large, global_batch: 64}]\n"
        "sweep: {gpus: 64, schedule: 1f1b, stages: 2, microbatch_size: 1}\n"
    )
    res = _run("memory", exp, "--out", tmp_path / "o")
    assert res.exit_code == 2, res.output
    said = " ".join(res.output.split())
    assert "field 'sweep.gpus'" in said, said
    assert "64 GPUs, but dgx-b200 has 8: for 8 servers of it write hardware: 8x-dgx-b200" in said


def test_a_hand_written_trace_is_told_what_its_files_need(tmp_path) -> None:
    """A user's own trace: a CSV without its sidecar was told "every <name>.csv needs a
    <name>.yaml" (not what goes in it), a sidecar without provenance "missing", and a header
    with 'fwd_ms' that the header "must be" all 17 columns (6 are needed)."""
    csv = tmp_path / "mine.csv"
    csv.write_text("name,fwd_ms,bwd_s,param_bytes,act_bytes,out_bytes\nl0,1,2,8,8,8\n")
    res = _run("trace", "show", csv)
    said = " ".join(res.output.split())
    assert res.exit_code == 2 and "provenance: {source: where the times come from}" in said, said
    (tmp_path / "mine.yaml").write_text("name: m\nmicrobatch_size: 1\ndtype: bf16\ndevice: X\n")
    said = " ".join(_run("trace", "show", csv).output.split())
    assert "field 'provenance': missing: where the times come from" in said, said
    (tmp_path / "mine.yaml").write_text(
        "name: m\nmicrobatch_size: 1\ndtype: bf16\ndevice: X\nprovenance: {source: hand}\n"
    )
    said = " ".join(_run("trace", "show", csv).output.split())
    assert "(the header has 'fwd_ms': write fwd_s, in seconds)" in said, said
    assert "the header needs name,fwd_s,bwd_s,param_bytes,act_bytes,out_bytes (" in said, said


def test_trace_list_says_what_each_trace_is_and_lists_only_traces() -> None:
    """`sim trace list` printed bare names, among them 'gpt-tiny-cpu.b4' (a further profile
    of gpt-tiny-cpu, which `sim trace show` then refused for want of a sidecar); it now lists
    loadable traces only, each with its size, micro-batch, dtype, GPU and measured/analytic."""
    res = _run("trace", "list")
    assert res.exit_code == 0, res.output
    assert "gpt-tiny-cpu.b4" not in res.output, res.output
    rows = {line.split()[0]: line.split() for line in res.output.splitlines() if line.strip()}
    assert rows["qwen3-30b-a3b"][1:6] == ["50", "30,532,122,624", "1", "bf16", "analytic"]
    assert rows["gnmt16"][3:6] == ["64", "fp32", "measured"], rows["gnmt16"]


def test_nothing_fits_names_the_command_that_says_what_would(tmp_path) -> None:
    """ "no configuration fits in memory ... try more stages, a smaller micro-batch or a memory
    policy" named no way to find which; it now names `sim memory EXPERIMENT`, whose advice
    tries those changes per configuration."""
    exp = tmp_path / "exp.yaml"
    exp.write_text(
        "name: x\nhardware: dgx1-v100-16gb\n"
        "models: [{name: g, trace: gpt2-4b, global_batch: 8}]\n"
        "sweep: {schedule: 1f1b, stages: 2, dp_width: 1, microbatch_size: 1}\n"
    )
    res = _run("run", exp, "--out", tmp_path / "o", "--no-plots", "-j", 1)
    assert res.exit_code == 1, res.output
    said = " ".join(res.output.split())
    assert f"`sim memory {exp}` names each configuration's category over capacity" in said, said


def test_one_configuration_is_said_in_the_singular(tmp_path) -> None:
    """A one-point grid read "1 configurations on ...", "planner: 1 configurations" and (sim
    memory) "1 configurations in"."""
    exp = tmp_path / "exp.yaml"
    exp.write_text(
        "name: x\nhardware: dgx1-v100-16gb\n"
        "models: [{name: b, trace: bert-large, global_batch: 8}]\n"
        "sweep: {schedule: 1f1b, stages: 2, dp_width: 1, microbatch_size: 1}\n"
    )
    res = _run("memory", exp, "--out", tmp_path / "m", "--no-plots")
    assert "\n1 configuration in" in res.output and "\n1 configurations" not in res.output
    res = _run("run", exp, "--out", tmp_path / "o", "--no-plots", "-j", 1)
    assert res.exit_code == 0, res.output
    assert "x: 1 configuration on" in res.output and "planner: 1 configuration," in res.output


def test_a_band_that_leaves_out_its_prediction_is_explained() -> None:
    """llama3-70b-fp8-64xh100 showed '11.8 (8.16–11.2)': a prediction outside its own band
    (t=8 runs measured 6-45 % slower, p10 1.06), unexplained; the caption now says why."""
    import pandas as pd
    from rich.console import Console

    from sim.report.tables import compact_table

    row = dict(model="m", schedule="1f1b", stages=2, dp_width=1, microbatch_size=1,
               microbatches=8, memory_policy="none", iteration_time_s=1.0, fits=True,
               peak_memory_bytes=1e9, throughput_samples_per_s=11.8,
               throughput_low_samples_per_s=8.16, throughput_high_samples_per_s=11.2,
               throughput_band="8.16–11.2", band_source="all frameworks t=8 (n=47)")  # fmt: skip
    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(compact_table(pd.DataFrame([row])))
    text = " ".join(console.export_text().split())
    assert "a band below its prediction: 90 % of that regime's measured runs ran slower" in text
    row |= dict(throughput_low_samples_per_s=10.0, throughput_high_samples_per_s=14.0)
    console.print(compact_table(pd.DataFrame([row])))
    inside = " ".join(console.export_text().split())  # a band around its prediction
    assert "band: p10–p90" in inside and "its prediction" not in inside, inside


def test_a_hardware_mapping_without_base_says_how_to_set_figures_over_a_preset(tmp_path):
    """`hardware: {gpu: {memory: 40 GiB}}` (base: forgotten) was answered "field
    'hardware.name': Field required" and five more, not that a preset goes under base."""
    exp = tmp_path / "exp.yaml"
    exp.write_text(
        "name: x\nhardware: {gpu: {memory: 40 GiB}}\n"
        "models: [{name: b, trace: bert-large, global_batch: 8}]\n"
    )
    res = _run("memory", exp, "--out", tmp_path / "o")
    assert res.exit_code == 2, res.output
    said = " ".join(res.output.split())
    assert "to change some of a preset's figures write base: PRESET beside them" in said, said
