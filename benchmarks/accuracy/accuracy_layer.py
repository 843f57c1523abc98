"""One layer of Megatron-LM's 22B model against its authors' measurement (Korthikanti et al.).

Data: ``measurements/megatron-layer/table4.csv`` (arXiv:2205.05198, Table 4: forward and backward
milliseconds of one transformer layer of the 22B model, h 6144, 64 heads, s 2048, b 4, t 8, on
one DGX A100 node; provenance in its README). Predicted: the kernel model
(:func:`sim.compute.transformer.block_times`, Megatron's math attention core, causal, with
dropout) on ``dgx-a100-80gb``'s GPU, plus the layer's tensor-parallel collectives as the preset
times them (:func:`sim.comm.hierarchical.collective_plan` over the node's 8 GPUs: its
measured all-reduce tables): two all-reduces of ``b s h`` 16-bit values per pass, or with
sequence parallelism two all-gathers and two reduce-scatters; serial with the compute (the
engine does not overlap a tensor-parallel collective with the kernels of its own layer). Full
recompute adds the forward (its collectives included) to the backward; selective recompute adds
the attention core's forward kernels (QK^T, softmax, dropout, attention over V).

Nothing is fitted: this checks the kernel model on a GEMM-dominated shape, apart from any whole
iteration. Run: ``python benchmarks/accuracy/accuracy_layer.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sim.comm.hierarchical import collective_plan  # noqa: E402
from sim.compute.attention import attention_fwd  # noqa: E402
from sim.compute.kernels import phase_time  # noqa: E402
from sim.compute.transformer import BlockShape, block_times  # noqa: E402
from sim.hardware.loader import load_hardware  # noqa: E402

DATA = ROOT / "measurements" / "megatron-layer" / "table4.csv"
PRESET = "dgx-a100-80gb"
SHAPE = BlockShape(hidden=6144, heads=64, seq_len=2048, ffn_hidden=4 * 6144, attention="math")
B, T, D = 4, 8, 2
"""Micro-batch, tensor parallelism and bytes per element of the paper's 22B runs (Table 3)."""


def predicted_ms(recompute: str, sp: bool, preset: str = PRESET) -> tuple[float, float]:
    """``(forward, backward)`` milliseconds of one layer as pipesim models it (module doc)."""
    topo = load_hardware(preset)
    spec = topo.gpus[0].compute
    assert spec is not None
    times = block_times(SHAPE, B, spec, "fp16", tp=T, sp=sp)
    plan = collective_plan(topo, tuple(f"gpu{i}" for i in range(T)))
    nbytes = B * SHAPE.seq_len * SHAPE.hidden * D
    if sp:
        comm = 2 * (plan.time_s(nbytes, "all_gather") + plan.time_s(nbytes, "reduce_scatter"))
    else:
        comm = 2 * plan.time_s(nbytes, "allreduce")
    fwd = times.fwd.total_s + comm
    bwd = times.bwd_input.total_s + times.bwd_weight.total_s + comm
    if recompute == "full":
        bwd += fwd
    elif recompute == "selective":
        core = attention_fwd(
            "math", B, SHAPE.seq_len, SHAPE.hidden // T, SHAPE.heads // T, D, causal=True,
            dropout=True,
        )  # fmt: skip
        bwd += phase_time(core, spec, "fp16").total_s
    return fwd * 1e3, bwd * 1e3


def rows(preset: str = PRESET) -> pd.DataFrame:
    """Measured and predicted forward and backward per experiment of Table 4."""
    df = pd.read_csv(DATA)
    pred = [predicted_ms(r.recompute, bool(r.sequence_parallel), preset) for r in df.itertuples()]
    df["pred_forward_ms"] = [f for f, _ in pred]
    df["pred_backward_ms"] = [b for _, b in pred]
    df["forward_error"] = df.pred_forward_ms / df.forward_ms - 1
    df["backward_error"] = df.pred_backward_ms / df.backward_ms - 1
    df["combined_error"] = (df.pred_forward_ms + df.pred_backward_ms) / df.combined_ms - 1
    return df


def main() -> None:
    df = rows()
    cols = ["experiment", "forward_ms", "pred_forward_ms", "forward_error", "backward_ms"]
    cols += ["pred_backward_ms", "backward_error", "combined_error"]
    print(f"22B layer (h 6144, s 2048, b {B}, t {T}) on {PRESET}, Korthikanti et al. Table 4:")
    print(df[cols].to_string(index=False, float_format=lambda x: f"{x:+.3f}"))


if __name__ == "__main__":
    main()
