"""`sim memory`'s memory.csv and memory_ranks.png say what their figures are predicted with
(a ``source`` column; a footnote: sim.report.provenance)."""

from __future__ import annotations

import pandas as pd

import sim.api
from sim.hardware.capacity import MIB, NO_RESERVE, RuntimeReserve
from sim.hardware.provenance import reserve_source
from sim.report.memory_ranks import memory_frame
from tests.helpers import small_gpt2_1f1b

SMALL = small_gpt2_1f1b(global_batch=64)
WANT = (
    "pipesim prediction (simulated, not measured): hardware dgx1-v100-16gb (sources: sim "
    "hardware show dgx1-v100-16gb), analytic trace gpt2-1.5b"
)


def test_memory_csv_has_the_source_of_each_models_figures(tmp_path):
    answer = sim.api.memory(SMALL, out=tmp_path, plots=False)
    csv = pd.read_csv(tmp_path / "memory.csv")
    assert len(csv) == 8 and set(csv["source"]) == {WANT}  # one row per pipeline rank
    assert set(memory_frame(answer.results)["source"]) == {""}  # no sources given: empty


def test_reserve_source_labels_the_cuda_context_estimate_an_assumption():
    default = reserve_source(RuntimeReserve())
    assert default.startswith("CUDA context 400 MiB: assumption") and "unverified" in default
    assert "4 channels (assumption" in default and "NCCL_BUFFSIZE default" in default
    own = reserve_source(RuntimeReserve(cuda_context_bytes=300 * MIB, nccl_channels=2))
    assert own.startswith("CUDA context 300 MiB: set by the hardware description")
    assert "2 channels (set by" in own and "assumption" not in own
    assert reserve_source(NO_RESERVE).startswith("none")


def test_memory_csv_labels_reserve_bytes_per_row(tmp_path):
    sim.api.memory(SMALL, out=tmp_path, plots=False)
    csv = pd.read_csv(tmp_path / "memory.csv")
    assert set(csv["reserve_source"]) == {reserve_source(RuntimeReserve())}  # V100: defaults
    assert (csv["reserve_bytes"] > 0).all()
