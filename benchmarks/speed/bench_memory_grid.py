"""``sim memory`` on a cluster-sized grid: wall and CPU seconds.

The grid is ``llama3-405b-memory-16k.yaml`` beside this file (``sim memory`` runs it as it is):
Llama 3 405B (``traces/llama3-405b``: the paper's Table 3 shape, sequence 8,192, bf16, flash
attention) as Megatron-LM trains it (``framework: megatron-lm``) on 16,384 H100s (the
``grand-teton-h100`` preset repeated 2,048 times, the Llama 3 paper's §3.3 16K-GPU scale),
global batch 2,048: every split of the GPUs into tensor (2, 4, 8), pipeline (8, 16) and context
(1, 2) parallelism with the data-parallel width that fills them, micro-batch 1 or 2, 1F1B or
interleaved 1F1B (v = 2), the distributed optimizer with or without full recompute: 96
configurations (the grid is an assumption: the candidates a user would try, not the paper's).
Prints how many fit, the seconds ``sim.api.memory`` took (the model over the grid, advice
included; loading excluded) and the process's CPU seconds.

Run: ``python benchmarks/speed/bench_memory_grid.py [--out DIR] [--no-advice]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sim import api  # noqa: E402

EXPERIMENT = Path(__file__).with_name("llama3-405b-memory-16k.yaml")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="write memory.csv and the plot here")
    ap.add_argument("--no-advice", dest="advice", action="store_false")
    args = ap.parse_args(argv)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    answer = api.memory(EXPERIMENT, out=args.out, advice=args.advice, plots=args.out is not None)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    fits = sum(1 for r in answer.results if r.memory is not None and r.memory.fits)
    print(
        f"{len(answer.results)} configurations of 16,384 GPUs, {fits} fit; model over the grid "
        f"{answer.wall_s:.2f} s; with loading {wall:.2f} s wall, {cpu:.2f} s CPU"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
