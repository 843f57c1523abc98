"""Measure what each tensor-parallel layer costs beyond its share of the compute, in the replay's
layout.

The simulator times a tensor-parallel layer as its unsplit profile scaled by the compute model
(:mod:`sim.parallel.shard`: about ``1/t`` of the GEMMs), plus its collectives from the calibrated
tables, plus a per-module overhead. On CPU that leaves out most of what the replay
(:mod:`backends.torch.replay.tp`: ``torch.distributed.tensor.parallel`` on gloo) pays: each
DTensor op's Python dispatch (sharding propagation, ``from_local``/``to_local``), the linears'
bias added as a separate op on the sharded output, the redistributions' copies, and each
collective waiting for its peer inside a running layer (``_c10d_functional::wait_tensor`` was
the largest self time in ``torch.profiler``). The tiny 8 x 8 linear that ``sim calibrate`` times
(:func:`backends.torch.calibrate.comm.dtensor_overhead`) sees only the first of these: on the
2-core VM a block of hidden 256 at micro-batch 4 cost 13-15 ms forward and 22-23 ms backward
sharded over 2 gloo ranks, against 5.7 / 11.5 ms for the same rank's share as plain tensors and
2 x 1.1 ms of all-reduce measured alone: 6 and 9 ms per block that no trace held (2026-11-25,
2 ranks x 1 thread, torch 2.13.0+cpu, load average about 1).

So this module measures it on the model itself, on ``t`` ranks of ``threads`` threads each (the
replay's layout), for every micro-batch size, with and without sequence parallelism, for the
embedding, one block and the head (with the loss) as :func:`backends.torch.parallel.tensor.tp_chain`
splits them:

* ``sharded``: the layer's forward and backward as the replay runs it, collectives included;
* ``local``: the same rank's share as plain tensors, no collective, no DTensor (a block's
  ``3h/t``, ``h/t``, ``f/t`` slices of its linears; the head's ``V/t`` output rows and a
  cross-entropy over them; the embedding's ``V/t`` rows): what the scaled profile stands for;
* ``comm``: the collectives the simulator charges for the layer (:mod:`sim.parallel.megatron`:
  ``block_comm``, ``embedding_comm``, ``head_comm``) timed alone through torch's functional
  collectives, as ``sim calibrate`` times the tables it charges them from.

A layer's overhead is ``sharded - local - comm`` per phase (never below 0), each a median of
``reps`` forward-backward iterations after a barrier. :func:`measure` returns one entry per
``(sequence_parallel, microbatch_size)`` (``<kind>_fwd_s``, ``<kind>_bwd_s`` and the raw
medians), run and recorded as the trace's ``provenance.tensor_parallel_overhead`` by
:mod:`backends.torch.calibrate.tp_overhead`, which
:func:`sim.parallel.shard.shard_trace` charges per layer in place of the per-module overhead.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import loss_parallel

from backends.torch.calibrate.comm import collective_call, median_s
from backends.torch.models.transformer import (
    Embedding,
    Head,
    ModelSpec,
    as_spec,
    build_layers,
    lm_loss,
)
from backends.torch.parallel.tensor import TPBlock, linear_from, tp_chain
from backends.torch.replay.tp import local
from sim.parallel.megatron import layer_comm


def _fwd_bwd_s(
    layer: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, reps: int, warmup: int = 3
) -> tuple[float, float]:
    """Median ``(forward_s, backward_s)`` of ``layer`` on ``x``, each iteration after a barrier;
    the backward starts from the output's sum (a scalar loss itself), under ``loss_parallel``
    (what the replay runs the vocabulary-parallel loss under; plain tensors ignore it)."""
    fwd, bwd = [], []
    for i in range(warmup + reps):
        dist.barrier()
        t0 = time.perf_counter()
        with loss_parallel():
            y = layer(x)
        t1 = time.perf_counter()
        with loss_parallel():
            (y if y.dim() == 0 else local(y).sum()).backward()
        t2 = time.perf_counter()
        if i >= warmup:
            fwd.append(t1 - t0)
            bwd.append(t2 - t1)
    return statistics.median(fwd), statistics.median(bwd)


def rank_share(block: TPBlock, rank: int, t: int) -> TPBlock:
    """``block`` with its linears cut to rank ``rank``'s slices as plain tensors (module doc)."""
    h3, h, f = block.qkv.weight.shape[0], block.out.weight.shape[0], block.fc1.weight.shape[0]

    def rows(lin: nn.Linear, n: int) -> nn.Linear:
        part = slice(rank * n // t, (rank + 1) * n // t)
        return linear_from(lin.weight[part].detach(), lin.bias[part].detach())

    def cols(lin: nn.Linear, n: int) -> nn.Linear:
        part = slice(rank * n // t, (rank + 1) * n // t)
        return linear_from(lin.weight[:, part].detach(), lin.bias.detach())

    block.qkv, block.fc1 = rows(block.qkv, h3), rows(block.fc1, f)
    block.out, block.fc2 = cols(block.out, h), cols(block.fc2, f)
    return block


def _comm_s(kinds: list[tuple[str, int]], t: int, reps: int) -> float:
    """Seconds of ``(kind, bytes)`` collectives (:data:`KINDS` names), each timed alone."""
    dev = torch.device("cpu")
    calls: list[Callable[[], Any]] = [collective_call(k, n, t, dev) for k, n in kinds]
    return sum(median_s(call, dev, reps) for call in calls)


def _phase_comm(kind: str, b: int, s: int, h: int, t: int, sp: bool) -> tuple[list, list]:
    """``(forward, backward)`` collectives of a layer as ``(kind, bytes)``: the ones the
    simulator charges (:func:`sim.parallel.megatron.layer_comm`), in fp32."""
    comm = layer_comm(kind, b, s, h, 4, t, sp)
    return [(op.kind, int(op.nbytes)) for op in comm.fwd], [
        (op.kind, int(op.nbytes)) for op in comm.bwd
    ]


def _plain_head(head: Head, rank: int, t: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """Rank ``rank``'s share of the head as plain tensors: its ``V/t`` output rows and the
    cross-entropy over them (targets folded into the shard)."""
    v = head.out.weight.shape[0]
    part = slice(rank * v // t, (rank + 1) * v // t)
    out = nn.Linear(head.out.weight.shape[1], v // t, bias=False)
    with torch.no_grad():
        out.weight.copy_(head.out.weight[part])
    norm = head.transform

    def run(x: torch.Tensor) -> torch.Tensor:
        logits = out(norm(x))
        targets = torch.zeros(logits.shape[:-1], dtype=torch.long)
        return lm_loss(logits, targets)

    return run


def _plain_embedding(emb: Embedding, rank: int, t: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """Rank ``rank``'s share of the embedding as plain tensors: lookups in its ``V/t`` rows."""
    v, h = emb.tok.weight.shape
    tok = nn.Embedding(v // t, h)
    with torch.no_grad():
        tok.weight.copy_(emb.tok.weight[rank * v // t : (rank + 1) * v // t])
    pos = emb.pos

    def run(ids: torch.Tensor) -> torch.Tensor:
        return tok(ids % (v // t)) + pos(torch.arange(ids.shape[1]))

    return run


def overhead(sharded_s: float, local_s: float, comm_s: float) -> float:
    """The block's overhead of one phase: ``max(0, sharded - local - comm)`` seconds."""
    return max(0.0, sharded_s - local_s - comm_s)


def _sharded_chain(spec: ModelSpec, mesh: Any, sp: bool, seed: int) -> dict[str, Any]:
    """The replay's embedding, one block and head split over ``mesh``, and their plain
    per-rank shares (module doc)."""
    rank, t = dist.get_rank(), mesh.size()
    one = as_spec({**asdict(spec), "layers": 1})
    chain = tp_chain(one, mesh, sequence_parallel=sp, seed=seed)
    layers = build_layers(one, seed)
    emb, block, head = layers
    targets: dict[str, torch.Tensor] = {}

    def with_loss(x: torch.Tensor) -> torch.Tensor:
        return lm_loss(chain[-1](x), targets["ids"])

    plain = TPBlock(block, spec.hidden // spec.heads, t)  # type: ignore[arg-type]
    return {
        "embedding": (chain[0], _plain_embedding(emb, rank, t)),  # type: ignore[arg-type]
        "block": (chain[1], rank_share(plain, rank, t)),
        "head": (with_loss, _plain_head(head, rank, t)),  # type: ignore[arg-type]
        "targets": targets,
    }


def _inputs(kind: str, spec: ModelSpec, b: int, t: int, sp: bool) -> tuple[torch.Tensor, ...]:
    """``(sharded input, plain input)`` of a layer kind at micro-batch ``b``."""
    s, h = spec.seq_len, spec.hidden
    if kind == "embedding":
        ids = torch.randint(0, spec.vocab, (b, s))
        return ids, ids
    x = torch.randn(b, s, h, requires_grad=True)
    return (torch.randn(b, s // t, h, requires_grad=True) if sp else x), x


def run_rank(payload: dict[str, Any], ctx: Any) -> list[dict[str, Any]]:
    """Rank function: every ``(sequence_parallel, microbatch_size)`` entry (module doc); the
    plain shares, the same with and without sequence parallelism, are timed once per size."""
    spec = as_spec(payload["spec"])
    t, reps, seed = ctx.world_size, payload["reps"], payload.get("seed", 0)
    torch.manual_seed(seed)
    mesh = init_device_mesh("cpu", (t,))
    parts = {sp: _sharded_chain(spec, mesh, sp, seed) for sp in payload["sequence_parallel"]}
    entries: dict[tuple[bool, int], dict[str, Any]] = {}
    for b in payload["microbatch_sizes"]:
        local_s = {}
        for sp, chain in parts.items():
            chain["targets"]["ids"] = torch.randint(0, spec.vocab, (b, spec.seq_len))
            entry: dict[str, Any] = {"tensor_parallel": t, "sequence_parallel": sp,
                                     "microbatch_size": b}  # fmt: skip
            for kind in ("embedding", "block", "head"):
                (sharded, plain), (xs, x) = chain[kind], _inputs(kind, spec, b, t, sp)
                if kind not in local_s:
                    local_s[kind] = _fwd_bwd_s(plain, x, reps)
                sh, lo = _fwd_bwd_s(sharded, xs, reps), local_s[kind]
                ops = _phase_comm(kind, b, spec.seq_len, spec.hidden, t, sp)
                comm = [_comm_s(phase, t, reps) for phase in ops]
                entry[f"{kind}_fwd_s"] = overhead(sh[0], lo[0], comm[0])
                entry[f"{kind}_bwd_s"] = overhead(sh[1], lo[1], comm[1])
                entry[f"{kind}_raw_s"] = {"sharded": list(sh), "local": list(lo), "comm": comm}
            entries[(sp, b)] = entry
    return [entries[key] for key in sorted(entries)]
