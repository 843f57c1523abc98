"""Expert- and context-parallel CPU replays against pipesim's prediction: time and memory.

Profiles a small Mixtral-layout model on this machine's CPU (``sim profile --model
config.json --concurrent 2``: two processes at once, as the replay's two ranks share the
cores; it records the decoder shape so the trace splits by expert and context
parallelism), predicts one step of each configuration with the calibrated 2-rank CPU hardware
(``experiments/hardware/cpu-2rank.yaml``), replays it for real on 2 gloo ranks
(``backends.torch.ep_replay`` / ``cp_replay``: losses equal to one process, tests/
test_ep_cp_replay.py) and prints measured and predicted iteration time and peak memory
(weights + gradients + the peak of tensors saved for backward; the replay counts them with
saved-tensor hooks, the simulator's ledger holds the same categories), with the errors.

* EP: 1 stage, 2 data-parallel replicas, expert_parallel 2 (each rank 2 of 4 experts);
  one stage runs each micro-batch's forward then its backward (1F1B with p = 1, as the replay);
* CP: 1 stage, 1 replica, context_parallel 2 (``all_gather``).

CPU times depend on the load: profile, calibrate and replay on the same idle machine (the
shared development VM is not; re-measure there before reading the errors as the model's).

Run: ``python benchmarks/bench_moe_replay.py [--threads 1] [--m 4]`` (a few minutes).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from backends.torch.launch import run_ranks  # noqa: E402
from sim.config import parse_experiment  # noqa: E402
from sim.experiment import prepare  # noqa: E402
from sim.point_row import point_row  # noqa: E402
from sim.sweep import expand  # noqa: E402

CONFIG = {
    "model_type": "mixtral",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "vocab_size": 2048,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0,
    "router_aux_loss_coef": 0.0,
    "tie_word_embeddings": False,
}
SEQ, B = 128, 4
HARDWARE = str(REPO / "experiments/hardware/cpu-2rank.yaml")


def profile(tmp: Path, threads: int) -> str:
    cfg = tmp / "moe-config.json"
    cfg.write_text(json.dumps(CONFIG))
    out = tmp / "moe-cpu"
    cmd = [
        sys.executable,
        "-m",
        "sim.cli",
        "profile",
        "--model",
        str(cfg),
        "--seq-len",
        str(SEQ),
        "-b",
        str(B),
        "--threads",
        str(threads),
        "--reps",
        "7",
        "--concurrent",
        "2",
        "--out",
        str(out),
    ]
    subprocess.run(cmd, check=True, cwd=REPO)
    return str(out) + ".csv"


def predict(tmp: Path, trace: str, sweep: dict, m: int, dp: int):
    data = {
        "name": "replay",
        "hardware": HARDWARE,
        "models": [{"name": "moe", "trace": trace, "global_batch": m * B * dp}],
        "training": {"optimizer": "sgd"},
        "sweep": {
            "schedule": "1f1b",
            "stages": 1,
            "microbatch_size": B,
            "memory_policy": "none",
            **sweep,
        },
    }
    file = str(tmp / "e.yaml")
    prep = prepare(parse_experiment(data, file=file), file)
    (point,), _ = expand(prep)
    return point_row(prep, point)[0]


def measure(target: str, m: int, threads: int, config: str) -> dict:
    payload = dict(config=config, seq_len=SEQ, seed=0, b=B, m=m, iterations=5, warmup=2, lr=0.01)
    ranks = run_ranks(target, payload, nproc=2, timeout_s=900, threads=threads)
    times = [statistics.median(r["iteration_s"]) for r in ranks]
    peak = max(2 * r["param_bytes"] + r["peak_saved_bytes"] for r in ranks)
    return {"time_s": max(times), "peak_bytes": peak}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--m", type=int, default=4)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        trace = profile(tmp, args.threads)
        config = str(tmp / "moe-config.json")
        cases = [
            (
                "EP 2 (dp 2)",
                "backends.torch.ep_replay:run_rank",
                {"dp_width": 2, "expert_parallel": 2},
                2,
            ),
            (
                "CP 2 all_gather",
                "backends.torch.cp_replay:run_rank",
                {"dp_width": 1, "context_parallel": 2, "context_parallel_comm": "all_gather"},
                1,
            ),
        ]
        print(
            f"{'case':18} {'measured ms':>12} {'predicted ms':>12} {'error':>7} "
            f"{'measured MiB':>13} {'predicted MiB':>13} {'error':>7}"
        )
        for name, target, sweep, dp in cases:
            row = predict(tmp, trace, sweep, args.m, dp)
            pred_mem = sum(
                getattr(row, f"peak_{c}_bytes") or 0.0
                for c in ("weights", "gradients", "activations", "buffers")
            )
            got = measure(target, args.m, args.threads, config)
            t_err = row.iteration_time_s / got["time_s"] - 1
            m_err = pred_mem / got["peak_bytes"] - 1
            print(
                f"{name:18} {got['time_s'] * 1e3:12.1f} {row.iteration_time_s * 1e3:12.1f} "
                f"{t_err:+7.1%} {got['peak_bytes'] / 2**20:13.1f} {pred_mem / 2**20:13.1f} "
                f"{m_err:+7.1%}"
            )


if __name__ == "__main__":
    main()
