"""Why a two-rank CPU replay ran its small layers slower than profiled: the first run after a
gap, and the replay's memory-counting hooks.

A replay rank waits in ``dist.recv`` while the other rank computes (milliseconds), then runs
its action; ``sim profile`` times each layer in back-to-back repetitions. This measures, in
ONE process (no gloo, no second rank), the forward of the ViT example's stage 0 (patch
embedding + 4 blocks, ``examples/vit_shared.py``, micro-batch 4, 1 thread):

* hot: back to back, as the profile times it;
* after a gap of ``d`` ms spent sleeping (an idle core, as in ``recv``) or spinning in Python
  (a busy core): the first forward, then a second one right after it;
* the backward right after its forward, or after a gap of 3 or 12 ms sleeping;
* after a 12 ms gap filled with (a) reading the stage's own weights, (b) running the forward of
  an identical copy of the stage (same code, other weights), (c) streaming 8 MB.

Measured on the 2-core KVM VM (AMD EPYC, 1 MiB L2 per core), idle, 2026-11-25: the first
forward after a gap of 3 / 12 / 30 ms is 0.2-0.3 / 0.6-0.8 / 0.7-0.8 ms slower than hot
whether the core slept or spun (no steal time), the second is hot again; reading the weights or
streaming 8 MB during the gap does not change it, running the identical copy's forward removes
it. So it is the code side (instruction cache, branch predictors of the ops' code), not the
data and not the core's idle state, evicted by whatever else runs meanwhile; it is paid once
per action (the stage's later layers run warm, warmed by the identical earlier block).

Last, the stage's forward and backward with and without the ``saved_tensors_hooks`` every CPU
replay runs a forward under (:class:`backends.torch.profile.saved_bytes.SavedBytes`): 0.2-0.4 ms
more per forward and 0.1-0.3 ms per backward with them, which is why ``sim profile`` now times CPU
layers under them (:mod:`backends.torch.profile.layers`).

Run: ``python benchmarks/cold_start.py``. Prints medians in ms; asserts nothing.
"""

from __future__ import annotations

import copy
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from backends.torch.profile.saved_bytes import SavedBytes

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import vit_shared  # noqa: E402


def _spin(seconds: float, fill: Any = None) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        if fill is not None:
            fill()


def _timed(stage: torch.nn.Module, x: torch.Tensor) -> float:
    t = time.perf_counter()
    with torch.no_grad():
        stage(x)
    return time.perf_counter() - t


def main() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model, images, _ = vit_shared.build(4)
    stage = torch.nn.Sequential(model.embed, *model.blocks[:4])
    twin = copy.deepcopy(stage)
    big = torch.zeros(1 << 21)
    for _ in range(50):
        _timed(stage, images)
        _timed(twin, images)

    def report(label: str, gap: Any, n: int = 80) -> None:
        first, second = [], []
        for _ in range(n):
            gap()
            first.append(_timed(stage, images))
            second.append(_timed(stage, images))
        ms = [statistics.median(v) * 1e3 for v in (first, second)]
        print(f"{label:34s} first {ms[0]:.3f} ms  second {ms[1]:.3f} ms", flush=True)

    report("hot (back to back)", lambda: None)
    for gap_s in (0.003, 0.012, 0.030):
        report(f"after {gap_s * 1e3:.0f} ms sleeping", lambda g=gap_s: time.sleep(g))
        report(f"after {gap_s * 1e3:.0f} ms spinning", lambda g=gap_s: _spin(g))
    weights = list(stage.parameters())
    report(
        "12 ms reading the stage's weights",
        lambda: _spin(0.012, lambda: [p.sum() for p in weights]),
    )
    report("12 ms running an identical copy", lambda: _spin(0.012, lambda: _timed(twin, images)))
    report("12 ms streaming 8 MB", lambda: _spin(0.012, lambda: big.add_(1.0)))
    grad = torch.randn(4, 64, 64)
    for gap_s in (0.0, 0.003, 0.012):
        times = []
        for _ in range(80):
            out = stage(images)
            time.sleep(gap_s)
            t = time.perf_counter()
            out.backward(grad)
            times.append(time.perf_counter() - t)
        ms = statistics.median(times) * 1e3
        print(f"backward {gap_s * 1e3:.0f} ms after its forward (sleeping) {ms:.3f} ms", flush=True)
    hooks = SavedBytes(stage.parameters())
    for _ in range(3):
        for label, counting in (("without", False), ("with", True)):
            fwd, bwd = [], []
            for _ in range(60):
                t = time.perf_counter()
                if counting:
                    with hooks.hooks():
                        out = stage(images)
                else:
                    out = stage(images)
                t1 = time.perf_counter()
                out.backward(grad)
                fwd.append(t1 - t)
                bwd.append(time.perf_counter() - t1)
            ms = [statistics.median(v) * 1e3 for v in (fwd, bwd)]
            print(f"{label:7s} the replay's hooks: forward {ms[0]:.3f} ms backward {ms[1]:.3f} ms")


if __name__ == "__main__":
    main()
