"""`sim memory`'s memory.csv and memory_ranks.png say what their figures are predicted with
(a ``source`` column; a footnote: sim.report.provenance)."""

from __future__ import annotations

import pandas as pd

import sim.api
from sim.report.memory_ranks import memory_frame

SMALL = {
    "name": "small",
    "hardware": "dgx1-v100-16gb",
    "models": [{"name": "gpt", "trace": "gpt2-1.5b", "global_batch": 64, "microbatch_size": 1}],
    "sweep": {"schedule": "1f1b", "stages": 8, "dp_width": 1, "memory_policy": "none"},
}
WANT = (
    "pipesim prediction (simulated, not measured): hardware dgx1-v100-16gb (sources: sim "
    "hardware show dgx1-v100-16gb), analytic trace gpt2-1.5b"
)


def test_memory_csv_has_the_source_of_each_models_figures(tmp_path):
    answer = sim.api.memory(SMALL, out=tmp_path, plots=False)
    csv = pd.read_csv(tmp_path / "memory.csv")
    assert len(csv) == 8 and set(csv["source"]) == {WANT}  # one row per pipeline rank
    assert set(memory_frame(answer.results)["source"]) == {""}  # no sources given: empty
