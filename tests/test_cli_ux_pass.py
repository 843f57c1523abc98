"""The last UX pass's defects (session 13): what ``sim`` now says where it silently did
something else than the user typed (each test failed before its fix)."""

from __future__ import annotations

from pathlib import Path

import typer
from typer.testing import CliRunner

from sim.cli import app
from sim.cli.console import friendly
from sim.errors import InputError
from sim.hardware.loader import load_hardware
from sim.plan import point_row, rowcache

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def _run(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_a_gpu_memory_override_replaced_by_the_cuda_total_names_cuda_memory(tmp_path) -> None:
    """`{base: dgx-h100, gpu: {memory: 75 GiB}}` planned with the CUDA total, 79.65 GiB
    (75 >= 0.9 x 79.65 = 71.7 is read as a datasheet figure) and said nothing; `sim hardware
    show` and `sim run` now say so and name gpu.cuda_memory. A preset's own datasheet figure
    (dgx-b200's 180 GB, also replaced) and a memory below 90 % (used as given) say nothing."""
    hw = tmp_path / "h.yaml"
    hw.write_text("base: dgx-h100\ngpu: {memory: 75 GiB}\n")
    res = _run("hardware", "show", hw)
    assert res.exit_code == 0, res.output
    said = " ".join(res.output.split())
    assert "gpu.memory 75.00 GiB" in said and "CUDA total 79.65 GiB is used" in said, said
    assert "set gpu.cuda_memory: 75.00 GiB instead" in said, said
    assert load_hardware("dgx-b200").notes == ()
    assert load_hardware({"base": "dgx-b200"}).notes == ()
    assert load_hardware({"base": "dgx-h100", "gpu": {"memory": "70 GiB"}}).notes == ()
    cap = {"memory": "75 GiB", "cuda_memory": "75 GiB"}
    assert load_hardware({"base": "dgx-h100", "gpu": cap}).notes == ()
    exp = tmp_path / "exp.yaml"
    exp.write_text(
        "name: x\nhardware: {base: dgx-h100, gpu: {memory: 75 GiB}}\n"
        "models: [{name: bert, trace: bert-large, global_batch: 8}]\n"
    )
    for command in ("run", "memory"):
        res = _run(command, exp, "--out", tmp_path / command)
        assert res.exit_code == 0, res.output
        assert "set gpu.cuda_memory: 75.00 GiB instead" in " ".join(res.output.split())


def test_a_command_line_error_names_the_argument_or_option_typed() -> None:
    """`sim hardware show nosuch` said "command line: field 'NAME'" (a file's word for what
    is an argument); a parameter named in Python (`seq_len`) now reads as the option typed."""
    res = _run("hardware", "show", "nosuch")
    assert res.exit_code == 2, res.output
    assert "command line: argument 'NAME': unknown hardware preset 'nosuch'" in res.output
    res = _run("trace", "show", "nosuch")
    assert res.exit_code == 2, res.output
    assert "argument 'TRACE': trace 'nosuch' not found" in res.output, res.output
    demo = typer.Typer()

    @demo.command()
    @friendly
    def go(seq_len: int = typer.Option(1, "--seq-len", "-s"), other: int = 0) -> None:
        raise InputError("must be <= 8192, got 99999", field="seq_len")

    res = runner.invoke(demo, ["--seq-len", "99999"])
    assert res.exit_code == 2, res.output
    assert "option '--seq-len': must be <= 8192" in " ".join(res.output.split()), res.output


def test_a_cache_of_another_pipesim_says_why_every_row_is_simulated_again(
    tmp_path, monkeypatch
) -> None:
    """An upgrade changes every row's cache key (the code hash is in it), so a rerun silently
    simulated everything again; it now says the cached rows were made by another version.
    The same pipesim's rerun reads its row and says nothing of it."""
    exp = tmp_path / "exp.yaml"
    exp.write_text(
        "name: x\nhardware: dgx-h100\nmodels: [{name: bert, trace: bert-large, global_batch: 8}]\n"
    )
    with monkeypatch.context() as m:
        for module in (point_row, rowcache):  # both imported before: restored to the real one
            m.setattr(module, "model_code_hash", lambda: "0123456789abcdef", raising=False)
        assert _run("run", exp, "--out", tmp_path / "o").exit_code == 0
    res = _run("run", exp, "--out", tmp_path / "o")
    assert res.exit_code == 0, res.output
    said = " ".join(res.output.split())
    assert "the 1 cached row(s) in" in said, said
    assert "were made by another pipesim version (code 0123456789abcdef, now" in said, said
    assert "every configuration is simulated again" in said, said
    res = _run("run", exp, "--out", tmp_path / "o")
    assert "another pipesim" not in res.output and "read from the cache" in res.output


def test_a_hand_written_trace_is_not_listed_as_measured(tmp_path, monkeypatch) -> None:
    """`provenance: {source: hand}` was listed as "measured" by `sim trace list` (everything
    not analytic nor a roofline estimate was); a trace is measured only when its provenance
    names a profiler or measurement, else hand-written or unknown."""
    csv = "name,fwd_s,bwd_s,param_bytes,act_bytes,out_bytes\n" + "".join(
        f"l{i},0.001,0.002,1024,2048,512\n" for i in range(4)
    )
    sources = {"mine": "hand", "timed": "torch.profiler on 1x H100, train.py", "odd": "a friend"}
    for name, source in sources.items():
        (tmp_path / f"{name}.csv").write_text(csv)
        (tmp_path / f"{name}.yaml").write_text(
            f"name: {name}\nmicrobatch_size: 1\ndtype: fp32\ndevice: cpu\n"
            f"provenance: {{source: '{source}'}}\n"
        )
    monkeypatch.setenv("PIPESIM_TRACES", str(tmp_path))
    res = _run("trace", "list")
    assert res.exit_code == 0, res.output
    rows = {ln.split()[0]: ln.split() for ln in res.output.splitlines() if ln.strip()}
    assert rows["mine"][5] == "hand-written", rows["mine"]
    assert rows["timed"][5] == "measured", rows["timed"]
    assert rows["odd"][5] == "unknown", rows["odd"]
    exp = tmp_path / "exp.yaml"
    exp.write_text(
        "name: x\nhardware: dgx-h100\nmodels: [{name: m, trace: mine, global_batch: 4}]\n"
    )
    res = _run("run", exp, "--out", tmp_path / "o", "--no-plots")
    assert res.exit_code in (0, 1), res.output
    said = " ".join(res.output.split())
    assert "m: trace mine's times are hand-written (provenance source: hand)" in said, said
