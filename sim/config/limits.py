"""Limits on what one run asks for: micro-batches, GPUs, grid size, iterations, and the job size
above which ``options.simulation: auto`` mirrors replicas."""

from __future__ import annotations

# Limits on what one run asks for. Each bounds a cost the code pays, as measured on the shared
# 2-core development machine (figures vary with its load; they set orders of magnitude).

MAX_MICROBATCHES = 4096
"""Most micro-batches per iteration simulated. An assumption bounding one point's run time: the
schedule's program and the engine's events grow linearly in ``m`` (GNMT-16 under 1F1B, p = 8,
w = 1, on DGX-1: 15,400 spans and 29,700 memory events at m = 256 simulated in 0.4 CPU
seconds, 61,500 and 119,000 at m = 1024 in 1.5 s; measured for issue 17), so a point at this
limit takes about 6 s and a grid of them minutes."""
MAX_GPUS = 16_384
"""Most GPUs a hardware description may have (``servers x num_gpus``). It bounds the cost of
holding the cluster, not of simulating it: a configuration's run grows with ``p x m x v`` once
its replicas are simulated once (:mod:`sim.engine.symmetry`), but loading builds a Python
object per GPU, host and link (2,048 DGX H100 servers: about 16k GPUs, 4k sockets, 100k
directed links) and checks in ``O(links)`` that every GPU reaches every other
(:func:`sim.hardware.build.topology_from_spec`); ``benchmarks/speed/bench_scale.py`` measures load
and simulation from 8 to 16,384 GPUs. 16,384 covers the largest published pipeline-parallel
runs the simulator is compared with (Llama 3 405B on 16,384 H100s, Dubey et al. 2024
arXiv:2407.21783 §3.3) and peers' scale (SimAI 9,216; Charon over 10,000)."""
MIRROR_ABOVE_GPUS = 64
"""Above this many GPUs in a job, ``options.simulation: auto`` simulates one data-parallel
replica's tensor rank 0 (:mod:`sim.engine.symmetry`); up to it, every GPU (the full
simulation the shipped experiments, the golden engine logs and the measured validations were
made with: 64 GPUs is the largest of them, ``8x-dgx-h100``). Not lowered for speed: of the 329
16-GPU points ``benchmarks/speed/bench_planner.py`` simulates, 56 can be mirrored, 13 of them with
another iteration time or peak (12 under ``zero3``, by up to 3.4 %), and mirroring saves 7 %
of their simulation time (measured for issue 17)."""
MAX_GRID = 100_000
"""Most grid combinations (all models, before invalid ones are skipped) expanded. An assumption
bounding a sweep's set-up: expanding costs a few microseconds per combination and bounding
about 0.1 ms per valid point (``benchmarks/speed/bench_planner.py``: 11,520 combinations expanded to
3,696 points in 0.04 CPU seconds, bounded in 0.3 s; measured for issue 17), and each valid
point may be simulated; the shipped experiments have 2 to 1,134 (``dgx1.yaml``: 270)."""
MAX_ITERATIONS = 100
"""Most optimizer steps a user may ask for (``training.iterations``; ``sim schedule`` and
``sim validate``'s iterations and warm-up). Left at 0, the engine simulates what its steady
state needs (:func:`sim.metrics.iterations_needed`: 2 for a flushed schedule, ``2 ceil(f/m) + 2``
for an asynchronous one, ``f`` the forwards before stage 0's first backward), which this limit
does not cap."""
