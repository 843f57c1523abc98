"""Each rank's host thread in the engine: its clock, what each action costs it, its sync points.

A rank's process (:mod:`sim.engine.pipeline`) models its GPU's compute stream: ``env.now`` is
when the device is free for the next action. Beside it, :class:`HostClock` is the time the
rank's CPU thread has issued everything up to. An action's ops are summarised as a
:class:`~sim.hardware.host_ops.HostWork` (:func:`action_work`); the device ends the action at
``max(now + device_s, host + K)`` and the host moves on by ``host_s``
(:meth:`sim.engine.streams.ComputeStream.run_issued`). The host therefore runs ahead of the
device across actions while the device is the bottleneck, and the device idles between kernels
while the host is.

A **host sync point** is where the framework blocks the host until the device (or a transfer)
is done: ``torch.cuda.synchronize()``, ``.item()``, a blocking receive. There the host clock
jumps to that time (:meth:`HostClock.sync`). The engine calls it at the points named in
:data:`SYNC_POINTS` that :attr:`sim.engine.inputs.SimInput.host_syncs` lists; a framework
profile adds its own (Megatron's ``torch.cuda.synchronize()`` after each p2p
``batch_isend_irecv``, DeepSpeed's partitioned exchanges with tensor parallelism:
:mod:`sim.engine.exchanges`, which calls
:meth:`HostThreads.wait`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import simpy

from sim.hardware.host_ops import HostOverhead, HostWork


class LayerPart(NamedTuple):
    """One layer's share of an action, as the host issues it (:func:`layered_work`).

    Attributes:
        device_s: device seconds of the layer's kernels.
        ops: ops the host issues (framework ops; in a backward, those autograd dispatches).
        nograd_ops: of them, ops issued without autograd recording (a checkpointed forward).
        modules: ``nn.Module`` calls; in a backward 0.
        functions: ``autograd.Function`` applies; in a backward the Python backward nodes.
        te_modules: Transformer Engine modules (each runs its Python forward, or backward).
        sync_share: shares of the layer's ops issued before each host sync inside it, in
            increasing order (a MoE layer's token counts read on the host, a clamped GLU's
            offset copy: :data:`sim.compute.moe.HOST_SYNC_KERNELS`); empty without one.
        after_sync_ops: of ``ops``, those issued after the first host sync, spread evenly
            over the pieces after it (a MoE layer's grouped experts' per-expert host work,
            :attr:`sim.engine.stage_cost.StageCost.grouped_ops`: after the token counts, one
            ``GroupedLinear`` per piece with the offset copy between fc1 and fc2); without a
            sync, as the others.
        drain_s: device seconds of collectives the layer issues before its first host sync
            and the sync waits for (:meth:`sim.engine.stage_cost.StageCost.drained`), run
            after the kernels before it; without a sync, after all of its kernels.
        sync_reads: per host sync of ``sync_share`` (same order; missing: 0), the blocking
            host-device copies of a few bytes made there: after the wait the host spends
            :attr:`~sim.hardware.host_ops.HostOverhead.read_s` on each while the drained
            device runs nothing else (Megatron-DeepSpeed's two scalars,
            :data:`sim.framework.megatron_deepspeed.LAYER_SYNC_READS`).
    """

    device_s: float
    ops: float
    nograd_ops: float
    modules: float
    functions: float
    te_modules: float
    sync_share: tuple[float, ...] = ()
    after_sync_ops: float = 0.0
    drain_s: float = 0.0
    sync_reads: tuple[float, ...] = ()


SYNC_POINTS = {
    "recv": "after an action's input (activation or gradient) has arrived, before its ops "
    "are issued: a blocking receive, or torch.cuda.synchronize() after the p2p exchange",
    "step": "after the optimizer step: .item() on the gradient norm or the loss scaler's "
    "found-inf flag, or the end-of-iteration synchronize of a timed loop",
}
"""The engine's host sync points, by name."""

DEFAULT_SYNCS = frozenset({"step"})
"""Where the host waits by default: at the end of each optimizer step (assumption: the
training loop reads a scalar per iteration, as every timed loop and fp16 loss scaling do)."""


@dataclass
class HostClock:
    """One rank's CPU thread.

    Attributes:
        t: seconds at which it has issued everything so far.
    """

    t: float = 0.0

    def sync(self, until_s: float) -> None:
        """A blocking wait: the host is busy until at least ``until_s``."""
        self.t = max(self.t, until_s)


def action_work(
    host: HostOverhead,
    op: str,
    device_s: float,
    ops: float,
    regions: int = 0,
    nograd_ops: float = 0.0,
    calls: tuple[float, float, float] = (0.0, 0.0, 0.0),
) -> HostWork:
    """The :class:`HostWork` of one action.

    Args:
        host: the rank's host overhead.
        op: ``F`` (forward), ``B``/``I``/``W`` (backward parts), ``R`` (recompute before a
            backward).
        device_s: the action's device seconds.
        ops: the ops it issues (forward ops for ``F``/``R``, backward ops otherwise).
        regions: checkpointed regions (``R`` only).
        nograd_ops: of a forward's ops, those of checkpointed layers, which run without
            autograd recording (``F`` only).
        calls: ``(module calls, Function applies, Transformer Engine modules)`` of a forward
            or recompute; ``(0, Python backward nodes, Transformer Engine modules)`` of a
            backward (:meth:`~sim.hardware.host_ops.HostOverhead.calls_s`).
    """
    if op == "F":
        h = host.forward_s(ops, nograd_ops)
    elif op == "R":
        h = host.recompute_s(ops, regions)
    else:
        h = host.backward_s(ops)
    modules, functions, te = calls
    h += host.calls_s(modules, functions, op not in ("F", "R"), te)
    if h <= 0:
        return HostWork.device_only(device_s)
    return HostWork.of_ops(ops, h, device_s)


@lru_cache(maxsize=8192)
def layered_work(host: HostOverhead, op: str, parts: tuple[LayerPart, ...]) -> HostWork:
    """The :class:`HostWork` of an action issued layer by layer: each part
    (:class:`LayerPart`) summarised by :func:`action_work` (a recomputed layer ``R`` is one
    checkpointed region) and composed in order with :meth:`HostWork.then`; a layer with host
    syncs inside (``sync_share``, each in (0, 1)) as the pieces of device seconds, ops and
    calls between them with :meth:`HostWork.sync` at each cut (the ops alike, as within any
    layer, but its ``after_sync_ops`` evenly over the pieces after the first sync,
    :func:`_piece_ops`), then the cut's blocking copies (``sync_reads``, ``read_s`` each).

    Layer by layer, a host-bound layer (many small ops) and a device-bound one (a large GEMM)
    no longer hide each other's slack, as they would in one summary of the whole action
    (whose ops :func:`action_work` takes as alike); within a layer the ops are still alike.

    Example: a host 1 ms ahead of its device issues one layer of 150 ops (1.5 ms of host,
    1 ms of device): without a sync its lead hides the host, the device ends at 2 ms; with a
    sync half-way the host waits for the device there and the device then idles while the host
    issues the second half (the device ends at 1 ms + 0.5 ms + 0.75 ms + one op's 10 us).

    >>> h = HostOverhead(op_s=10e-6)
    >>> plain = layered_work(h, "F", (LayerPart(1e-3, 150.0, 0.0, 0.0, 0.0, 0.0),))
    >>> synced = layered_work(h, "F", (LayerPart(1e-3, 150.0, 0.0, 0.0, 0.0, 0.0, (0.5,)),))
    >>> [round(w.finish(0.0, 1e-3)[0] * 1e6) for w in (plain, synced)]
    [2000, 2257]
    """
    return _layered(host, op, parts)[0]


def drain_prefixes(
    host: HostOverhead, op: str, parts: tuple[LayerPart, ...]
) -> tuple[HostWork, ...]:
    """For each part of ``parts`` with a ``drain_s``, in order, the work of
    :func:`layered_work` issued before that drain: where the device runs it is
    ``max(*prefix.finish(host_free_s, device_free_s))`` (a device-only op starts when the device
    is done and the host has issued it), for ``drain_s`` seconds.

    >>> h = HostOverhead(op_s=10e-6)
    >>> part = LayerPart(1e-3, 100.0, 0.0, 0.0, 0.0, 0.0, (0.5,), 0.0, 2e-3)
    >>> [round(t * 1e6) for t in drain_prefixes(h, "F", (part,))[0].finish(0.0, 0.0)]
    [510, 500]
    """
    return _layered(host, op, parts)[1]


def _layered(
    host: HostOverhead, op: str, parts: tuple[LayerPart, ...]
) -> tuple[HostWork, tuple[HostWork, ...]]:
    """``(`` :func:`layered_work` ``,`` :func:`drain_prefixes` ``)``."""
    out, before = HostWork.device_only(0.0), []
    for device_s, ops, nograd, modules, functions, te, sync, after, drain, reads in parts:
        regions = 1 if op == "R" else 0
        pieces, copies = _pieces(sync), _cut_reads(sync, reads)
        for i, (k, n) in enumerate(zip(pieces, _piece_ops(ops, after, pieces), strict=True)):
            calls = (modules * k, functions * k, te * k)
            if i:
                out = out.then(HostWork.sync())
                if copies[i - 1] > 0 and host.read_s > 0:  # the copies after the wait
                    out = out.then(HostWork.of_ops(1.0, copies[i - 1] * host.read_s, 0.0))
            g = nograd * n / ops if after and ops else nograd * k
            out = out.then(action_work(host, op, device_s * k, n, 0 if i else regions, g, calls))
            if i == 0 and drain > 0:  # the collectives the first sync waits for
                before.append(out)
                out = out.then(HostWork.device_only(drain))
    return out, tuple(before)


def _piece_ops(ops: float, after: float, pieces: tuple[float, ...]) -> tuple[float, ...]:
    """A layer's ``ops`` over its ``pieces`` (:func:`_pieces`): the ``after`` of them evenly
    over the pieces after the first sync, the rest in proportion to each piece's share.

    >>> _piece_ops(100.0, 20.0, (1.0,)), _piece_ops(100.0, 20.0, (0.5, 0.25, 0.25))
    ((100.0,), (40.0, 30.0, 30.0))
    """
    if len(pieces) == 1:
        return (ops,)
    each = after / (len(pieces) - 1)
    return tuple((ops - after) * k + (each if i else 0.0) for i, k in enumerate(pieces))


def _cut_reads(cuts: tuple[float, ...], reads: tuple[float, ...]) -> tuple[float, ...]:
    """The blocking copies at each of a layer's sync ``cuts`` that :func:`_pieces` keeps (those
    inside (0, 1), in order), from ``reads`` (one per cut; missing: 0).

    >>> _cut_reads((0.0, 0.5, 0.75), (1.0, 2.0)), _cut_reads((0.5,), ())
    ((2.0, 0.0), (0.0,))
    """
    padded = (*reads, *(0.0,) * (len(cuts) - len(reads)))
    return tuple(r for c, r in zip(cuts, padded, strict=False) if 0.0 < c < 1.0)


def _pieces(cuts: tuple[float, ...]) -> tuple[float, ...]:
    """The shares of a layer between its sync ``cuts`` (cumulative, in order; those outside
    (0, 1) ignored), summing to 1.

    >>> _pieces(()), _pieces((0.25, 0.75)), _pieces((0.0, 0.5))
    ((1.0,), (0.25, 0.5, 0.25), (0.5, 0.5))
    """
    inner = [c for c in cuts if 0.0 < c < 1.0]
    edges = [0.0, *inner, 1.0]
    return tuple(b - a for a, b in zip(edges, edges[1:], strict=False))


class HostThreads:
    """The host thread of every rank's process, one per GPU.

    Args:
        env: the simulation environment (its ``now`` is the calling rank's device time).
        overhead_of: the host overhead of the process driving a GPU (node name).
        syncs: the sync points in force (:data:`SYNC_POINTS`).
    """

    def __init__(
        self,
        env: simpy.Environment,
        overhead_of: Callable[[str], HostOverhead],
        syncs: frozenset[str],
    ):
        self.env, self.overhead_of, self.syncs = env, overhead_of, syncs
        self._clocks: dict[str, HostClock] = {}

    def clock(self, gpu: str) -> HostClock:
        """The host thread driving ``gpu``."""
        clock = self._clocks.get(gpu)
        if clock is None:
            clock = self._clocks[gpu] = HostClock()
        return clock

    def sync(self, gpu: str, point: str) -> None:
        """Host sync point ``point``: when it is in force, ``gpu``'s host waits until now (its
        device is done with everything before it)."""
        if point in self.syncs:
            self.wait(gpu)

    def wait(self, gpu: str) -> None:
        """``gpu``'s host blocks until now, when its device is done with everything issued
        (``torch.cuda.synchronize()``): a framework's own sync points
        (:class:`~sim.engine.inputs.PipelineRuntime`, :mod:`sim.engine.exchanges`)."""
        self.clock(gpu).sync(self.env.now)

    def layered(self, gpu: str, op: str, parts: tuple[LayerPart, ...]) -> HostWork:
        """:func:`layered_work` with ``gpu``'s host overhead."""
        return layered_work(self.overhead_of(gpu), op, parts)

    def drain_prefixes(
        self, gpu: str, op: str, parts: tuple[LayerPart, ...]
    ) -> tuple[HostWork, ...]:
        """:func:`drain_prefixes` with ``gpu``'s host overhead."""
        return drain_prefixes(self.overhead_of(gpu), op, parts)

    def work(
        self,
        gpu: str,
        op: str,
        device_s: float,
        ops: float,
        regions: int = 0,
        nograd_ops: float = 0.0,
    ) -> HostWork:
        """:func:`action_work` with ``gpu``'s host overhead."""
        return action_work(self.overhead_of(gpu), op, device_s, ops, regions, nograd_ops)
