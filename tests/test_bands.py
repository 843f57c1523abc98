"""Prediction bands (sim/bands.py, sim/report/row_bands.py) and the shipped bands' freshness."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from sim.bands import Bands, Residual, build_bands, format_bands, parse_bands, quantile
from sim.report.row_bands import bands_for, with_bands

REGENERATE = "python benchmarks/accuracy/make_bands.py"


def test_quantile_is_linear_between_order_statistics():
    # numpy's default: position q (n - 1) = 0.3 between 1 and 2, 1.5 between 2 and 3
    assert quantile([4, 1, 3, 2], 0.1) == pytest.approx(1.3)
    assert quantile([4, 1, 3, 2], 0.5) == pytest.approx(2.5)
    assert quantile([7], 0.9) == 7


def _hand_made() -> Bands:
    rs = [Residual("A", 1, 1, 1.0 + i / 10) for i in range(10)]  # 1.0 .. 1.9
    rs += [Residual("A", 1, 2, 2.0)] * 3
    rs += [Residual("A", 2, 4, 3.0)] * 8
    rs += [Residual("B", 2, 1, 4.0)] * 4
    return Bands(build_bands(rs, min_points=10))


def test_lookup_takes_the_finest_regime_with_enough_points():
    bands = _hand_made()
    own = bands.lookup("A", 1, 1)
    assert own.label() == "A t=1 b=1 (n=10)"
    # q10: position 0.9 between 1.0 and 1.1; q90: position 8.1 between 1.8 and 1.9
    assert (own.ratio_low, own.ratio_high) == pytest.approx((1.09, 1.81))
    assert bands.lookup("A", 1, 2).label() == "A t=1 (n=13)"  # 3 of its own: (A, t)
    assert bands.lookup("A", 2, 4).label() == "A (n=21)"  # (A, t=2) has 8: (A)
    pooled = bands.lookup("B", 2, 1)  # B has 4 in all: t=2 over every framework
    assert pooled.label() == "all frameworks t=2 (n=12)"
    assert (pooled.ratio_low, pooled.ratio_high) == (3.0, 4.0)
    assert bands.lookup("C", 8, 1).label() == "all (n=25)"
    assert Bands([]).lookup("A", 1, 1) is None


def test_band_of_a_prediction_scales_by_the_ratios():
    band = _hand_made().lookup("A", 1, 1)
    assert band.time_s(2.0) == pytest.approx((2.18, 3.62))
    assert band.throughput(100.0) == pytest.approx((100 / 1.81, 100 / 1.09))
    # predicted / measured - 1 = 1 / ratio - 1, averaged over 1.0 .. 1.9
    errors = [1 / (1 + i / 10) - 1 for i in range(10)]
    assert band.signed_error == pytest.approx(sum(errors) / 10)
    assert band.mape == pytest.approx(-sum(errors) / 10)


def test_bands_file_round_trips():
    bands = build_bands([Residual("A", 1, 1, 1.0 + i / 7, "x") for i in range(10)])
    back = parse_bands(format_bands(bands, ["made here"]))
    assert [b.label() for b in back] == [b.label() for b in bands]
    assert back[0].ratio_high == pytest.approx(bands[0].ratio_high, abs=1e-4)
    assert back[0].sources == "x"


def test_rows_within_the_winners_band():
    bands = Bands(build_bands([Residual("pipesim", 1, 1, 1.0 + i / 18) for i in range(10)]))
    # ratios 1.0 .. 1.5: p10 = 1.05, p90 = 1.45; a throughput T has the band T/1.45 .. T/1.05
    df = pd.DataFrame(
        {
            "model": "m",
            "framework": "pipesim",
            "tensor_parallel": 1,
            "microbatch_size": 1,
            "microbatches": [4, 8, 16, 2],
            "fits": [True, True, True, False],
            "error": "",
            "iteration_time_s": [1.0, 1.25, 2.0, 0.5],
            "throughput_samples_per_s": [100.0, 80.0, 50.0, 200.0],
        }
    )
    out = with_bands(df, bands)
    assert out.throughput_low_samples_per_s[0] == pytest.approx(100 / 1.45)
    assert out.iteration_time_high_s[1] == pytest.approx(1.25 * 1.45)
    # winner 68.97 .. 95.24; 80 -> 55.17 .. 76.19 overlaps; 50 -> 34.5 .. 47.6 does not;
    # the faster row that does not fit is never "within"
    assert list(out.within_winner_band) == [False, True, False, False]
    assert set(out.band_source) == {"pipesim t=1 b=1 (n=10)"}


def test_rows_without_a_prediction_get_no_band():
    bands = Bands(build_bands([Residual("pipesim", 1, 1, 1.2)] * 10))
    df = pd.DataFrame(
        {
            "model": ["m"],
            "framework": ["pipesim"],
            "tensor_parallel": [1],
            "microbatch_size": [1],
            "fits": [False],
            "error": ["pruned: memory lower bound"],
            "iteration_time_s": [None],
            "throughput_samples_per_s": [None],
        }
    )
    out = with_bands(df, bands)
    assert math.isnan(out.throughput_low_samples_per_s[0]) and out.band_source[0] == ""


def test_readme_table_is_the_shipped_bands():
    from benchmarks.accuracy.make_bands import BANDS, BEGIN, END, README, markdown_table

    text = README.read_text(encoding="utf-8")
    table = text[text.index(BEGIN) + len(BEGIN) : text.index(END)].strip()
    shipped = markdown_table(parse_bands(BANDS.read_text(encoding="utf-8")))
    assert table == shipped, f"README.md's accuracy table is stale: run `{REGENERATE}`"


@pytest.mark.slow
def test_shipped_bands_are_the_validation_residuals():
    """A model change that moves the residuals must regenerate the bands (and the README)."""
    from benchmarks.accuracy.make_bands import regenerate, stale

    problems = stale(*regenerate())
    assert not problems, "; ".join(problems) + f": regenerate with `{REGENERATE}`"


def test_run_writes_the_band_with_each_prediction(tmp_path):
    import yaml

    import sim.api
    from sim.bands import shipped_bands

    exp = {
        "name": "b",
        "hardware": "dgx1-v100-16gb",
        "models": [{"name": "bert", "trace": "bert-large", "global_batch": 32}],
        "sweep": {"schedule": ["gpipe", "1f1b"], "stages": 4, "microbatch_size": 4},
    }
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(exp))
    sim.api.run(tmp_path / "b.yaml", out=tmp_path / "out", plots=False)
    df = pd.read_csv(tmp_path / "out" / "results.csv")
    band = shipped_bands().lookup("pipesim", 1, 4)
    assert list(df.band_source) == [band.label()] * 2
    lo, hi = band.time_s(1.0)
    assert df.iteration_time_low_s.tolist() == pytest.approx((df.iteration_time_s * lo).tolist())
    assert df.iteration_time_high_s.tolist() == pytest.approx((df.iteration_time_s * hi).tolist())
    pred = yaml.safe_load((tmp_path / "out" / "winner.yaml").read_text())["prediction"]
    assert pred["band_source"] == band.label()
    assert pred["throughput_low_samples_per_s"] == pytest.approx(
        pred["throughput_samples_per_s"] / band.ratio_high
    )
    assert pred["within_band"]["count"] == int(df.within_winner_band.sum())


def test_cpu_ranks_get_no_band_gpus_the_shipped_ones():
    # the shipped bands come from whole iterations on GPU servers only
    assert bands_for(["cpu-rank", "cpu-rank"]).lookup("pipesim", 1, 4) is None
    assert bands_for(["A100-SXM4-40GB"]).lookup("pipesim", 1, 4) is not None
