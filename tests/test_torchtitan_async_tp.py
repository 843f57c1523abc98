"""torchtitan's AsyncTP (``enable_async_tensor_parallel`` with ``compile.enable``) read as the
torchtitan profile's AsyncTP overlap (:mod:`sim.runs.torchtitan_async_tp`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from sim.config import parse_experiment
from sim.plan.point_row import point_row
from sim.point.experiment import Prepared
from sim.runs.express import Expressed, NotExpressed, express
from sim.runs.measured_csv import read_measured_csv
from sim.runs.predict import Predictor, build_trace, experiment_of, point_of

SAMPLE = Path(__file__).resolve().parent / "data" / "runs" / "measured_sample.csv"
# a 2-layer Llama-like block at h = 8192, s = 2048, b = 1 on 2 H100s, tp 2 (sequence parallel)
ROW = dict(gpu="H100", precision="BF16", num_gpus=2, tp=2, dp=1, fsdp=1, mbs=1, gbs=1,
           hidden=8192, ffn_hidden=28672, heads=64, kv_heads=8, layers=2, vocab=32000,
           seq_len=2048)  # fmt: skip


def torchtitan_row(tmp_path: Path, framework: str):
    df = pd.read_csv(SAMPLE).iloc[[1]].copy()
    for k, v in (ROW | {"framework": framework}).items():
        df[k] = v
    path = tmp_path / "rows.csv"
    df.to_csv(path, index=False)
    return read_measured_csv(path)[0]


def simulated(ex: Expressed):
    """(iteration seconds, exposed TP seconds, exposed TP bytes) of gpu0, whole log."""
    p = Predictor()
    topo = p.topology(ex.hardware, ex.overlay)
    exp = parse_experiment(experiment_of(ex, p.hardware(ex.hardware, ex.overlay), ex.model))
    prep = Prepared(exp, "<test>", topo, {ex.model: build_trace(ex, topo)})
    row, log = point_row(prep, point_of(ex))
    tp = [e for e in log.events if e.device == "gpu0" and e.name.startswith("tp ")]
    exposed = [e for e in tp if not e.name.endswith("overlapped")]
    iters = len(log.iteration_ends_s)
    return (row.iteration_time_s, sum(e.end_s - e.start_s for e in exposed) / iters,
            sum(e.nbytes for e in exposed) / iters)  # fmt: skip


def test_async_tp_hides_the_blocks_tp_collectives(tmp_path):
    # torchtitan refuses AsyncTP without compile (distributed/tensor_parallel.py@238fa9953e)
    eager = express(torchtitan_row(tmp_path, "torchtitan (async TP)"))
    assert isinstance(eager, NotExpressed) and any("requires" in r for r in eager.reasons)
    plain = express(torchtitan_row(tmp_path, "torchtitan (torch.compile)"))
    run = torchtitan_row(tmp_path, "torchtitan (torch.compile, async TP)")
    ex = express(run)
    assert isinstance(plain, Expressed) and isinstance(ex, Expressed)
    assert ex.framework == "torchtitan[compile=true,enable_async_tensor_parallel=true]"
    assert any("AsyncTP" in a and "copy engines" in a for a in ex.approximations)
    t_plain, exposed_plain_s, bytes_plain = simulated(plain)
    t_async, exposed_async_s, bytes_async = simulated(ex)
    # Per iteration (m = 1) each of the 2 blocks gathers / reduce-scatters b s h x 2 B =
    # 2048 x 8192 x 2 = 32 MiB four times (attention and MLP; forward all-gather and
    # reduce-scatter, backward all-gather and reduce-scatter): 16 x 32 MiB = 512 MiB, no longer
    # exposed; what stays exposed is outside the compiled blocks (embedding, output, loss).
    assert bytes_plain - bytes_async == 16 * 2048 * 8192 * 2
    assert exposed_async_s < 0.25 * exposed_plain_s
    # the step gains at most the exposed time it lost (the chunked GEMMs' tile losses remain)
    assert 0.0 < t_plain - t_async <= exposed_plain_s - exposed_async_s
