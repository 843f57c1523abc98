"""What our pipeline runtime and the replay's optimizer step cost a rank, measured for
``sim calibrate``.

Two micro-quantities the simulator charges besides the profiled layers (``sim.engine.actions``,
``sim.memory.compose.stage_step_s``):

* **Per-action overhead** (:func:`action_overhead`): the ranks run our runtime's own action path
  (:class:`backends.torch.replay.runtime.StageRunner`: GPipe over ``nproc`` stages of one tiny layer
  each, :func:`build`) and each forward's and backward's measured span, from its input's
  arrival to its end (the span ``sim validate`` compares with the prediction:
  ``StageRunner.spans``), less the stage's own forward or backward timed alone
  (``time_call`` of the same module, the loss included on the last stage, as ``sim profile``
  times a layer). What is left is the runtime's work that no profiled layer holds: reading
  the received buffer into the graph, the version and memory-policy bookkeeping, the stash,
  the ``isend`` issue and, in a backward, ``autograd.backward``'s own start. The link time
  of the transfers is not in it (it happens before the input's arrival or after the
  ``isend`` returns), so it is exactly what the engine lacks beside the calibrated link.
  The median over the steady iterations, averaged over the ranks (each stage runs as many
  forwards and backwards), is written as ``gpu.action_overhead``.
* **Optimizer step per tensor and per byte** (:func:`step_cost`): the replay's plain SGD
  (:meth:`backends.torch.replay.versions.SingleVersion.step`: ``p.data.add_(g, alpha=-lr)`` tensor
  by tensor, as the replay runs it; not ``torch.optim.SGD``) and ``torch.optim.Adam`` as
  constructed by default (on CPU tensors torch picks its for-loop implementation), each timed
  over many small tensors and over a few large ones; ``t = tensors * per_tensor + bytes /
  bandwidth`` solved from the two, written as ``gpu.optimizer_step``.
"""

from __future__ import annotations

import statistics
from typing import Any

import torch
from torch import nn

from backends.torch.models.user_spec import UserModelSpec
from backends.torch.profile.layers import time_call
from backends.torch.replay.job import ReplayJob
from backends.torch.replay.runtime import StageRunner, rank_program
from backends.torch.replay.versions import SingleVersion
from backends.torch.replay.worker import RankContext
from sim.schedules.action import Action

WIDTH = 8
"""Features of the tiny stage's tensors (a ``[b, 8]`` activation: 32 bytes per sample)."""


def build(microbatch_size: int = 1, layers: int = 2) -> tuple[nn.Module, torch.Tensor]:
    """The tiny chain the runtime overhead is measured on: ``layers`` ``Linear(8, 8)``, a
    ``[microbatch_size, 8]`` sample (a ``sim profile --model`` function)."""
    model = nn.Sequential(*(nn.Linear(WIDTH, WIDTH) for _ in range(layers)))
    return model, torch.randn(microbatch_size, WIDTH)


def _job(nproc: int, device: str, microbatches: int, iterations: int) -> ReplayJob:
    spec = UserModelSpec(
        source="backends.torch.calibrate.runtime_costs:build",
        layers=tuple(str(i) for i in range(nproc)),
        kwargs={"layers": nproc},
        takes_microbatch_size=True,
        microbatch_size=1,
        name="calibrate-runtime",
    )
    return ReplayJob(
        model=spec.to_dict(),
        boundaries=list(range(nproc)),
        schedule="gpipe",
        stages=nproc,
        microbatches=microbatches,
        iterations=iterations,
        warmup_iterations=1,
        device=device,
        nproc=nproc,
    )


def _alone_s(runner: StageRunner) -> tuple[float, float]:
    """``(forward, backward)`` seconds of ``runner``'s stage timed alone (the loss included
    on the last stage), as ``sim profile`` times a layer."""
    module, dev = runner.versions.newest(), runner.dev
    x, loss = runner.sample()
    state: dict[str, Any] = {}

    def forward() -> None:
        y = module(*x)
        state["y"] = y if loss is None else loss(y)
        state["g"] = torch.ones_like(y) if loss is None else None

    fwd_s = time_call(forward, dev, reps=21)
    bwd_s = time_call(
        lambda: torch.autograd.backward(state["y"], state["g"]), dev, setup=forward, reps=21
    )
    module.zero_grad(set_to_none=True)
    return fwd_s, bwd_s


def action_overhead(
    ctx: RankContext, microbatches: int = 8, iterations: int = 5
) -> dict[str, float]:
    """This rank's per-action overhead of our runtime (module doc); every rank must call it.

    Returns:
        ``{"forward_s", "backward_s"}``: median span beyond the stage's own time (may be
        negative by noise; the caller averages the ranks and clamps), and the ``alone``
        times ``forward_alone_s``, ``backward_alone_s``.
    """
    job = _job(ctx.world_size, ctx.device.type, microbatches, iterations)
    runner = StageRunner(job, ctx)
    stats = runner.run(rank_program(job, runner.rank))
    first = job.warmup_iterations * microbatches
    spans: dict[str, list[float]] = {"F": [], "B": []}
    for name, _t0, ready, end in stats["spans"]:
        action = Action.from_str(name)
        if action.op in spans and action.microbatch >= first:
            spans[action.op].append(end - ready)
    fwd_alone, bwd_alone = _alone_s(runner)
    return {
        "forward_s": statistics.median(spans["F"]) - fwd_alone,
        "backward_s": statistics.median(spans["B"]) - bwd_alone,
        "forward_alone_s": fwd_alone,
        "backward_alone_s": bwd_alone,
    }


def _timed_step(optimizer: str, tensors: int, numel: int, dev: torch.device) -> float:
    """Median seconds of one ``optimizer`` update of ``tensors`` tensors of ``numel`` fp32."""
    params = [nn.Parameter(torch.randn(numel, device=dev)) for _ in range(tensors)]
    grads = [torch.randn(numel, device=dev) for _ in range(tensors)]

    def setup() -> None:
        for p, g in zip(params, grads, strict=True):
            p.grad = g

    if optimizer == "sgd":
        module = nn.ParameterList(params)
        version = SingleVersion(module, lr=1e-3)
        return time_call(version.step, dev, setup=setup, reps=15)
    opt = torch.optim.Adam(params, lr=1e-3)
    setup()
    opt.step()
    return time_call(opt.step, dev, setup=setup, reps=15)


def step_cost(dev: torch.device, optimizer: str) -> dict[str, float]:
    """``optimizer``'s update (``sgd``: the replay's plain SGD; ``adam``: ``torch.optim.Adam``
    as constructed by default) per parameter tensor and per byte (module doc): timed on 256
    tensors of 16 fp32 values and on 4 tensors of 2**20; ``per_tensor_s`` and ``bandwidth_Bps``
    solve ``t = n * per_tensor_s + bytes / bandwidth_Bps`` for the two.

    Returns:
        ``{"per_tensor_s", "bandwidth_Bps", "small_s", "large_s"}`` (``per_tensor_s``
        clamped at 0; a bandwidth that the two points cannot give falls back to the large
        case's bytes over its time).
    """
    small_n, small_numel, large_n, large_numel = 256, 16, 4, 2**20
    small_s = _timed_step(optimizer, small_n, small_numel, dev)
    large_s = _timed_step(optimizer, large_n, large_numel, dev)
    small_b, large_b = 4.0 * small_n * small_numel, 4.0 * large_n * large_numel
    # n1 a + b1 c = t1, n2 a + b2 c = t2 (a: per tensor, c: seconds per byte)
    det = small_n * large_b - large_n * small_b
    per_tensor = (small_s * large_b - large_s * small_b) / det
    per_byte = (small_n * large_s - large_n * small_s) / det
    bandwidth = 1.0 / per_byte if per_byte > 0 else large_b / large_s
    return {
        "per_tensor_s": max(0.0, per_tensor),
        "bandwidth_Bps": bandwidth,
        "small_s": small_s,
        "large_s": large_s,
    }


OPTIMIZERS = ("sgd", "adam")
"""The optimizers :func:`step_cost` measures (``training.optimizer`` names)."""


def measure_rank(ctx: RankContext) -> dict[str, Any]:
    """Both measurements on this rank (every rank at once, as a replay runs them): the
    runtime's per-action overhead (``nproc >= 2``) and the step costs."""
    out: dict[str, Any] = {"step_cost": {o: step_cost(ctx.device, o) for o in OPTIMIZERS}}
    if ctx.world_size >= 2:
        out["action_overhead"] = action_overhead(ctx)
    return out


def runtime_fields(hardware: dict[str, Any], ranks: list[dict[str, Any]], kind: str) -> None:
    """Write :func:`measure_rank`'s results of every rank into ``hardware``: on CPU ranks as
    ``gpu.action_overhead`` (the ranks' mean, clamped at 0) and ``gpu.optimizer_step`` (the
    slowest rank's per-tensor cost and bandwidth), on GPUs in the description only (there the
    runtime's Python is host time that runs ahead of the device, which these fields do not
    model); both in the description."""
    runtime = [r["runtime"] for r in ranks]
    text = []
    if all("action_overhead" in r for r in runtime):
        fwd = max(0.0, statistics.mean(r["action_overhead"]["forward_s"] for r in runtime))
        bwd = max(0.0, statistics.mean(r["action_overhead"]["backward_s"] for r in runtime))
        if kind == "cpu":
            hardware["gpu"]["action_overhead"] = {
                "forward": f"{fwd * 1e6:.2f} us",
                "backward": f"{bwd * 1e6:.2f} us",
            }
        text.append(
            "Pipeline runtime per action (backends.torch.calibrate.runtime_costs: our StageRunner "
            "running GPipe on a tiny Linear(8, 8) per rank; each F/B span from its input's "
            f"arrival to its end less the stage timed alone, ranks' mean): forward "
            f"{fwd * 1e6:.1f} us, backward {bwd * 1e6:.1f} us."
        )
    steps: dict[str, dict[str, str]] = {}
    for opt in OPTIMIZERS:
        costs = [r["step_cost"][opt] for r in runtime]
        per_tensor = max(c["per_tensor_s"] for c in costs)
        bandwidth = min(c["bandwidth_Bps"] for c in costs)
        steps[opt] = {
            "per_tensor": f"{per_tensor * 1e6:.3f} us",
            "bandwidth": f"{bandwidth / 1e9:.4f} GB/s",
        }
        what = "the replay's plain SGD loop" if opt == "sgd" else "torch.optim.Adam, default"
        text.append(
            f"Step {opt} ({what}; 256 x 16 and 4 x 2^20 fp32 tensors, slowest rank): "
            f"{per_tensor * 1e6:.2f} us per tensor + bytes / {bandwidth / 1e9:.2f} GB/s."
        )
    if kind == "cpu":
        hardware["gpu"]["optimizer_step"] = steps
    hardware["description"] += " " + " ".join(text)
