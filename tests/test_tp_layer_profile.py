"""The tensor-parallel block overhead measured in the replay's layout (sim profile --tensor-parallel)."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

from backends.torch.calibrate.tp_layers import overhead, rank_share
from backends.torch.calibrate.tp_overhead import measure
from backends.torch.models.transformer import build_layers
from backends.torch.parallel.tensor import TPBlock
from sim.cli import app

TINY = dict(name="tiny", kind="gpt", layers=2, hidden=32, heads=4, seq_len=16, vocab=64)


def test_overhead_is_what_neither_the_share_nor_the_collectives_explain():
    assert overhead(10e-3, 4e-3, 2e-3) == pytest.approx(4e-3)
    assert overhead(5e-3, 4e-3, 2e-3) == 0.0  # noise never makes a block cheaper


def test_the_rank_shares_add_up_to_the_blocks_linears():
    """Rank r's plain share holds rows r*n/t.. of the column-parallel linears and columns of
    the row-parallel ones: the shares' outputs concatenate (column) or sum, less the t-1
    extra biases (row), to the whole linear's."""
    torch.manual_seed(0)
    t, layers = 2, build_layers(TINY, 0)
    whole = TPBlock(layers[1], 8, t)  # type: ignore[arg-type]
    shares = [rank_share(TPBlock(layers[1], 8, t), r, t) for r in range(t)]  # type: ignore[arg-type]
    x, z = torch.randn(3, 32), torch.randn(3, 128)
    cat = torch.cat([s.qkv(x) for s in shares], -1)
    assert torch.allclose(cat, whole.qkv(x), atol=1e-6)
    parts = [s.fc2(z[:, r * 64 : (r + 1) * 64]) for r, s in enumerate(shares)]
    assert torch.allclose(sum(parts) - (t - 1) * whole.fc2.bias, whole.fc2(z), atol=1e-5)


def test_tensor_parallel_refuses_a_split_the_replay_cannot_run(tmp_path):
    out = tmp_path / "t"
    res = CliRunner().invoke(app, ["profile", "--out", str(out), "--layers", "1", "--hidden", "32",
                                   "--heads", "4", "--seq-len", "16", "--vocab", "64",
                                   "--tensor-parallel", "3"])  # fmt: skip
    assert res.exit_code == 2, res.output
    assert "--tensor-parallel" in res.output and "heads" in res.output
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_measure_two_gloo_ranks_gives_every_size_and_kind_with_and_without_sp():
    entries = measure(TINY, 2, [1, 2], threads=1, reps=2, timeout_s=240)
    keys = [(e["sequence_parallel"], e["microbatch_size"]) for e in entries]
    assert keys == [(False, 1), (False, 2), (True, 1), (True, 2)]
    for e in entries:
        for kind in ("embedding", "block", "head"):
            raw = e[f"{kind}_raw_s"]
            (sf, sb), (lf, lb), (cf, cb) = raw["sharded"], raw["local"], raw["comm"]
            assert min(sf, sb, lf, lb) > 0
            assert e[f"{kind}_fwd_s"] == overhead(sf, lf, cf)
            assert e[f"{kind}_bwd_s"] == overhead(sb, lb, cb)
