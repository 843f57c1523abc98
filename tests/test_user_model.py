"""Your own model: ``sim profile --model FILE.py:FUNC``, ``--for-gpu``, Kineto import, HF configs,
and ``sim validate`` replaying the user's model on 2 CPU ranks (gloo).

Expected numbers are closed forms (parameter counts, conv/linear FLOPs ``2 * MACs``, output
bytes, a single-GEMM roofline) or a second, independent mechanism (real saved-tensor hooks vs
fake tensors; a single-process forward vs the replay's losses); Kineto imports are checked
against hand-written event logs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

torch = pytest.importorskip("torch")

from backends.torch.models.layer_chain import chain_layers, forward_note  # noqa: E402
from backends.torch.models.user import load_callable  # noqa: E402
from backends.torch.models.user_spec import UserModelSpec  # noqa: E402
from backends.torch.profile.fake import fake_profile_user_model, op_time_s  # noqa: E402
from backends.torch.profile.user import profile_user_model  # noqa: E402
from sim.cli import app  # noqa: E402
from sim.errors import InputError  # noqa: E402
from sim.trace.kineto import read_kineto  # noqa: E402

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
CNN = str(ROOT / "examples" / "cnn.py")
LLAMA = str(ROOT / "examples" / "llama_block.py")
LLAMA_LAYERS = ("embed", "blocks.*", "norm", "lm_head")


def _cli(*args: object) -> tuple[int, str]:
    res = runner.invoke(app, [str(a) for a in args])
    return res.exit_code, res.output


# --- loading and bad input ----------------------------------------------------------------


def test_load_callable_by_file_and_by_module(tmp_path: Path, monkeypatch) -> None:
    assert load_callable(f"{CNN}:build", option="--model").__name__ == "build"
    assert load_callable("examples.cnn:loss", option="--model").__name__ == "loss"
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "net.py").write_text("def build():\n    return 1\n")
    monkeypatch.chdir(tmp_path)  # package.module resolves from the working directory
    assert load_callable("mypkg.net:build", option="--model")() == 1


@pytest.mark.parametrize(
    "ref, words",
    [
        ("nofile.py:build", ["nofile.py", "file not found", "--model"]),
        (f"{CNN}:nothing", ["has no function 'nothing'", "build", "loss"]),
        ("no_such_pkg.mod:f", ["no_such_pkg.mod", "cannot be imported"]),
        (CNN, ["FILE.py:FUNC"]),
    ],
)
def test_bad_model_reference_exits_2_naming_it(tmp_path: Path, ref: str, words: list) -> None:
    code, out = _cli("profile", "--model", ref, "--out", tmp_path / "t")
    assert code == 2, out
    flat = " ".join(out.split())
    for w in words:
        assert w in flat, out
    assert "Traceback" not in out and not (tmp_path / "t.csv").exists()


BAD_FUNCS = {
    "only_model": ("return SmallCNN()", "returned a SmallCNN"),
    "not_module": ("return 3, torch.randn(2, 3, 8, 8)", "returned a int as the model"),
    "bad_sample": ("return SmallCNN(), 'x'", "not a tensor or a tuple of tensors"),
    "wrong_shape": (
        "return SmallCNN(), torch.randn(2, 1, 8, 8)",
        "layer 0 ('stem') failed on the sample of shape [2, 1, 8, 8]",
    ),
    "raises": ("raise ValueError('boom')", "raised ValueError: boom"),
}


@pytest.mark.parametrize("func", sorted(BAD_FUNCS))
def test_bad_function_result_exits_2_naming_it(tmp_path: Path, func: str) -> None:
    body, words = BAD_FUNCS[func]
    src = tmp_path / "mine.py"
    src.write_text(f"import torch\nfrom cnn import SmallCNN\n\ndef {func}():\n    {body}\n")
    (tmp_path / "cnn.py").write_text(Path(CNN).read_text())
    code, out = _cli("profile", "--model", f"{src}:{func}", "--out", tmp_path / "t")
    assert code == 2, out
    assert words in " ".join(out.split()), out
    assert not (tmp_path / "t.csv").exists()


def test_unknown_layer_and_bad_loss_exit_2(tmp_path: Path) -> None:
    code, out = _cli(
        "profile",
        "--model",
        f"{LLAMA}:build",
        "--layers",
        "embed,blocks.9,norm",
        "--out",
        tmp_path / "t",
    )
    flat = " ".join(out.split())
    assert code == 2 and "'blocks.9' is not a module of TinyLlama" in flat, out
    assert "did you mean" in flat and "--layers" in flat
    code, out = _cli("profile", "--model", f"{LLAMA}:build", "--out", tmp_path / "t")
    assert code == 2 and "--layers 'embed,blocks.*,norm,lm_head'" in " ".join(out.split()), out
    code, out = _cli(
        "profile", "--model", f"{CNN}:build", "--loss", f"{CNN}:conv_block", "--out", tmp_path / "t"
    )
    assert code == 2 and "--loss" in out, out
    code, out = _cli(
        "profile",
        "--model",
        f"{CNN}:build",
        "-b",
        "3",
        "--for-gpu",
        "Z9000",
        "--out",
        tmp_path / "t",
    )
    assert code == 2 and "matches no preset" in " ".join(out.split()), out
    code, out = _cli(
        "profile",
        "--model",
        f"{CNN}:build",
        "--for-gpu",
        "H100",
        "--dtype",
        "fp32",
        "--out",
        tmp_path / "t",
    )
    assert code == 2 and "--dtype" in out, out
    code, out = _cli("profile", "--layers", "embed,head", "--out", tmp_path / "t")
    assert code == 2 and "need --model" in " ".join(out.split()), out  # GPT/BERT: a number


def test_chain_default_star_and_overlap() -> None:
    from examples.llama_block import build

    model = build(1, seq_len=8)[0]
    names = [n for n, _ in chain_layers(model, ["embed", "blocks.*", "lm_head"])]
    assert names == ["embed", "blocks.0", "blocks.1", "blocks.2", "blocks.3", "lm_head"]
    with pytest.raises(InputError, match="container"):
        chain_layers(model)  # blocks is a ModuleList
    with pytest.raises(InputError, match="overlap"):
        chain_layers(model, ["blocks", "blocks.0"])


def test_forward_note_flags_a_forward_that_is_not_the_chain() -> None:
    class Residual(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.b(self.a(x))

    m, x = Residual(), torch.randn(2, 4)
    assert "does more than chain" in forward_note(m, chain_layers(m), (x,))
    seq = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    assert forward_note(seq, chain_layers(seq), (x,)) is None


def test_a_fixed_sample_is_repeated_and_cut_to_another_microbatch_size() -> None:
    from backends.torch.models.user import resize_batch

    x, y = torch.arange(6.0).reshape(3, 2), torch.tensor([0, 1, 2])
    (x5,), y5 = resize_batch((x,), y, 5)
    assert x5.tolist() == [[0, 1], [2, 3], [4, 5], [0, 1], [2, 3]] and y5.tolist() == [
        0,
        1,
        2,
        0,
        1,
    ]
    (x2,), y2 = resize_batch((x,), y, 2)
    assert x2.tolist() == [[0, 1], [2, 3]] and y2.tolist() == [0, 1]
    spec = UserModelSpec("m.py:f", microbatch_size=4, takes_microbatch_size=False)
    assert UserModelSpec.from_dict(spec.to_dict()) == spec


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_validate_replays_a_fixed_sample_at_another_microbatch_size(tmp_path: Path) -> None:
    src = tmp_path / "fixed.py"
    src.write_text(
        "import torch\n\ndef build():\n    m = torch.nn.Sequential(torch.nn.Linear("
        "4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))\n"
        "    return m, torch.randn(4, 4)\n"
    )
    code, out = _cli("profile", "--model", f"{src}:build", "--reps", 1, "--out", tmp_path / "f")
    assert code == 0, out
    exp = {
        "name": "f",
        "hardware": str(ROOT / "sim/hardware/calibrated/cpu-2rank.yaml"),
        "models": [{"name": "f", "trace": "f.csv", "global_batch": 8, "microbatch_size": 2}],
        "training": {"optimizer": "sgd"},
        "sweep": {"schedule": "gpipe", "stages": 2},
    }
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(exp))
    code, out = _cli("validate", tmp_path / "exp.yaml", "--nproc", 2, "--iterations", 1)
    assert code == 0, out
    row = pd.read_csv(tmp_path / "validation.csv").iloc[0]
    assert row.microbatch_size == 2 and row.numerics == "ok", row


# --- profiling: closed forms and two mechanisms ---------------------------------------------


def test_cnn_profile_bytes_and_flops_are_the_closed_forms(tmp_path: Path) -> None:
    b = 2
    code, out = _cli(
        "profile",
        "--model",
        f"{CNN}:build",
        "--loss",
        f"{CNN}:loss",
        "-b",
        b,
        "--reps",
        1,
        "--out",
        tmp_path / "cnn",
    )
    assert code == 0, out
    df = pd.read_csv(tmp_path / "cnn.csv").set_index("name")
    assert list(df.index) == ["stem", "block1", "block2", "block3", "head"]
    c = 16  # channels of examples/cnn.py, 32x32 images, fp32
    assert df.param_bytes["stem"] == 4 * (3 * c * 9 + 2 * c)  # conv (no bias) + BN
    assert df.param_bytes["head"] == 4 * (8 * c * 10 + 10)
    assert df.out_bytes["stem"] == 4 * b * c * 32 * 32
    assert df.out_bytes["block1"] == 4 * b * 2 * c * 16 * 16  # after 2x2 pooling
    assert df.out_bytes["head"] == 0  # the loss: nothing crosses a boundary
    assert df.flops["block1"] == 2 * b * (2 * c) * 32 * 32 * c * 9  # 2 x MACs of the conv
    assert (df.fwd_s > 0).all() and (df.bwd_s > 0).all()
    meta = yaml.safe_load((tmp_path / "cnn.yaml").read_text())
    assert meta["provenance"]["model"]["source"].endswith("cnn.py:build")
    assert meta["provenance"]["model"]["layers"] == list(df.index)


def test_fake_analysis_matches_real_saved_bytes_and_counts_attention() -> None:
    kw = dict(layers=LLAMA_LAYERS, loss=f"{LLAMA}:loss", dtype="bf16", microbatch_size=2)
    real = profile_user_model(f"{LLAMA}:build", reps=1, warmup=0, **kw)
    fake = fake_profile_user_model(f"{LLAMA}:build", gpu_name="H100", **kw)
    assert fake.device == "H100-SXM5-80GB" and "roofline" in fake.provenance["compute_model"]
    b, s, dim = 2, 64, 128
    for r, f in zip(real.layers, fake.layers, strict=True):
        assert (r.name, r.act_bytes, r.out_bytes, r.param_bytes) == (
            f.name,
            f.act_bytes,
            f.out_bytes,
            f.param_bytes,
        )
    # both count the ops the host issues the same way (backends.torch.profile.op_count)
    assert [(r.fwd_ops, r.bwd_ops) for r in real.layers] == [
        (f.fwd_ops, f.bwd_ops) for f in fake.layers
    ]
    assert all(r.fwd_ops and r.bwd_ops for r in real.layers)
    block = fake.layers[1]
    hidden = int(8 * dim / 3)
    linear = 2 * b * s * (4 * dim * dim + 3 * dim * hidden)
    assert block.flops == linear + 4 * b * s * s * dim  # + QK^T and PV (FlopCounter formula)
    assert block.fwd_s > 0 and block.bwd_s > block.fwd_s


def test_single_gemm_roofline(tmp_path: Path) -> None:
    src = tmp_path / "gemm.py"
    src.write_text(
        "import torch\n\ndef build(microbatch_size=4096):\n"
        "    m = torch.nn.Sequential(torch.nn.Linear(8192, 8192, bias=False),\n"
        "                            torch.nn.Identity())  # the loss goes here\n"
        "    return m, torch.randn(microbatch_size, 8192)\n"
    )
    t = fake_profile_user_model(f"{src}:build", gpu_name="dgx-h100", dtype="bf16")
    flops = 2 * 4096 * 8192 * 8192
    assert t.layers[0].flops == flops
    peak, bw = 989.4e12, 3.35e12  # dgx-h100 preset (hardware.md §1)
    gemm = op_time_s(flops, 2 * (3 * 4096 * 8192), peak, bw)
    assert gemm == pytest.approx(flops / peak)  # compute bound
    assert t.layers[0].fwd_s == pytest.approx(gemm)  # one aten.mm; the transpose is a view


# --- Kineto ----------------------------------------------------------------------------------


def _ev(name: str, cat: str, ts: float, dur: float, tid: int = 1, **args: object) -> dict:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 1,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def test_kineto_cpu_hand_written_log(tmp_path: Path) -> None:
    bw = "autograd::engine::evaluate_function: "
    events = [_ev("ProfilerStep#0", "user_annotation", 0, 1000)]
    for step, t0 in enumerate((0.0, 500.0)):
        seq = 10 * step
        events += [
            _ev("a", "user_annotation", t0 + 10, 100 + step * 20),
            _ev("aten::mm", "cpu_op", t0 + 20, 50, **{"Sequence number": seq}),
            _ev("b", "user_annotation", t0 + 120, 40),
            _ev("aten::relu", "cpu_op", t0 + 125, 10, **{"Sequence number": seq + 1}),
            _ev(
                bw + "ReluBackward0",
                "cpu_op",
                t0 + 300,
                30 + step * 10,
                **{"Sequence number": seq + 1},
            ),
            _ev(bw + "MmBackward0", "cpu_op", t0 + 340, 80, **{"Sequence number": seq}),
        ]
    path = tmp_path / "k.json"
    path.write_text(json.dumps({"traceEvents": events}))
    t = read_kineto(path, microbatch_size=2)
    assert [x.name for x in t.layers] == ["a", "b"]
    assert t.layers[0].fwd_s == pytest.approx(110e-6) and t.layers[0].bwd_s == pytest.approx(80e-6)
    assert t.layers[1].fwd_s == pytest.approx(40e-6) and t.layers[1].bwd_s == pytest.approx(35e-6)
    assert t.device == "cpu" and t.layers[0].param_bytes == 0
    with pytest.raises(InputError, match="'zz'"):
        read_kineto(path, microbatch_size=2, layers=["a", "zz"])


def test_kineto_gpu_counts_kernels_by_correlation(tmp_path: Path) -> None:
    bw = "autograd::engine::evaluate_function: "
    events = [
        _ev("a", "user_annotation", 0, 100),
        _ev("aten::mm", "cpu_op", 5, 50, **{"Sequence number": 3}),
        _ev("cudaLaunchKernel", "cuda_runtime", 10, 5, correlation=7),
        _ev("gemm", "kernel", 200, 30, tid=7, correlation=7),
        _ev(bw + "MmBackward0", "cpu_op", 400, 60, tid=2, **{"Sequence number": 3}),
        _ev("cudaLaunchKernel", "cuda_runtime", 410, 5, tid=2, correlation=8),
        _ev("cudaLaunchKernel", "cuda_runtime", 420, 5, tid=2, correlation=9),
        _ev("gemm_dx", "kernel", 500, 25, tid=7, correlation=8),
        _ev("gemm_dw", "kernel", 530, 35, tid=7, correlation=9),
    ]
    path = tmp_path / "k.json"
    path.write_text(
        json.dumps({"traceEvents": events, "deviceProperties": [{"name": "NVIDIA H100 80GB HBM3"}]})
    )
    t = read_kineto(path, microbatch_size=1)
    assert t.layers[0].fwd_s == pytest.approx(30e-6) and t.layers[0].bwd_s == pytest.approx(60e-6)
    assert t.device == "NVIDIA H100 80GB HBM3"


def test_kineto_real_profiler_trace(tmp_path: Path) -> None:
    from torch.profiler import ProfilerActivity, profile, record_function

    from examples.cnn import build, loss

    model, x, y = build(2, image_size=16)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(2):
            h = x
            for name, layer in model.named_children():
                with record_function(name):
                    h = layer(h)
            loss(h, y).backward()
    prof.export_chrome_trace(str(tmp_path / "k.json"))
    code, out = _cli(
        "profile",
        "--model",
        f"{CNN}:build",
        "-b",
        2,
        "--for-gpu",
        "H100",
        "--out",
        tmp_path / "bytes",
    )
    assert code == 0, out
    code, out = _cli(
        "trace",
        "import-kineto",
        tmp_path / "k.json",
        "-b",
        2,
        "--out",
        tmp_path / "imp",
        "--bytes-from",
        tmp_path / "bytes.csv",
    )
    assert code == 0, out
    df = pd.read_csv(tmp_path / "imp.csv")
    assert list(df.name) == ["stem", "block1", "block2", "block3", "head"]
    assert (df.fwd_s > 0).all() and (df.bwd_s > 0).all() and df.param_bytes.iloc[0] > 0


# --- Hugging Face ---------------------------------------------------------------------------


def test_hf_chain_equals_the_hf_model(tmp_path: Path) -> None:
    pytest.importorskip("transformers")  # the optional extra: pip install -e '.[hf]'
    from transformers import AutoModelForCausalLM

    from backends.torch.models.hf import HFChain, load_config

    cfg = ROOT / "examples" / "hf" / "tiny-llama-config.json"
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(load_config(cfg), attn_implementation="sdpa")
    ids = torch.randint(0, 512, (2, 16))
    with torch.no_grad():
        ref = model(ids).logits
        chain = HFChain(model)(ids)
    torch.testing.assert_close(chain, ref)
    code, out = _cli(
        "profile",
        "--model",
        cfg,
        "--seq-len",
        16,
        "-b",
        2,
        "--for-gpu",
        "H100",
        "--out",
        tmp_path / "hf",
    )
    assert code == 0, out
    df = pd.read_csv(tmp_path / "hf.csv")
    assert list(df.name) == ["embed", "layer0", "layer1", "layer2", "layer3", "norm", "lm_head"]
    n_params = sum(p.numel() for p in model.parameters())
    assert df.param_bytes.sum() == 2 * n_params  # bf16


def test_llama2_7b_for_h100_without_a_gpu(tmp_path: Path) -> None:
    """6.7 B parameters under fake tensors: no memory for weights, closed-form counts."""
    pytest.importorskip("transformers")
    code, out = _cli(
        "profile",
        "--model",
        ROOT / "examples/hf/llama2-7b-config.json",
        "--seq-len",
        4096,
        "-b",
        1,
        "--for-gpu",
        "H100",
        "--out",
        tmp_path / "l7",
    )
    assert code == 0, out
    df = pd.read_csv(tmp_path / "l7.csv")
    h, f, v, n, s = 4096, 11008, 32000, 32, 4096
    params = n * (4 * h * h + 3 * h * f + 2 * h) + 2 * v * h + h  # Llama-2-7B: 6,738,415,616
    assert df.param_bytes.sum() == 2 * params  # bf16
    assert df.flops.iloc[1] == 2 * s * (4 * h * h + 3 * h * f) + 4 * s * s * h
    assert df.out_bytes.iloc[1] == 2 * s * h


# --- profile -> simulate -> replay on 2 CPU ranks -------------------------------------------


def _profile_run_validate(tmp_path: Path, model: str, extra: list, b: int) -> pd.DataFrame:
    code, out = _cli(
        "profile", "--model", model, *extra, "-b", b, "--reps", 3, "--out", tmp_path / "m"
    )
    assert code == 0, out
    exp = {
        "name": "mine",
        "hardware": str(ROOT / "sim/hardware/calibrated/cpu-2rank.yaml"),
        "models": [{"name": "mine", "trace": "m.csv", "global_batch": 4 * b, "microbatch_size": b}],
        "training": {"optimizer": "sgd"},
        "sweep": {"schedule": ["gpipe", "1f1b"], "stages": 2},
    }
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(exp))
    code, out = _cli(
        "run", tmp_path / "exp.yaml", "--out", tmp_path / "out", "--jobs", 1, "--no-plots"
    )
    assert code == 0, out
    code, out = _cli(
        "validate",
        tmp_path / "out" / "winner.yaml",
        "--nproc",
        2,
        "-s",
        "gpipe",
        "-s",
        "1f1b",
        "--iterations",
        2,
        "--torch-builtin",
    )
    assert code == 0, out
    return pd.read_csv(tmp_path / "out" / "validation.csv")


def _first_loss(ref: str, loss_ref: str, b: int, layers: tuple | None) -> float:
    from backends.torch.profile.user import prepare

    spec, um, chain, outs = prepare(
        ref, layers=layers, loss=loss_ref, microbatch_size=b, dtype="fp32"
    )
    from backends.torch.models.user import load_loss

    return float(load_loss(spec)(outs[-1], um.target))


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("which", ["cnn", "llama"])
def test_profile_simulate_replay_user_model(tmp_path: Path, which: str) -> None:
    if which == "cnn":
        model, extra, layers = f"{CNN}:build", ["--loss", f"{CNN}:loss"], None
        loss_ref, b = f"{CNN}:loss", 4
    else:
        model, loss_ref, b = f"{LLAMA}:build", f"{LLAMA}:loss", 2
        extra, layers = ["--loss", loss_ref, "--layers", ",".join(LLAMA_LAYERS)], LLAMA_LAYERS
    df = _profile_run_validate(tmp_path, model, extra, b)
    assert sorted(set(df.schedule)) == ["1f1b", "gpipe"]
    assert set(df.runtime) == {"ours", "torch"}  # torch's ScheduleGPipe / Schedule1F1B too
    assert df.all_actions_done.all() and df.losses_finite.all()
    assert all(math.isfinite(e) for e in df.error) and (df.measured_iteration_s > 0).all()
    assert (df.measured_peak_bytes > 0).all()
    # the replay's first loss is the single-process forward of the same FUNC and seed
    from backends.torch.replay.job import ReplayJob
    from tests.helpers import replay_in_turn

    trace_model = yaml.safe_load((tmp_path / "m.yaml").read_text())["provenance"]["model"]
    expected = _first_loss(model, loss_ref, b, layers)
    jobs = [
        ReplayJob(
            model=trace_model,
            stages=2,
            microbatches=2,
            microbatch_size=b,
            iterations=1,
            warmup_iterations=0,
            backend=backend,
            timeout_s=120,
            pg_timeout_s=60,
        )
        for backend in ("ours", "torch")
    ]
    for res in replay_in_turn(jobs):  # both replays in one launch of the two ranks
        assert res.losses[0] == pytest.approx(expected, rel=1e-5)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_user_model_replays_memory_policies(tmp_path: Path) -> None:
    from backends.torch.profile.user import prepare
    from backends.torch.replay.job import ReplayJob
    from tests.helpers import replay_in_turn

    spec, *_ = prepare(
        f"{LLAMA}:build", layers=LLAMA_LAYERS, loss=f"{LLAMA}:loss", microbatch_size=2, dtype="fp32"
    )
    peaks, losses = {}, {}
    policies = ("none", "recompute", "cpu_swap")
    jobs = [
        ReplayJob(
            model=spec.to_dict(),
            stages=2,
            microbatches=2,
            microbatch_size=2,
            iterations=1,
            warmup_iterations=0,
            memory_policy=policy,
            timeout_s=120,
            pg_timeout_s=60,
        )
        for policy in policies
    ]
    # the three replays one after another in one launch of the two ranks
    for policy, res in zip(policies, replay_in_turn(jobs), strict=True):
        assert res.all_actions_done
        peaks[policy] = [m["act_peak_bytes"] for m in res.memory]
        losses[policy] = res.losses
    assert all(r < n for r, n in zip(peaks["recompute"], peaks["none"], strict=True))
    assert peaks["cpu_swap"] == [0.0, 0.0]  # every saved tensor went to host memory
    assert losses["recompute"] == pytest.approx(losses["none"])  # same numbers, less memory


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_concurrent_profile_of_a_user_model(tmp_path: Path) -> None:
    code, out = _cli(
        "profile", "--model", f"{CNN}:nothing", "--concurrent", 2, "--out", tmp_path / "t"
    )
    assert code == 2 and "nothing" in out, out  # checked before any process starts
    code, out = _cli(
        "profile",
        "--model",
        f"{CNN}:build",
        "--loss",
        f"{CNN}:loss",
        "-b",
        2,
        "--reps",
        1,
        "--concurrent",
        2,
        "--out",
        tmp_path / "c",
    )
    assert code == 0, out
    meta = yaml.safe_load((tmp_path / "c.yaml").read_text())
    assert meta["provenance"]["concurrent_copies"] == 2
    assert meta["provenance"]["model"]["layers"] == ["stem", "block1", "block2", "block3", "head"]


def test_cpu_and_fake_profiles_count_the_same_flops() -> None:
    """A CPU profile counts the attention its blocks run (the CPU kernel FlopCounterMode
    lacks), as the --for-gpu analysis does: the same FLOPs per layer either way."""
    vit = str(ROOT / "examples" / "vit_shared.py")
    common = dict(layers=("embed", "blocks.*", "head"), loss=f"{vit}:loss", microbatch_size=2)
    cpu = profile_user_model(f"{vit}:build", warmup=0, reps=1, **common)
    fake = fake_profile_user_model(f"{vit}:build", gpu_name="H100", **common)
    assert [x.flops for x in cpu.layers] == [x.flops for x in fake.layers]
    # a block: 4 projections of 2 x 64 tokens x 64^2 + FFN 2 x 4 x 64^2 (x 2 FLOPs per MAC)
    # + attention 4 b s^2 d (scores and values) = 2*2*64*(4*64*64 + 8*64*64) + 4*2*64*64*64
    assert cpu.layers[1].flops == 2 * 2 * 64 * 12 * 64 * 64 + 4 * 2 * 64 * 64 * 64


def test_an_analysed_trace_says_it_is_an_estimate_and_from_what(tmp_path: Path) -> None:
    from backends.torch.profile.fake import resolve_gpu

    _, gpu = resolve_gpu("H100")
    peak = f"{gpu.peak_flops / 1e12:.0f} TFLOP/s"
    code, out = _cli("profile", "--model", f"{CNN}:build", "-b", 2, "--for-gpu", "H100",
                     "--out", tmp_path / "h")  # fmt: skip
    flat = " ".join(out.split())
    assert code == 0 and "ESTIMATE, not measured: FakeTensorMode" in flat, out
    assert peak in flat and gpu.model in flat, out
    code, out = _cli("trace", "show", tmp_path / "h.csv")
    flat = " ".join(out.split())
    assert code == 0 and "ESTIMATE, not measured" in flat and peak in flat, out
    code, out = _cli("profile", "--model", f"{CNN}:build", "-b", 2, "--reps", 1,
                     "--out", tmp_path / "c")  # fmt: skip
    assert code == 0 and "ESTIMATE" not in out, out


def test_a_trace_naming_a_moved_module_still_loads():
    """Traces profiled before issue 25 name ``backends.torch.hf``; the spec reads the module's
    current path (``backends.torch.models.hf``), which the expert/context replay recognises."""
    from backends.torch.models.user_spec import UserModelSpec, current_ref
    from backends.torch.replay.group import HF_BUILD

    spec = UserModelSpec.from_dict(
        {"kind": "user", "source": "backends.torch.hf:build", "loss": "backends.torch.hf:loss"}
    )
    assert (spec.source, spec.loss) == (HF_BUILD, "backends.torch.models.hf:loss")
    assert current_ref("pkg.mod:f") == "pkg.mod:f"
