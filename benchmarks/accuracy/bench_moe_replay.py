"""Expert- and context-parallel CPU replays against pipesim's prediction, through ``sim validate``.

Profiles a small Mixtral-layout model on this machine's CPU (``sim profile --model
config.json --concurrent 2``: two processes at once, as the replay's two ranks share the
cores; it records the decoder shape so the trace splits by expert and context
parallelism), then validates each configuration with the calibrated 2-rank CPU hardware
(``sim/hardware/calibrated/cpu-2rank.yaml``) by :func:`sim.api.validate` with the torch replayer
(the one validation pipeline, :mod:`sim.validate.pipeline`; the ranks are
:mod:`backends.torch.replay.group`): 2 gloo ranks, then one process on the same data. It
prints measured and predicted iteration time and peak memory (the replay counts weights,
gradients and the peak of tensors saved for backward with saved-tensor hooks), their errors,
and the largest relative difference of the losses from one process's.

* EP: 1 stage, 2 data-parallel replicas, expert_parallel 2 (each rank 2 of 4 experts);
  one stage runs each micro-batch's forward then its backward (1F1B with p = 1, as the replay);
* CP: 1 stage, 1 replica, context_parallel 2: ``all_gather``, ``p2p`` (ring attention) and
  ``a2a`` (Ulysses).

CPU times depend on the load: profile, calibrate and replay on the same idle machine (the
shared development VM is not; re-measure there before reading the errors as the model's).

Run: ``python benchmarks/accuracy/bench_moe_replay.py [--threads 1] [--m 4]`` (a few minutes).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import yaml  # noqa: E402

from backends.torch.replay.replayer import TorchReplayer  # noqa: E402
from sim import api  # noqa: E402

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
HARDWARE = str(REPO / "sim/hardware/calibrated/cpu-2rank.yaml")


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


def validate(tmp: Path, trace: str, name: str, sweep: dict, m: int, dp: int) -> dict:
    """``sim validate`` of one configuration (1F1B, one stage, SGD); its validation.csv row."""
    data = {
        "name": name,
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
    file = tmp / f"{name}.yaml"
    file.write_text(yaml.safe_dump(data))
    res = api.validate(file, replayer=TorchReplayer(), out=tmp / name, iterations=5, warmup=2)
    return res.table.iloc[0].to_dict()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--m", type=int, default=4)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        trace = profile(tmp, args.threads)
        cases = [
            ("ep2", {"dp_width": 2, "expert_parallel": 2}, 2),
            ("cp2-all_gather", {"context_parallel": 2, "context_parallel_comm": "all_gather"}, 1),
            ("cp2-p2p", {"context_parallel": 2, "context_parallel_comm": "p2p"}, 1),
            ("cp2-a2a", {"context_parallel": 2, "context_parallel_comm": "a2a"}, 1),
        ]
        print(
            f"{'case':15} {'measured ms':>12} {'predicted ms':>12} {'error':>7} "
            f"{'measured MiB':>13} {'predicted MiB':>13} {'error':>7} {'loss rel diff':>13}"
        )
        for name, sweep, dp in cases:
            r = validate(tmp, trace, name, {"dp_width": 1, **sweep}, args.m, dp)
            print(
                f"{name:15} {r['measured_iteration_s'] * 1e3:12.1f} "
                f"{r['predicted_iteration_s'] * 1e3:12.1f} {r['error']:+7.1%} "
                f"{r['measured_peak_bytes'] / 2**20:13.2f} "
                f"{r['predicted_peak_bytes'] / 2**20:13.2f} {r['memory_error']:+7.1%} "
                f"{r['loss_max_rel_diff']:13.1e}"
            )


if __name__ == "__main__":
    main()
