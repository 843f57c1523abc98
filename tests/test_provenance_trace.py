"""`sim trace show` says where the kernel model's GPU figures of an analytic trace come from
(sim.hardware.gpu_compute.spec_sources, sim.trace.origin.gpu_figure_sources)."""

from __future__ import annotations

from dataclasses import replace

from typer.testing import CliRunner

from sim.cli import app
from sim.hardware.gpu_compute import PRESET_SOURCE, SOURCES, spec_sources
from sim.trace.generator import preset_gpu
from sim.trace.loader import load_trace
from sim.trace.origin import gpu_figure_sources
from sim.trace.shipped import DEVICE_PRESET, device_note


def test_defaults_cite_sources_and_preset_figures_point_to_the_description():
    spec = {"model": "X", "matmul_flops": 1e15, "hbm_efficiency": 0.85, "kernel_overhead_s": 5e-6}
    got = spec_sources(spec)
    assert set(got) == {"matmul_flops", "hbm_efficiency", "kernel_overhead_s"}  # no "model"
    assert got["matmul_flops"] == PRESET_SOURCE
    assert got["hbm_efficiency"] == SOURCES["hbm_efficiency"]
    assert got["kernel_overhead_s"].startswith("assumption")
    assert spec_sources({"hbm_efficiency": 0.9})["hbm_efficiency"] == PRESET_SOURCE  # set by one


def test_analytic_trace_lists_its_gpu_figures_measured_one_none():
    rows = {k: (v, s) for k, v, s in gpu_figure_sources(load_trace("gpt2-1.5b"))}
    assert rows["kernel_overhead_s"] == ("5e-06", SOURCES["kernel_overhead_s"])
    assert rows["matmul_flops"][0] == "125000000000000.0"
    assert gpu_figure_sources(load_trace("gnmt16")) == []  # PipeDream's measured profile


def test_trace_show_prints_the_sources_table():
    result = CliRunner().invoke(app, ["trace", "show", "gpt2-1.5b"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "the kernel model's GPU figures (provenance.inputs.gpu): sources" in result.output
    assert "te42kyfo/gpu-benches@cdcc732" in result.output


def test_shipped_trace_note_names_the_unsourced_default_figures():
    note = device_note(preset_gpu(DEVICE_PRESET))  # V100: both at their defaults
    assert "cites every number" not in note
    assert "HBM efficiency 0.85: an A100 STREAM measurement" in note
    assert "5 us per kernel: an assumption" in note
    own = replace(preset_gpu(DEVICE_PRESET), hbm_efficiency=0.8, kernel_overhead_s=3e-6)
    assert "cites every number" in device_note(own) and "STREAM" not in device_note(own)


def test_shipped_analytic_traces_notes_do_not_claim_every_number_cited():
    notes = " ".join(load_trace("gpt3-8b").provenance["notes"].split())
    assert "cites every number" not in notes and "5 us per kernel: an assumption" in notes
