"""An experiment's configurations with the framework options it names and without them: what
the communication overlap buys (issue 26 item 2).

Takes an experiment whose ``framework:`` carries options
(``experiments/llama3-70b-overlap-64xh100.yaml``: Megatron-LM with --overlap-grad-reduce
--overlap-param-gather --tp-comm-overlap), simulates each configuration of its grid (or those
``--only`` keeps) twice, with the options and with the plain profile, and prints per
configuration: iteration time, TFLOP/s per GPU and MFU of both, and whether it fits. Writes the
Chrome traces and Gantt charts of the fastest fitting configuration both ways, on the first GPU
of each pipeline rank (``with.json``/``.png``, ``without.json``/``.png``: the overlapped
collectives on their own lanes, ``comm`` and ``tp``, beside the compute) into ``--out``.

Model FLOPs: the trace's forward FLOPs of every layer (the kernel model's count: GEMMs and the
attention core) times 3 (forward and backward, recompute not counted) times the samples of an
iteration; MFU is that over the iteration time, the GPUs and the GPU's dense peak in the
training dtype (PaLM's definition, Chowdhery et al. arXiv:2204.02311 App. B).

Run: ``python benchmarks/answers/bench_overlap_options.py experiments/llama3-70b-overlap-64xh100.yaml
[--only tensor_parallel=4] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.answers.bench_overlap import first_gpus  # noqa: E402
from sim.config import load_experiment  # noqa: E402
from sim.errors import InputError  # noqa: E402
from sim.plan.sweep import expand  # noqa: E402
from sim.point.experiment import prepare  # noqa: E402
from sim.point.simulate import evaluate, resolve  # noqa: E402
from sim.report.chrome_trace import write_chrome_trace  # noqa: E402
from sim.report.gantt import plot_gantt  # noqa: E402


def model_flops(trace, samples: int) -> float:
    """FLOPs of an iteration of ``samples`` samples (module doc)."""
    per_sample = sum(x.flops or 0.0 for x in trace.layers) / trace.microbatch_size
    return 3.0 * per_sample * samples


def keep(point, only: list[str]) -> bool:
    """Whether ``point`` matches every ``key=value`` of ``only``."""
    for item in only:
        key, _, value = item.partition("=")
        if str(getattr(point, key)) != value:
            return False
    return True


def run(prep, point):
    """``(metrics, log)`` of ``point``, or ``(None, why)`` when it cannot run."""
    try:
        res = resolve(prep.exp, point, prep.topology, prep.traces[point.model], shared=prep)
    except InputError as exc:
        return None, str(exc)
    return evaluate(res)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("experiment")
    ap.add_argument("--only", action="append", default=[], help="KEY=VALUE of the points kept")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    exp = load_experiment(args.experiment)
    prep = prepare(exp, args.experiment)
    points = [p for p in expand(prep)[0] if keep(p, args.only)]
    plain = exp.framework.split("[")[0]
    out = Path(args.out or f"results/{exp.name}-options")
    gpu = prep.topology.gpus[0].compute
    print(f"{exp.name}: {len(points)} configurations, {exp.framework} against {plain}")
    best = None
    for pt in points:
        trace = prep.traces[pt.model]
        flops = model_flops(trace, pt.global_batch)
        peak = gpu.peak_flops(trace.dtype) if gpu is not None else float("nan")
        cells, logs = [], {}
        for tag, spec in (("with", exp.framework), ("without", plain)):
            met, log = run(prep, pt.model_copy(update={"framework": spec}))
            if met is None:
                cells.append(f"{tag}: {log[:60]}")
                continue
            n = pt.layout.gpus
            tf = flops / met.iteration_time_s / n
            fits = "" if met.fits else " (does not fit)"
            cells.append(
                f"{tag} {met.iteration_time_s * 1e3:,.0f} ms, {tf / 1e12:.0f} TFLOP/s/GPU, "
                f"MFU {tf / peak:.1%}{fits}"
            )
            logs[tag] = (met, log)
        name = (
            f"{pt.schedule} p={pt.stages} v={pt.virtual_stages} t={pt.tensor_parallel} "
            f"w={pt.dp_width} {pt.memory_policy}"
        )
        print(f"  {name}: " + "; ".join(cells))
        ok = logs.get("with")
        if ok and ok[0].fits:
            if best is None or ok[0].iteration_time_s < best[0]:
                best = (ok[0].iteration_time_s, logs, name)
    if best is not None:
        out.mkdir(parents=True, exist_ok=True)
        for tag, (_, log) in best[1].items():
            small = first_gpus(log, log.meta["placement"])
            write_chrome_trace(small, out / f"{tag}.json", title=f"{best[2]} {tag} options")
            it = max(0, len(log.iteration_ends_s) - 1)
            plot_gantt(small, out / f"{tag}.png", iteration=it, title=f"{best[2]}, {tag} options")
        print(f"fastest fitting with the options: {best[2]}; timelines in {out}/with, without")


if __name__ == "__main__":
    main()
