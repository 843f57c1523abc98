"""``sim validate`` of expert- and context-parallel configurations.

Fast: what the torch replayer refuses (one stage, no tensor parallelism, ``dp_width = ep``,
the CP comms it runs, a Hugging Face model), and the losses check of ``validation.csv``.
Slow: profile the tiny Mixtral config, then ``sim validate`` an EP 2 and a CP 2 (ring)
configuration on 2 gloo ranks: equal losses to one process, time and memory errors reported.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from backends.torch.replay.group import group_problems, one_process_losses
from sim.replay import ReplayRequest
from sim.validate.table import LOSS_RTOL, loss_max_rel_diff

REPO = Path(__file__).resolve().parents[1]
HF = {
    "kind": "user",
    "source": "backends.torch.models.hf:build",
    "kwargs": {"config": "c.json", "seq_len": 32},
}


def _fields(**kw) -> list[str]:
    base = dict(model=HF, boundaries=(0,), schedule="1f1b", stages=1, microbatches=2)
    return [p.field for p in group_problems(ReplayRequest(**{**base, "microbatch_size": 2, **kw}))]


def test_group_replay_refuses_what_it_does_not_run():
    assert _fields(dp_width=2, expert_parallel=2) == []
    assert _fields(context_parallel=2, context_parallel_comm="p2p") == []
    assert _fields(dp_width=4, expert_parallel=2) == ["dp_width"]
    assert _fields(stages=2, context_parallel=2, tensor_parallel=2) == ["stages", "tensor_parallel"]
    assert _fields(context_parallel=2, context_parallel_comm="ring") == ["context_parallel_comm"]
    assert _fields(context_parallel=3) == ["model"]  # 32 tokens do not split in 2 x 3 chunks
    gpt = {"layers": 2, "hidden": 32, "heads": 2, "seq_len": 8, "vocab": 64}
    assert _fields(model=gpt, dp_width=2, expert_parallel=2) == ["model"]


def test_losses_one_process_sees():
    # EP: each rank's own micro-batches, rank by rank; CP: the mean of the ranks' halves
    assert one_process_losses("expert", [[1.0, 2.0], [3.0, 4.0]]) == [1.0, 2.0, 3.0, 4.0]
    assert one_process_losses("context", [[1.0, 2.0], [3.0, 6.0]]) == [2.0, 4.0]
    assert math.isnan(loss_max_rel_diff([1.0], []))
    assert loss_max_rel_diff([1.0], [1.0, 2.0]) == math.inf
    assert loss_max_rel_diff([2.0, 4.0004], [2.0, 4.0]) == pytest.approx(1e-4)
    assert LOSS_RTOL == 1e-4


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_validate_replays_ep_and_cp_with_equal_losses(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from sim.cli import app

    runner = CliRunner()

    def ok(*args):
        res = runner.invoke(app, [str(a) for a in args])
        assert res.exit_code == 0, res.output
        return res.output

    config = REPO / "examples/hf/tiny-mixtral-config.json"
    ok("profile", "--model", config, "--seq-len", 32, "-b", 2, "--reps", 2, "--out", tmp_path / "t")
    cases = {
        "ep": {"dp_width": 2, "expert_parallel": 2},
        "cp": {"dp_width": 1, "context_parallel": 2, "context_parallel_comm": "p2p"},
    }
    for name, sweep in cases.items():
        exp = {
            "name": name,
            "hardware": str(REPO / "sim/hardware/calibrated/cpu-2rank.yaml"),
            "models": [{"name": "t", "trace": "t.csv", "global_batch": 4 * sweep["dp_width"]}],
            "training": {"optimizer": "sgd"},
            "sweep": {"schedule": "1f1b", "stages": 1, "microbatch_size": 2, **sweep},
        }
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(exp))
        ok("validate", tmp_path / f"{name}.yaml", "--iterations", 2, "--out", tmp_path / name)
        row = pd.read_csv(tmp_path / name / "validation.csv").iloc[0]
        assert row["mode"] == {"ep": "expert_parallel", "cp": "context_parallel"}[name]
        assert row.losses_match and row.loss_max_rel_diff <= LOSS_RTOL and row.all_actions_done
        assert math.isfinite(row.error) and math.isfinite(row.memory_error)
