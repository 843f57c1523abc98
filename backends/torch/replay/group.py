"""Expert- and context-parallel replays as ``sim validate`` asks them (:class:`TorchReplayer`).

A :class:`sim.replay.ReplayRequest` with ``expert_parallel > 1`` runs
:mod:`backends.torch.replay.ep` on ``ep`` gloo ranks (each a data-parallel replica holding
``E/ep`` experts, ``dp_width = ep``); one with ``context_parallel > 1`` runs
:mod:`backends.torch.replay.cp` on ``cp`` ranks with the request's ``context_parallel_comm``
(``all_gather``; ``p2p``: :mod:`backends.torch.parallel.ring_attention`; ``a2a``: Ulysses). Then one
process runs the same model on the same data (the modules' ``serial_run``), so the result carries
both the replay's losses and the reference's (``sim validate``'s ``losses_match``).

Only Hugging Face decoders profiled from a ``config.json`` (``sim profile --model
config.json``: ``provenance.model`` names :func:`backends.torch.models.hf.build` with the config's
absolute path and the sequence length), one stage, no tensor parallelism, memory policy
``none``, plain SGD, fp32, on CPU. What each rank measures: seconds per step after the warm-up
steps, its parameter bytes and the peak of its live saved-for-backward tensors
(:class:`~backends.torch.profile.saved_bytes.SavedBytes`); its memory is ``2 x parameters`` (weights
and gradients; SGD keeps no state) ``+`` that peak, as the CPU pipeline replay counts it.

Importing this module does not import torch; the replay starts it in its rank processes.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Any

from backends.torch.models.user_spec import current_ref, is_user_model
from backends.torch.replay.job import ReplayResult
from backends.torch.replay.launch import run_ranks
from sim.memory.registry import keeps_everything
from sim.replay import ReplayProblem, ReplayRequest

TARGETS = {
    "expert": ("backends.torch.replay.ep:run_rank", "backends.torch.replay.ep:serial_rank"),
    "context": ("backends.torch.replay.cp:run_rank", "backends.torch.replay.cp:serial_rank"),
}
"""Per kind: the rank's function and the single-process reference's."""
COMMS = ("all_gather", "p2p", "a2a")
"""``context_parallel_comm`` values the CP replay runs (:mod:`backends.torch.parallel.context`)."""
HF_BUILD = "backends.torch.models.hf:build"
LR = 0.01
"""SGD learning rate of the replay and its reference (any value: the check is equality)."""


def is_group_request(request: ReplayRequest) -> bool:
    """Whether ``request`` is expert- or context-parallel (run here, not by the pipeline)."""
    return request.expert_parallel > 1 or request.context_parallel > 1


def _kind(request: ReplayRequest) -> str:
    return "expert" if request.expert_parallel > 1 else "context"


def _hf_kwargs(model: dict[str, Any]) -> dict[str, Any] | None:
    if not is_user_model(model) or current_ref(model.get("source")) != HF_BUILD:
        return None
    kwargs = model.get("kwargs") or {}
    return kwargs if "config" in kwargs and "seq_len" in kwargs else None


def group_problems(request: ReplayRequest) -> list[ReplayProblem]:
    """Why the expert- or context-parallel replay cannot run ``request`` (empty if it can)."""
    out: list[tuple[str, str]] = []
    what = f"the {_kind(request)}-parallel replay"
    if request.expert_parallel > 1 and request.context_parallel > 1:
        out.append(("context_parallel", f"{what} runs expert or context parallelism, not both"))
    fixed = (
        ("stages", request.stages, 1),
        ("tensor_parallel", request.tensor_parallel, 1),
        ("virtual_stages", request.virtual_stages, 1),
        ("dtype", request.dtype, "fp32"),
        ("device", request.device.split(":")[0], "cpu"),
    )
    out += [(f, f"{what} runs {f} {want!r}, not {got!r}") for f, got, want in fixed if got != want]
    if not keeps_everything(request.memory_policy):
        out.append(
            ("memory_policy", f"{what} runs memory_policy 'none', not {request.memory_policy!r}")
        )
    if request.single_rank is not None:
        out.append(("single_rank", f"{what} runs every rank"))
    kwargs = _hf_kwargs(request.model)
    if kwargs is None:
        out.append(("model", f"{what} runs Hugging Face decoders profiled from a config.json"))
    if request.expert_parallel > 1 and request.dp_width != request.expert_parallel:
        out.append(
            (
                "dp_width",
                f"{what} makes its ranks the replicas: dp_width must equal expert_parallel "
                f"({request.expert_parallel}), not {request.dp_width}",
            )
        )
    if request.context_parallel > 1:
        cp = request.context_parallel
        if request.dp_width != 1:
            out.append(("dp_width", f"{what} runs one replica (dp_width 1)"))
        if request.context_parallel_comm not in COMMS:
            out.append(
                (
                    "context_parallel_comm",
                    f"{what} runs {', '.join(COMMS)}, not {request.context_parallel_comm!r}",
                )
            )
        if kwargs is not None and int(kwargs["seq_len"]) % (2 * cp):
            out.append(("model", f"seq_len {kwargs['seq_len']} must divide by 2 x cp = {2 * cp}"))
    return [ReplayProblem(f, r) for f, r in out]


def payload_of(request: ReplayRequest) -> dict[str, Any]:
    """The ranks' payload (:func:`backends.torch.replay.ep.run_rank`'s fields)."""
    kwargs = _hf_kwargs(request.model) or {}
    return dict(
        config=kwargs.get("config"),
        seq_len=int(kwargs.get("seq_len", 0)),
        seed=int(request.model.get("seed", 0)),
        b=request.microbatch_size,
        m=request.microbatches,
        iterations=request.iterations,
        warmup=request.warmup_iterations,
        lr=LR,
        comm=request.context_parallel_comm,
        world=request.ranks,
    )


def one_process_losses(kind: str, per_rank: list[list[float]]) -> list[float]:
    """The losses one process computes: every EP rank's own micro-batches in rank order; the
    mean of the CP ranks' (equal token counts) per micro-batch."""
    if kind == "expert":
        return [x for losses in per_rank for x in losses]
    return [sum(xs) / len(xs) for xs in zip(*per_rank, strict=True)]


def replay_group(request: ReplayRequest) -> ReplayResult:
    """Run ``request`` on its ranks, then the one-process reference; the measurement.

    Raises:
        backends.torch.replay.launch.ReplayError: a rank failed or the run timed out.
    """
    kind, payload = _kind(request), payload_of(request)
    target, reference = TARGETS[kind]
    n = request.ranks
    dev, limit_s, threads = request.device, request.timeout_s, request.threads
    ranks = run_ranks(target, payload, nproc=n, device=dev, timeout_s=limit_s, threads=threads)
    ref = run_ranks(
        reference,
        payload,
        nproc=1,
        device=dev,
        timeout_s=limit_s,
        threads=threads,
        process_group=False,
    )[0]
    times = [max(ts) for ts in zip(*(r["iteration_s"] for r in ranks), strict=True)]
    steps = request.warmup_iterations + request.iterations
    due = {"F": request.microbatches * steps, "B": request.microbatches * steps, "STEP": steps}
    ran = [{"F": len(r["losses"]), "B": len(r["losses"]), "STEP": steps} for r in ranks]
    memory = [
        {"param_bytes": r["param_bytes"], "grad_bytes": r["param_bytes"]}
        | {"act_peak_bytes": r["peak_saved_bytes"]}
        for r in ranks
    ]
    return ReplayResult(
        iteration_time_s=statistics.median(times),
        iteration_times_s=times,
        peak_memory_bytes=[2 * r["param_bytes"] + r["peak_saved_bytes"] for r in ranks],
        memory=memory,
        action_counts=ran,
        expected_action_counts=[due] * n,
        losses=one_process_losses(kind, [r["losses"] for r in ranks]),
        reference_losses=one_process_losses(kind, ref["losses"])
        if kind == "expert"
        else ref["losses"],
        notes=[
            f"{kind}-parallel replay on {n} gloo ranks (one stage, plain SGD); an iteration "
            "is the slowest rank's step",
            "CPU memory = 2 x parameter bytes (weights, gradients) + peak live "
            "saved-for-backward bytes (saved_tensors_hooks)",
        ],
        job=dataclasses.asdict(request),
        device_name="cpu-rank",
    )
