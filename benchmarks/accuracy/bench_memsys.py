"""The seeds' memory systems as their papers ran them, predicted by pipesim (issue 27).

``python benchmarks/accuracy/bench_memsys.py [patrickstar] [breakdown] [largest] [zero-offload] [mpress] [vpipe]``
(default: all; a few minutes on 2 cores) prints pipesim's figures for the papers' questions
(the models and largest-model claims in ``measurements/memsys-papers/``, provenance in its
README) and, with ``--papers DIR``, the papers' published throughput beside them: the
repository holds no published whole-iteration measurement (the house rule), so DIR is the
user's (``patrickstar.csv``: server, model, tflops_per_gpu; ``zero-offload.csv``: what, value
for throughput, iteration, forward, backward, optimizer; ``vpipe.csv``: baseline, speedup_low,
speedup_high; each row with its source):

* **PatrickStar's TFLOPS** on its two servers (``experiments/patrickstar-{v100,a100}.yaml``,
  policy ``chunked:recompute:msc:v045`` as its benchmark scripts ran it) with PatrickStar's own
  formula, ``8 * parameters * batch * sequence / step time`` per GPU
  (Tencent/PatrickStar@2384535 ``examples/pretrain_demo.py``: ``total_macs = model_numel *
  batch_size * sequence_length * 2 * 4``, printed as ``Tflops Per GPU``; ``batch_size`` is per
  GPU), and how many of the published models are within 10 %;
* **where PatrickStar's iterations go** (``breakdown``): per model, GPU 0's compute, GPU step and
  waits, and its rank's CPU-Adam seconds (:func:`time_breakdown`), beside the
  paper's iteration time (its TFLOPS inverted) with ``--papers``;
* **the largest trainable model** per paper and server: PatrickStar's grid with the models
  above its largest added, at the batches of its benchmark loop (``for BS in 8 4 16``: 4 and 8;
  16 fits less), and ZeRO-Offload's single-GPU grid (``experiments/zero-offload-dgx2.yaml``);
* **ZeRO-Offload's 10B GPT-2** on one V100 as its tutorial ran it (batch 10,
  ``zero_offload:48:recompute:release:cpu_ckpt``): TFLOPS with DeepSpeed's Megatron example's
  formula (the same ``8 * parameters * batch * sequence``) and Narayanan et al.'s eq. 3, beside
  the abstract's 40 TFLOPS, and the iteration, forward, backward and optimizer seconds beside
  the tutorial's log;
* **MPress's ordering** (``experiments/mpress-dgx1.yaml``): the largest model per policy and
  schedule; D2D swap should train larger models than recompute alone;
* **vPipe's speed-ups** over PipeDream and GPipe (``experiments/vpipe.yaml``) beside the
  abstract's ranges.

Nothing is fitted to these numbers: they are what the model predicts.
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

import sim.api

ROOT = Path(__file__).resolve().parents[2]
CLAIMS = ROOT / "measurements" / "memsys-papers"
"""The papers' models and largest-model claims (shipped)."""
PAPERS: Path | None = None
"""The papers' published throughput (``--papers``; None: pipesim's figures alone)."""


def _published(name: str) -> pd.DataFrame | None:
    """The user's ``--papers`` table ``name``, or None."""
    return pd.read_csv(PAPERS / name) if PAPERS is not None else None


EXPERIMENTS = ROOT / "experiments"
SEQ = 1024
PATRICKSTAR = "chunked:recompute:msc:v045"
"""PatrickStar as its benchmark scripts ran it: checkpointing (``CKP=1``) and memory-saving
communication (``MSC=1``), with the memory tracer of the release that measured both figures
(``v045``: up to v0.4.5, :mod:`sim.memory.chunked`)."""
SERVERS = {"8xV100-32GB+240GB": "patrickstar-v100.yaml", "8xA100-40GB+1TB": "patrickstar-a100.yaml"}
ABOVE = {
    "8xV100-32GB+240GB": ["ps-gpt-ds-20b"],
    "8xA100-40GB+1TB": ["ps-gpt-ds-70b", "ps-gpt-nv-76b"],
}
"""PatrickStar's configs above each server's published largest model."""
BATCHES = (4, 8)
ZO_POLICY = "zero_offload:48:recompute:release:cpu_ckpt"
"""ZeRO-Offload as the tutorial's logged run was configured: DeepSpeedExamples' 10B script and
its config (microsoft/DeepSpeedExamples@ece5e0e0 ``Megatron-LM/scripts/
ds_zero-offload_10B_pretrain_gpt2_model_parallel.sh``, ``ds_zero-offload_10B_config.json``:
stage 2, cpu_offload, ``reduce_bucket_size`` 5e7, no ``overlap_comm``, activation checkpointing
with ``cpu_checkpointing``; ``wall_clock_breakdown``, whose timers the log prints) on the
release's code. The tutorial's text names ``overlap_comm``; it changes only the GPU's gradient
buffers here (sim.memory.zero_offload)."""


def experiment(name: str) -> dict[str, Any]:
    """The shipped experiment ``experiments/<name>`` as a mapping (traces by name)."""
    return yaml.safe_load((EXPERIMENTS / name).read_text())


def plan_table(data: dict[str, Any]) -> pd.DataFrame:
    """Every configuration of ``data``'s grid, simulated (no pruning), as results.csv."""
    return sim.api.plan(data, exhaustive=True).table()


def patrickstar_tflops(df: pd.DataFrame) -> pd.Series:
    """PatrickStar's ``Tflops Per GPU`` of each row: ``8 * parameters * b * s / t`` with ``b``
    the batch per GPU (module doc)."""
    per_gpu = df.global_batch / df.dp_width
    return 8 * df.parameters * per_gpu * SEQ / df.iteration_time_s / 1e12


def patrickstar() -> pd.DataFrame:
    """Published against predicted TFLOPS per GPU of PatrickStar's 17 models."""
    pub = pd.read_csv(CLAIMS / "patrickstar_models.csv")
    given = _published("patrickstar.csv")
    tflops = (  # by server and model: GPT3_6B, 10B and 15B ran on both servers
        {}
        if given is None
        else dict(
            zip(zip(given.server, given.model, strict=True), given.tflops_per_gpu, strict=True)
        )
    )
    out = []
    for server, path in SERVERS.items():
        df = plan_table(experiment(path))
        df = df[(df.memory_policy == PATRICKSTAR) & df.fits.fillna(False).astype(bool)]
        df = df.assign(tflops=patrickstar_tflops(df))
        best = df.sort_values("tflops").groupby("model").tail(1).set_index("model")
        for row in pub[pub.server == server].itertuples():
            got = best.tflops.get(row.trace, float("nan"))
            published = tflops.get((server, row.model), float("nan"))
            out.append(
                {
                    "server": server,
                    "model": row.model,
                    "batch/GPU": best.global_batch.get(row.trace, 0) / 8,
                    "published": published,
                    "pipesim": got,
                    "error": got / published - 1,
                }
            )
    return pd.DataFrame(out)


def time_breakdown(events: pd.DataFrame, gpu: str = "gpu0") -> dict[str, float]:
    """Where one iteration's time goes on ``gpu``, from an event log's frame
    (``Simulation.log.to_frame()``: ``kind``, ``device``, ``stream``, ``duration_s``,
    ``iteration``), over its last iteration, in seconds: ``compute`` (forward, backward and
    recompute kernels on the compute stream), ``gpu_step`` (the optimizer step on the GPU),
    ``wait`` (the compute stream stalled for gathers, chunk moves, gradients or the host step of
    some rank: what the engine logs as ``stall``), and ``host_adam`` (CPU-Adam seconds of
    ``gpu``'s rank, replica ``gpu``'s index of stage 0, on its own share of the server's
    threads: :attr:`sim.memory.plan.StagePlan.host_optimizer_thread_share`)."""
    last = events[events.iteration == events.iteration.max()]
    kind, rank = last.kind.map(str), int(gpu.removeprefix("gpu"))
    on_gpu = (last.device == gpu) & (last.stream.map(str) == "compute")

    def total(mask: pd.Series) -> float:
        return float(last.duration_s[mask].sum())

    return {
        "compute": total(on_gpu & kind.isin(["compute", "recompute"])),
        "gpu_step": total(on_gpu & (kind == "optimizer")),
        "wait": total(on_gpu & (kind == "stall")),
        "host_adam": total((kind == "host_optimizer") & (last.stage == 0) & (last.replica == rank)),
    }


def patrickstar_breakdown() -> pd.DataFrame:
    """What bounds each of PatrickStar's published models in pipesim: iteration seconds at the
    batch :func:`patrickstar` reports, split by :func:`time_breakdown` on GPU 0, with the
    published iteration time (PatrickStar's formula inverted, with ``--papers``), and
    ``host_step``: the rest of the iteration, when GPU 0 neither computes nor stalls on its
    compute stream: its rank's host step, chunk by chunk (gradient copies down, CPU Adam,
    weight copies up; :meth:`sim.engine.traffic.MemoryTraffic.chunked_step`)."""
    pub = pd.read_csv(CLAIMS / "patrickstar_models.csv")
    given = _published("patrickstar.csv")
    out = []
    for server, path in SERVERS.items():
        data = experiment(path)
        for row in pub[pub.server == server].itertuples():
            one = copy.deepcopy(data)
            one["models"] = [m for m in data["models"] if m["trace"] == row.trace]
            sim_ = sim.api.simulate(one, memory_policy=PATRICKSTAR)
            per_gpu = sim_.point.global_batch / sim_.point.dp_width
            t = sim_.metrics.iteration_time_s
            paper = float("nan")
            if given is not None:
                hit = given[(given.server == server) & (given.model == row.model)]
                params = sim.api.load(one).traces[row.trace].parameters
                if len(hit):  # PatrickStar's formula, inverted
                    paper = 8 * params * per_gpu * SEQ / float(hit.tflops_per_gpu.iloc[0]) / 1e12
            parts = time_breakdown(sim_.log.to_frame())
            host = t - parts["compute"] - parts["gpu_step"] - parts["wait"]
            out.append({"server": server, "model": row.model, "iteration": t,
                        "paper": paper, **parts, "host_step": host})  # fmt: skip
    return pd.DataFrame(out)


def largest_patrickstar(server: str) -> tuple[str, dict[int, str]]:
    """The largest model PatrickStar's policy fits on ``server`` per batch per GPU."""
    base = experiment(SERVERS[server])
    models = [m["trace"] for m in base["models"]] + ABOVE[server]
    found: dict[int, str] = {}
    for b in BATCHES:
        data = copy.deepcopy(base)
        data["models"] = [
            {"name": m, "trace": m, "global_batch": 8 * b, "microbatch_size": b} for m in models
        ]
        data["sweep"]["memory_policy"] = [PATRICKSTAR]
        df = plan_table(data)
        ok = df[df.fits.fillna(False).astype(bool)]
        found[b] = ok.sort_values("parameters").model.iloc[-1] if len(ok) else "-"
    return base["hardware"] if isinstance(base["hardware"], str) else server, found


def largest() -> pd.DataFrame:
    """The papers' largest models beside pipesim's (PatrickStar per batch; ZeRO-Offload)."""
    pub = pd.read_csv(CLAIMS / "largest.csv")
    rows = []
    for r in pub[pub.system == "PatrickStar"].itertuples():
        _, found = largest_patrickstar(r.server)
        for b, model in found.items():
            rows.append(
                {"system": r.system, "server": r.server, "batch/GPU": b, "paper": r.trace,
                 "pipesim": model}
            )  # fmt: skip
    df = plan_table(experiment("zero-offload-dgx2.yaml"))
    ok = df[df.fits.fillna(False).astype(bool) & df.memory_policy.str.startswith("zero_offload")]
    for policy, g in ok.groupby("memory_policy"):
        rows.append(
            {"system": "ZeRO-Offload", "server": "1xV100-32GB of a DGX-2", "batch/GPU": "2, 8",
             "paper": "13B (gpt3-13b)", "pipesim": f"{g.sort_values('parameters').model.iloc[-1]}"
             f" ({policy})"}
        )  # fmt: skip
    return pd.DataFrame(rows)


def zero_offload() -> pd.DataFrame:
    """The tutorial's 10B GPT-2 on one V100: predicted against published."""
    data = experiment("zero-offload-dgx2.yaml")
    data["models"] = [m for m in data["models"] if m["name"] == "zo-gpt2-10b"]
    data["sweep"]["memory_policy"] = [ZO_POLICY]
    run = sim.api.simulate(data)
    t = run.metrics.iteration_time_s
    params, b = run.resolved.trace.parameters, 10
    last = max(e.iteration or 0 for e in run.log.events)
    spans: dict[str, float] = {}
    for e in run.log.events:
        if e.iteration == last and e.device in ("gpu0", "cpu0"):
            spans[e.kind] = spans.get(e.kind, 0.0) + e.duration_s
    # the checkpoints' copies into fresh pages run in the forward; pipesim charges them in the
    # GPU step (sim.memory.zero_offload.fresh_page_s): moved back to the forward here
    faults = run.resolved.sim_input.plans[0][0].notes.get("ckpt_page_fault_ms", 0.0) / 1e3
    eq3 = 96 * b * SEQ * 50 * 4096**2 * (1 + SEQ / (6 * 4096) + 50257 / (16 * 50 * 4096))
    given = _published("zero-offload.csv")
    nan = float("nan")
    value = (
        given.set_index("what").value
        if given is not None
        else pd.Series(
            {k: nan for k in ("throughput", "iteration", "forward", "backward", "optimizer")}
        )
    )
    return pd.DataFrame(
        [
            ("TFLOPS (8 x params x b x s / t)", value["throughput"], 8 * params * b * SEQ / t / 1e12),
            ("TFLOPS (Narayanan eq. 3)", value["throughput"], eq3 / t / 1e12),
            ("TFLOPS of the logged iteration (8 x params x b x s / t)",
             8 * params * b * SEQ / value["iteration"] / 1e12, 8 * params * b * SEQ / t / 1e12),
            ("iteration s", value["iteration"], t),
            ("forward + backward s (compute only)", value["forward"] + value["backward"],
             spans.get("compute", 0.0) + spans.get("recompute", 0.0)),
            ("forward + backward s (with copies, waits)", value["forward"] + value["backward"],
             t - spans.get("host_optimizer", 0.0) - spans.get("optimizer", 0.0) + faults),
            ("of which checkpoint copies' page faults s", nan, faults),
            ("host step s (unscale + CPU Adam)", value["optimizer"],
             spans.get("host_optimizer", 0.0)),
        ],
        columns=["what", "published", "pipesim"],
    )  # fmt: skip


MPRESS_MICROBATCHES = (1, 2, 4)
"""Micro-batch sizes of MPress's grid: the shipped file's 1, and 2 and 4, where a stage's stash
outweighs the gap between two model sizes' states (the paper's batches were not available)."""


def mpress() -> pd.DataFrame:
    """Largest model (B parameters) per schedule, micro-batch and policy on MPress's DGX-1 grid
    (``experiments/mpress-dgx1.yaml`` with the micro-batches of :data:`MPRESS_MICROBATCHES`)."""
    data = experiment("mpress-dgx1.yaml")
    data["sweep"]["microbatch_size"] = list(MPRESS_MICROBATCHES)
    df = plan_table(data)
    ok = df[df.fits.fillna(False).astype(bool)]
    keys = ["schedule", "microbatch_size", "memory_policy"]
    best = ok.sort_values("parameters").groupby(keys).tail(1)
    table = best.pivot_table(
        index=["schedule", "microbatch_size"],
        columns="memory_policy",
        values="parameters",
        aggfunc="max",
    )
    return (table / 1e9).round(1)


def mpress_ordering(table: pd.DataFrame) -> list[str]:
    """The rows of :func:`mpress` where D2D swap (MPress's planner, alone or with recompute)
    trains a larger model than recompute alone."""
    d2d = table[["d2d_swap", "d2d_swap+recompute"]].max(axis=1)
    return [f"{s} micro-batch {b}" for (s, b), v in d2d.items() if v > table.recompute[(s, b)]]


def vpipe() -> pd.DataFrame:
    """vPipe's throughput over its baselines per model (experiments/vpipe.yaml)."""
    df = plan_table(experiment("vpipe.yaml"))
    ok = df[df.fits.fillna(False).astype(bool)]
    best = ok.groupby(["model", "schedule", "memory_policy"]).throughput_samples_per_s.max()
    rows = []
    for model in sorted(df.model.unique()):
        get = best.get
        for base, schedule, policy in (
            ("PipeDream", "pipedream", "none"),
            ("GPipe", "gpipe", "recompute:partition"),
        ):
            mine = get((model, schedule, "vpipe"), float("nan"))
            theirs = get((model, schedule, policy), float("nan"))
            rows.append({"model": model, "baseline": base, "vpipe samples/s": mine,
                         "baseline samples/s": theirs, "speed-up": mine / theirs})  # fmt: skip
    out = pd.DataFrame(rows)
    given = _published("vpipe.csv")
    if given is not None:
        ranges = given.set_index("baseline")
        out["paper range"] = [
            f"{ranges.speedup_low[b]:.2f}-{ranges.speedup_high[b]:.2f}" for b in out.baseline
        ]
    return out


def _pct(x: float) -> str:
    return "-" if x != x else f"{x:+.1%}"


def main(argv: list[str] | None = None) -> None:
    global PAPERS
    parts = ("patrickstar", "breakdown", "largest", "zero-offload", "mpress", "vpipe")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("parts", nargs="*", help=f"what to run, of {', '.join(parts)} (default: all)")
    ap.add_argument(
        "--papers", type=Path, default=None, help="folder of the papers' published throughput"
    )
    args = ap.parse_args(argv)
    which = args.parts or parts
    if unknown := sorted(set(which) - set(parts)):
        ap.error(f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(parts)}")
    PAPERS = args.papers
    fmt = {"float_format": lambda x: f"{x:.3g}", "index": False}
    if "patrickstar" in which:
        t = patrickstar()
        within = int((t.error.abs() <= 0.10).sum())
        print(f"PatrickStar TFLOPS per GPU (its formula), {PATRICKSTAR}")
        print(t.assign(error=t.error.map(_pct)).to_string(**fmt))
        print(f"within 10 %: {within} of {len(t)}\n")
    if "breakdown" in which:
        print("PatrickStar: where pipesim's iteration goes on GPU 0 (s); host_adam: GPU 0's rank's")
        print("CPU Adam on its own threads; host_step: GPU 0's rank in its host step (copies and")
        print("its CPU Adam, chunk by chunk)")
        print(patrickstar_breakdown().to_string(**fmt), "\n")
    if "largest" in which:
        print("Largest trainable model (paper / pipesim)")
        print(largest().to_string(index=False), "\n")
    if "zero-offload" in which:
        print(f"ZeRO-Offload, 10B GPT-2 on one V100-32GB of a DGX-2, batch 10, {ZO_POLICY}")
        print(zero_offload().to_string(**fmt), "\n")
    if "mpress" in which:
        t = mpress()
        print("MPress, DGX-1, 8 stages: largest model (B params) per schedule, micro-batch, policy")
        print(t.to_string())
        print("D2D swap trains larger models than recompute alone at:", mpress_ordering(t), "\n")
    if "vpipe" in which:
        t = vpipe()
        print("vPipe: throughput over its baselines (best fitting configuration of each)")
        print(t.to_string(**fmt))


if __name__ == "__main__":
    main()
