"""DualPipeV with and without expert-parallel overlap on one configuration: timelines side by
side.

Takes an experiment whose grid is one configuration run with ``ep_overlap: [false, true]``
(``experiments/deepseek-v3-dualpipe-overlap.yaml``), simulates both points and writes, under
``results/<name>/`` (or ``--out``): ``no-overlap.json`` and ``overlap.json`` (Chrome traces of
the whole run, every GPU), ``no-overlap.png`` and ``overlap.png`` (Gantt of the first GPU of each
pipeline rank, steady iteration) and ``side_by_side.png`` (the two Gantts one above the other on
one time axis), and prints both iteration times.

Run: ``python benchmarks/answers/bench_overlap.py experiments/deepseek-v3-dualpipe-overlap.yaml``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from sim.config import load_experiment  # noqa: E402
from sim.events import EventLog  # noqa: E402
from sim.plan.sweep import expand  # noqa: E402
from sim.point.experiment import prepare  # noqa: E402
from sim.point.simulate import evaluate, resolve  # noqa: E402
from sim.report.chrome_trace import write_chrome_trace  # noqa: E402
from sim.report.gantt import plot_gantt  # noqa: E402


def first_gpus(log: EventLog, placement) -> EventLog:
    """The log restricted to replica 0's GPU of each pipeline rank."""
    row = placement[0]
    keep = {f"gpu{g[0] if isinstance(g, list) else g}" for g in row}
    return replace(log, events=[e for e in log.events if e.device in keep])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("experiment")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    exp = load_experiment(args.experiment)
    prep = prepare(exp, args.experiment)
    points, _ = expand(prep)
    out = Path(args.out or f"results/{exp.name}")
    out.mkdir(parents=True, exist_ok=True)
    pngs = {}
    for pt in sorted(points, key=lambda p: p.ep_overlap):
        res = resolve(exp, pt, prep.topology, prep.traces[pt.model])
        met, log = evaluate(res)
        tag = "overlap" if pt.ep_overlap else "no-overlap"
        write_chrome_trace(log, out / f"{tag}.json", title=f"{exp.name} {tag}")
        small = first_gpus(log, log.meta["placement"])
        it = max(0, len(log.iteration_ends_s) - 1)
        plot_gantt(small, out / f"{tag}.png", iteration=it, title=tag)
        pngs[tag] = out / f"{tag}.png"
        print(
            f"{tag}: {met.iteration_time_s * 1e3:.1f} ms/iteration, bubble {met.bubble_fraction:.3f}"
        )
    fig, axes = plt.subplots(len(pngs), 1, figsize=(14, 5 * len(pngs)))
    for ax, (tag, png) in zip(axes, pngs.items(), strict=True):
        ax.imshow(plt.imread(png))
        ax.set_axis_off()
        ax.set_title(tag)
    fig.tight_layout()
    fig.savefig(out / "side_by_side.png", dpi=100)
    print(f"wrote {out}/side_by_side.png, no-overlap/overlap .png/.json")


if __name__ == "__main__":
    main()
