"""The data-parallel gradient reduction that overlaps the backward: DDP's buckets.

Overlap (PyTorch DDP, ``bucket_cap_mb=25``): the all-reduce of a backward that ends an
optimizer step runs in buckets of ``SimInput.dp_bucket_bytes`` while the backward computes.
Gradients are assumed to become ready at a uniform rate over the backward (an assumption: the
engine has per-stage, not per-layer, times), so bucket ``k`` of ``n`` is ready at
``start + dur * bytes_up_to_k / B``; buckets are reduced one after another (one NCCL stream), and
the optimizer step waits for the last one: only the tail is exposed. The engine runs a
backward's tensor- and expert-parallel exchanges after its compute (:mod:`sim.engine.groups`),
but in the model they sit inside the layers, before the gradients of the layers below them:
the last bucket (the stage's first layers' gradients, computed last; DDP's and Megatron-Core's
buckets are filled in reverse parameter order, ``param_and_grad_buffer.py``) is ready only at
the end of the whole backward, its exchanges included (Megatron-Core launches a bucket group's
collective from the gradient hook of its last parameter, ``distributed_data_parallel.py``
``_make_backward_post_hook`` -> ``register_grad_ready``). Within a hold of several
buckets (more than :data:`MAX_HOLDS` buckets), the buckets still run back to back as each
becomes ready; only contention with other traffic is resolved per hold instead of per bucket.
With sharded optimizer state the buckets are reduce-scattered instead (FSDP2's per-block
reduce-scatter). ``dp_bucket_bytes = 0`` reduces everything at the step, after the backward:
exposed (Megatron-LM without ``overlap_grad_reduce``, DeepSpeed's pipeline engine).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import simpy

from sim.comm.hierarchical import CollectivePlan
from sim.engine.links import DENSE, Links, Ticket
from sim.engine.sm_share import SmShare
from sim.events import Event, Stream
from sim.hardware.parts import Link

MAX_HOLDS = 4
"""Most link holds one bucketed all-reduce is simulated with (a 20 GB stage has 800 buckets of
25 MiB; simulating each would dominate the run)."""


def serial_bucket_bytes(nbytes: float, limit_bytes: float) -> tuple[float, ...]:
    """Sizes of the buckets an exposed all-reduce of ``nbytes`` runs in, one after another,
    each of at most ``limit_bytes`` (DeepSpeed's ``allreduce_no_retain``:
    :data:`sim.framework.deepspeed.SERIAL_BUCKET`): ``ceil(nbytes / limit)`` buckets, all full
    but the last. ``limit_bytes <= 0`` or ``nbytes <= limit_bytes``: one, ``(nbytes,)``.
    Assumption: tensor boundaries ignored (the code closes a bucket after the tensor that
    crosses the limit, so its buckets are larger by up to one tensor).

    Example (2.8e9 two-byte gradients in buckets of 5e8 elements: six, the last 3e8):
        >>> serial_bucket_bytes(5.6e9, 1e9)
        (1000000000.0, 1000000000.0, 1000000000.0, 1000000000.0, 1000000000.0, 600000000.0)
        >>> serial_bucket_bytes(8e8, 1e9), serial_bucket_bytes(8e8, 0.0)
        ((800000000.0,), (800000000.0,))
    """
    if limit_bytes <= 0 or nbytes <= limit_bytes:
        return (nbytes,)
    n = math.ceil(nbytes / limit_bytes)
    return (float(limit_bytes),) * (n - 1) + (nbytes - limit_bytes * (n - 1),)


def hold_groups(n: int) -> list[tuple[int, int]]:
    """``(first, last)`` bucket indices of each link hold: one per bucket up to
    :data:`MAX_HOLDS`; beyond, the last bucket alone and the others in ``MAX_HOLDS - 1``
    contiguous groups of nearly equal count."""
    if n <= MAX_HOLDS:
        return [(k, k) for k in range(n)]
    groups, head = [], n - 1
    for g in range(MAX_HOLDS - 1):
        lo, hi = head * g // (MAX_HOLDS - 1), head * (g + 1) // (MAX_HOLDS - 1) - 1
        groups.append((lo, hi))
    return groups + [(n - 1, n - 1)]


def buckets(nbytes: float, bucket_bytes: float) -> list[float]:
    """Sizes of the DDP buckets of ``nbytes`` of gradients: full buckets, the rest last."""
    if bucket_bytes <= 0 or nbytes <= bucket_bytes:
        return [nbytes]
    n = math.ceil(nbytes / bucket_bytes)
    return [bucket_bytes] * (n - 1) + [nbytes - bucket_bytes * (n - 1)]


def reduce_buckets(
    env: simpy.Environment,
    links: Links,
    plan: CollectivePlan,
    kind: str,
    nbytes_bucket: tuple[float, float],
    window_s: tuple[float, float],
    members: list,
    done: simpy.Event,
    held: tuple[Link, ...] | None = None,
    share: SmShare | None = None,
    order: int = DENSE,
    grads_done: simpy.Event | None = None,
) -> Iterator[simpy.Event]:
    """Process: reduce ``nbytes`` of gradients in buckets of ``bucket_bytes`` (``nbytes_bucket``,
    :func:`buckets`) with ``kind`` over ``plan``'s rings in order, each once it is ready and the previous one is done; consecutive
    buckets share one hold of the ring's links when there are more than :data:`MAX_HOLDS` (the
    last bucket always has its own: it is the exposed tail). ``window_s``: ``(start, duration)``
    of the backward that computes the gradients (module doc: bucket ``k`` is ready at ``start +
    duration * bytes_up_to_k / B``); ``members``: ``(stage replica, tags)`` of every replica, each
    logged an event per hold; ``done`` succeeds after the last bucket; ``held``: the links to
    hold (default: all of ``plan``'s; :class:`~sim.engine.symmetry.HeldLinks` when mirrored);
    ``share``: where each hold's NCCL thread blocks are counted against the members' compute
    (:mod:`sim.engine.sm_share`: ``plan.ctas`` at the hold's duty, kernel seconds over span);
    ``order``: its place among the collectives issued at one instant (:mod:`sim.engine.links`);
    ``grads_done``: the members' backward ends, exchanges included (module doc): the last
    bucket is not ready before it (None: at the end of the window)."""
    start_s, duration_s = window_s
    nbytes, bucket_bytes = nbytes_bucket
    sizes = buckets(nbytes, bucket_bytes)
    n = len(sizes)
    full_s = plan.time_s(sizes[0], kind)
    last_s = plan.time_s(sizes[-1], kind)

    def ready(k: int) -> float:  # bucket k is computed once its bytes and all before are
        return start_s + duration_s * (sizes[0] * (k + 1) / nbytes if k < n - 1 else 1.0)

    for first, last in hold_groups(n):
        if ready(first) > env.now:
            yield env.timeout(ready(first) - env.now)
        if last == n - 1 and grads_done is not None and not grads_done.processed:
            yield grads_done  # the last bucket alone (hold_groups): ready after the exchanges
        hold = plan.links if held is None else held
        comm = ("dp" if order == DENSE else "edp", plan.members)  # expert: its own group
        ticket = yield from links.take(comm, hold, order)
        begin = env.now
        # buckets first..last back to back as each becomes ready (equal sizes but the
        # last bucket, which is alone): end_k = max(end_k-1, ready_k) + cost_k, solved
        cost = last_s if last == n - 1 else full_s
        count = last - first + 1
        end_s = max(begin + count * cost, ready(last) + cost)  # uncontended
        gpus, ctas = [rep.gpu for rep, _ in members], 0.0
        if share is not None and end_s > begin:
            ctas = plan.ctas(sizes[first], kind) * min(1.0, count * cost / (end_s - begin))
            share.change(gpus, ctas)
        local = tuple(lk for lk in plan.local_links() if lk in hold)
        yield from _run_held(env, links, ticket, (plan, kind, local), sizes[first : last + 1],
                             ready(last))  # fmt: skip
        links.give(ticket)
        if share is not None and ctas:
            share.change(gpus, -ctas)
        label = f"b{first}" if first == last else f"b{first}-{last}"
        size = sum(sizes[first : last + 1])
        for rep, tags in members:
            links.events.append(
                Event(
                    kind,
                    rep.gpu,
                    Stream.COMM,
                    f"{kind} s{rep.stage} {label}",
                    begin,
                    env.now,
                    nbytes=size,
                    links=plan.names,
                    **tags,
                )
            )
    done.succeed()


def _run_held(env: simpy.Environment, links: Links, ticket: Ticket, how: tuple,
              sizes: list[float], ready_s: float) -> Iterator[simpy.Event]:  # fmt: skip
    """Process: buckets of ``sizes`` bytes on ``ticket`` back to back (:meth:`Links.run
    <sim.engine.links.Links.run>`: shared with other communicators), the last not before
    ``ready_s`` (when it is computed); ``how``: ``(plan, kind, local links)``, the local links
    given back after the buckets' local phases (:meth:`~sim.comm.hierarchical.
    CollectivePlan.local_s`)."""
    plan, kind, local = how
    cost_s = [plan.time_s(b, kind) for b in sizes]
    busy_s = [plan.local_s(b, kind) for b in sizes]
    if len(sizes) > 1:
        yield from links.run(ticket, sum(cost_s[:-1]), (local, sum(busy_s[:-1])))
    if ready_s > env.now:
        yield env.timeout(ready_s - env.now)
    yield from links.run(ticket, cost_s[-1], (local, busy_s[-1]))
