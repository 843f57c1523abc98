"""Expert-parallel replay of a Hugging Face MoE model (Mixtral layout) on ``ep`` ranks.

:func:`run_rank` is started on every rank by :func:`backends.torch.replay.launch.run_ranks`: each
rank builds the same model (same seed; :mod:`backends.torch.models.hf`), keeps its ``E/ep`` experts
(:mod:`backends.torch.parallel.expert`) and trains its own data-parallel micro-batches (one
stage, ``m`` micro-batches per step of ``b`` samples, plain SGD), the tokens going to the
experts' ranks by all-to-all. :func:`serial_run` is the single-process reference: the whole
model on every rank's micro-batches, the loss of each ``(rank, micro-batch)`` computed apart
and the gradient of their mean. The two give the same losses and, after the first step's
backward, the same gradients (dense ones averaged over the ranks, expert ones on their
owner), which ``tests/test_ep_cp_replay.py`` checks.

Each rank reports its losses, per-iteration wall seconds (after ``warmup`` steps), the peak
of live saved-for-backward bytes (:class:`~backends.torch.profile.saved_bytes.SavedBytes`,
parameters excluded) and its parameter bytes, as the other CPU replays do.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from backends.torch.models import hf
from backends.torch.parallel.expert import expert_parallel, reduce_gradients
from backends.torch.profile.saved_bytes import SavedBytes


def batch(vocab: int, b: int, seq_len: int, seed: int, rank: int, it: int, mb: int):
    """``(ids [b, s], targets [b, s])`` of rank ``rank``'s micro-batch ``mb`` of step ``it``."""
    g = torch.Generator().manual_seed(((seed * 1009 + rank) * 1009 + it) * 1009 + mb)
    ids = torch.randint(0, vocab, (b, seq_len + 1), generator=g)
    return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()


def build(payload: dict[str, Any]):
    """The model of ``payload`` (``config``, ``seq_len``, ``seed``) and its vocabulary size."""
    torch.manual_seed(payload["seed"])
    chain, ids, _ = hf.build(payload["config"], payload["seq_len"], 1)
    vocab = int(chain.embed.embed.num_embeddings)
    return chain, vocab


def gradient_lists(chain: torch.nn.Module) -> dict[str, list[float]]:
    """Each parameter's gradient, flattened to a JSON list, by name (``None`` gradients left
    out): what a rank returns for the comparison with the one-process run."""
    return {
        n: p.grad.detach().flatten().tolist()
        for n, p in chain.named_parameters()
        if p.grad is not None
    }


def sgd_step(params: list[torch.nn.Parameter], lr: float) -> None:
    """Plain SGD in place, ``p <- p - lr * grad``, then clear the gradients."""
    with torch.no_grad():
        for p in params:
            if p.grad is not None:
                p.sub_(lr * p.grad)
                p.grad = None


def rank_report(
    losses: list[float],
    times: list[float],
    tracker: SavedBytes,
    params: list[torch.nn.Parameter],
    grads: dict[str, list[float]],
    payload: dict[str, Any],
) -> dict[str, Any]:
    """What a CPU replay rank reports (module doc): its losses, per-iteration wall seconds,
    peak saved bytes, parameter bytes, and the first step's gradients when
    ``payload["return_grads"]``."""
    return {
        "losses": losses,
        "iteration_s": times,
        "peak_saved_bytes": tracker.peak_bytes,
        "param_bytes": sum(p.numel() * p.element_size() for p in params),
        "grads": grads if payload.get("return_grads") else {},
    }


def run_rank(payload: dict[str, Any], ctx) -> dict[str, Any]:
    """One EP rank (module doc). ``payload``: ``config, seq_len, seed, b, m, iterations,
    warmup, lr``."""
    chain, vocab = build(payload)
    expert = expert_parallel(chain, ctx.rank, ctx.world_size)
    params = list(chain.parameters())
    tracker = SavedBytes(exclude=params)
    b, m, s, lr = payload["b"], payload["m"], payload["seq_len"], payload["lr"]
    losses, times, grads = [], [], {}
    steps = payload["warmup"] + payload["iterations"]
    for it in range(steps):
        start = time.perf_counter()
        for mb in range(m):
            ids, targets = batch(vocab, b, s, payload["seed"], ctx.rank, it, mb)
            with tracker.hooks():
                loss = hf.loss(chain(ids), targets)
            (loss / m).backward()
            losses.append(float(loss.detach()))
        reduce_gradients(params, expert, ctx.world_size)
        if it == 0:
            grads = gradient_lists(chain)
        sgd_step(params, lr)
        if it >= payload["warmup"]:
            times.append(time.perf_counter() - start)
    return rank_report(losses, times, tracker, params, grads, payload)


def serial_run(payload: dict[str, Any], world: int) -> dict[str, Any]:
    """The single-process reference of :func:`run_rank` on ``world`` ranks (module doc):
    losses in ``[rank][iteration, micro-batch]`` order and the first step's gradients."""
    chain, vocab = build(payload)
    params = list(chain.parameters())
    b, m, s, lr = payload["b"], payload["m"], payload["seq_len"], payload["lr"]
    losses: list[list[float]] = [[] for _ in range(world)]
    grads: dict[str, list[float]] = {}
    for it in range(payload["warmup"] + payload["iterations"]):
        for mb in range(m):
            for r in range(world):
                ids, targets = batch(vocab, b, s, payload["seed"], r, it, mb)
                loss = hf.loss(chain(ids), targets)
                (loss / (m * world)).backward()
                losses[r].append(float(loss.detach()))
        if it == 0:
            grads = gradient_lists(chain)
        sgd_step(params, lr)
    return {"losses": losses, "grads": grads}


def serial_rank(payload: dict[str, Any], ctx) -> dict[str, Any]:
    """:func:`serial_run` as a launched rank (``payload["world"]``: the parallel run's ranks),
    so the caller need not import torch; its losses only."""
    return {"losses": serial_run(payload, payload["world"])["losses"]}
