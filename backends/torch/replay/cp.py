"""Context-parallel replay of a Hugging Face decoder on ``cp`` ranks (all-gather or ring
attention, or Ulysses: ``payload["comm"]``, ``all_gather`` by default, ``p2p`` or ``a2a``).

:func:`run_rank` is started on every rank by :func:`backends.torch.replay.launch.run_ranks`: each
rank builds the same model (same seed), switches its attention to
:mod:`backends.torch.parallel.context`, and runs every micro-batch on its own ``s/cp`` tokens of
the same sequences (load-balanced chunks), the loss over its tokens; gradients are averaged
over the ``cp`` ranks (Megatron-LM reduces them over ``dp x cp``), then plain SGD.
:func:`serial_run` is one process on the whole sequences: its loss is the mean of the ranks'
(equal token counts), its gradients theirs after the average, which
``tests/test_ep_cp_replay.py`` checks. Reports as :mod:`backends.torch.replay.ep`.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist

from backends.torch.models import hf
from backends.torch.parallel import context as cpa
from backends.torch.profile.saved_bytes import SavedBytes
from backends.torch.replay.ep import batch, build, gradient_lists, rank_report, sgd_step


def run_rank(payload: dict[str, Any], ctx) -> dict[str, Any]:
    """One CP rank (module doc). ``payload``: ``config, seq_len, seed, b, m, iterations,
    warmup, lr`` and optionally ``comm``."""
    chain, vocab = build(payload)
    cpa.install(chain, payload.get("comm", "all_gather"))
    pos = cpa.set_rank(payload["seq_len"], ctx.world_size, ctx.rank)
    cpa.set_positions(chain, pos)
    params = list(chain.parameters())
    tracker = SavedBytes(exclude=params)
    b, m, s, lr = payload["b"], payload["m"], payload["seq_len"], payload["lr"]
    losses, times, grads = [], [], {}
    for it in range(payload["warmup"] + payload["iterations"]):
        start = time.perf_counter()
        for mb in range(m):
            ids, targets = batch(vocab, b, s, payload["seed"], 0, it, mb)
            with tracker.hooks():
                loss = hf.loss(chain(ids[:, pos]), targets[:, pos])
            (loss / m).backward()
            losses.append(float(loss.detach()))
        for p in params:
            if p.grad is not None:
                dist.all_reduce(p.grad)
                p.grad /= ctx.world_size
        if it == 0:
            grads = gradient_lists(chain)
        sgd_step(params, lr)
        if it >= payload["warmup"]:
            times.append(time.perf_counter() - start)
    return rank_report(losses, times, tracker, params, grads, payload)


def serial_run(payload: dict[str, Any]) -> dict[str, Any]:
    """The single-process reference (module doc): losses per micro-batch, first gradients."""
    chain, vocab = build(payload)
    params = list(chain.parameters())
    b, m, s, lr = payload["b"], payload["m"], payload["seq_len"], payload["lr"]
    losses, grads = [], {}
    for it in range(payload["warmup"] + payload["iterations"]):
        for mb in range(m):
            ids, targets = batch(vocab, b, s, payload["seed"], 0, it, mb)
            loss = hf.loss(chain(ids), targets)
            (loss / m).backward()
            losses.append(float(loss.detach()))
        if it == 0:
            grads = gradient_lists(chain)
        sgd_step(params, lr)
    return {"losses": losses, "grads": grads}


def serial_rank(payload: dict[str, Any], ctx) -> dict[str, Any]:
    """:func:`serial_run` as a launched rank (``payload["world"]``: the parallel run's ranks),
    so the caller need not import torch; its losses only."""
    return {"losses": serial_run(payload)["losses"]}


__all__ = ["run_rank", "serial_rank", "serial_run", "torch"]
