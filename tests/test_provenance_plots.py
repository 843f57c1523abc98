"""The winner's plots and timeline say they are a prediction and with what
(sim.report.provenance: prediction_source, stamped)."""

from __future__ import annotations

from matplotlib.figure import Figure

from sim.events import EventLog
from sim.report.provenance import META_KEY, PREDICTED, prediction_source, stamped


def _plot(log: EventLog, path: object) -> Figure:
    fig = Figure(figsize=(4.0, 3.0))
    ax = fig.add_subplot()
    ax.set_xlabel("GPU")
    return fig


def test_prediction_source_names_hardware_trace_and_origin():
    got = prediction_source("dgx1-v100-16gb", "gpt2-1.5b", "analytic")
    assert got.startswith(PREDICTED) and "not measured" in PREDICTED
    assert "hardware dgx1-v100-16gb (sources: sim hardware show dgx1-v100-16gb)" in got
    assert got.endswith("analytic trace gpt2-1.5b")


def test_stamped_writes_the_source_under_the_axes(tmp_path):
    log = EventLog(events=[], iteration_ends_s=[])
    assert [t.get_text() for t in stamped(_plot, log, None).texts] == []  # nothing recorded
    log.meta[META_KEY] = "pipesim prediction (simulated, not measured): x"
    fig = stamped(_plot, log, tmp_path / "p.png")
    (text,) = fig.texts
    assert text.get_text() == log.meta[META_KEY]
    renderer = fig.canvas.get_renderer()
    under = fig.axes[0].get_tightbbox(renderer).y0  # below the x label, not over it
    assert text.get_window_extent(renderer).y1 <= under
    assert (tmp_path / "p.png").stat().st_size > 0


def test_footnote_skips_hidden_axes():
    # a grid's spare panel is hidden: its get_tightbbox is None, which ended the run of
    # experiments/megatron-scaling.yaml (internal error, rc 3); the footnote goes under the
    # visible panel
    from sim.report.provenance import footnote

    fig = Figure(figsize=(4.0, 3.0))
    shown, hidden = fig.subplots(1, 2)
    hidden.set_visible(False)
    footnote(fig, "note")
    (text,) = fig.texts
    assert text.get_text() == "note" and text.get_position()[1] < shown.get_position().y0
