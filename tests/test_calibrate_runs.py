"""``sim calibrate --from-runs``: a parameter changed in the simulator is recovered from runs the
simulator itself generated with it (sim.calibrate_runs), and the overlay applies in sim run."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sim import api
from sim.calibrate_runs import fit, mape, overlay_document
from sim.cli import app
from sim.errors import InputError
from sim.import_runs import import_runs
from sim.runs.express import Expressed, express
from sim.runs.megatron_args import read_megatron
from sim.runs.predict import Predictor
from sim.runs.record import Measured, MeasuredRun

TRUE_GEMM = 0.65
"""The 'cluster's' GEMM efficiency; the dgx-h100 preset says 0.801."""
LAYOUTS = [(1, 1, 2), (2, 1, 1), (4, 1, 2), (8, 1, 1), (2, 2, 1), (1, 2, 4)]
"""(tp, pp, micro-batch) of the synthetic runs on 8 GPUs."""


def synthetic_runs(overlay: dict) -> list[MeasuredRun]:
    """Runs of a two-layer Llama-70B-wide model on one DGX H100, 'measured' by the simulator with
    ``overlay`` (wide enough that the GEMMs, not the host's ops, set the iteration time)."""
    runs = []
    predictor = Predictor(overlay)
    for tp, pp, mbs in LAYOUTS:
        flags = {"num-layers": 2, "hidden-size": 8192, "num-attention-heads": 64,
                 "ffn-hidden-size": 28672, "swiglu": True, "seq-length": 4096,
                 "vocab-size": 32000, "untie-embeddings-and-output-weights": True,
                 "tensor-model-parallel-size": tp, "pipeline-model-parallel-size": pp,
                 "micro-batch-size": mbs, "global-batch-size": 32, "bf16": True,
                 "use-distributed-optimizer": True}  # fmt: skip
        run = read_megatron(flags, name=f"tp{tp}pp{pp}b{mbs}", source="synthetic", gpu="H100",
                            num_gpus=8)  # fmt: skip
        ex = express(run)
        assert isinstance(ex, Expressed)
        t = predictor.predict(ex).iteration_time_s
        runs.append(run.with_measured(Measured(iteration_time_s=t, time_rule="simulated")))
    return runs


def test_recovers_a_changed_gemm_efficiency(tmp_path):
    runs = synthetic_runs({"gpu": {"matmul_efficiency": TRUE_GEMM}})
    result = fit(runs, only=["gemm"])
    assert result.hardware == "dgx-h100" and result.priors["gemm"] == pytest.approx(0.801)
    assert result.values["gemm"] == pytest.approx(TRUE_GEMM, rel=0.01)
    assert 0 < result.std["gemm"] < 0.05
    assert mape(result.uncalibrated) > 0.05  # the preset is 5-12 % too fast on these runs
    assert mape(result.calibrated) < 0.01 and mape(result.leave_one_out) < 0.02
    doc = overlay_document(result, ["synthetic"])
    assert doc["gpu"]["matmul_efficiency"] == pytest.approx(result.values["gemm"])
    assert doc["calibration"]["error"]["calibrated_mape"] < 0.01
    assert "overlap_efficiency" in doc["calibration"]["not_fitted"]


def test_unchanged_preset_fits_to_itself_and_insensitive_parameters_are_kept():
    runs = synthetic_runs({})
    result = fit(runs, only=["gemm", "network_latency"])
    assert result.values["gemm"] == pytest.approx(0.801, rel=0.002)
    assert result.not_fitted["network_latency"] == "no run crosses servers"


def test_overlay_applies_in_sim_run(tmp_path):
    runs = synthetic_runs({"gpu": {"matmul_efficiency": TRUE_GEMM}})
    overlay = tmp_path / "cluster.yaml"
    doc = overlay_document(fit(runs, only=["gemm"]), ["synthetic"])
    overlay.write_text(yaml.safe_dump(doc))
    golden = Path(__file__).parent / "data" / "runs" / "megatron_llama_tp2_pp2.log"
    (item,) = import_runs([golden], out=tmp_path / "exp", gpu="H100")
    plain = api.plan(item.experiment).rows[0].iteration_time_s
    out = api.run(item.experiment, out=tmp_path / "res", plots=False, cache=False,
                  hardware_overlay=overlay)  # fmt: skip
    slower = out.results.iteration_time_s.iloc[0]
    # a lower GEMM efficiency: a slower iteration (this small model is host-bound on an H100,
    # so by little: the GEMMs run beside the host's ops), and the resolved hardware carries it
    assert slower > plain
    resolved = yaml.safe_load((tmp_path / "res" / "config.resolved.yaml").read_text())
    assert str(doc["gpu"]["matmul_efficiency"])[:6] in yaml.safe_dump(resolved)


def test_bad_inputs(tmp_path):
    with pytest.raises(InputError, match="no run can be fitted"):
        fit([MeasuredRun(name="x", source="s")])
    runs = synthetic_runs({})
    with pytest.raises(InputError, match="unknown parameter"):
        fit(runs, only=["warp_speed"])
    bad = tmp_path / "o.yaml"
    bad.write_text("gpu: {peak_flops: 1}\n")
    exp = Path(__file__).resolve().parents[1] / "experiments" / "dgx1.yaml"
    res = CliRunner().invoke(app, ["run", str(exp), "--hardware-overlay", str(bad), "--out",
                                   str(tmp_path / "r")])  # fmt: skip
    assert res.exit_code == 2 and "o.yaml" in res.output and "gpu.peak_flops" in res.output
    res = CliRunner().invoke(app, ["calibrate", "--from-runs", "--out", str(tmp_path / "c.yaml")])
    assert res.exit_code == 2 and "argument 'RUN'" in res.output
