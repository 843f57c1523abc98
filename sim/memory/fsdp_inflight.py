"""FSDP2's unsharded bytes in flight during a stage's action, without simulating time.

What :mod:`sim.engine.fsdp` charges the ledger as the units run, as the largest moment of a
forward or a backward, for the rank model (:mod:`sim.memory.rank_memory`). Sources: the
installed torch 2.13.0 (``git_version cf30153``), ``torch/distributed/fsdp/_fully_shard/
_fsdp_param_group.py`` (``unshard`` 372-416, ``wait_for_unshard`` 417-489, ``pre_backward``
576-585, ``post_backward`` 588-720) and ``_fsdp_state.py`` 420-431 (the backward's final
callback), torch pipelining ``pipelining/stage.py`` 781-855 and 1164-1195, and
``pytorch/torchtitan@b5bcd76`` ``torchtitan/distributed/fsdp.py`` 112-136 (the reshard policy).
Per unit ``i`` (forward order; ``P`` its unsharded parameters and ``A`` its all-gather output,
both in ``param_dtype``; ``G`` its autograd gradients in ``param_dtype``; ``R`` its
reduce-scatter input, or its accumulated unsharded gradients, in ``reduce_dtype``):

* **forward** (implicit prefetch): the copy-out of ``P_i`` happens with ``A_{i-1}`` still kept
  (its free is deferred to the next copy-out, 480-486) and ``A_i``; unit ``i`` then computes
  while ``A_{i+1}`` is gathered. The all-gather outputs come from the all-gather streams' pool
  of the caching allocator, so the freed ``P_{i-1}`` does not hold them: ``P_i + A_{i-1} + A_i``
  and ``P_i + A_i + A_{i+1}``, plus the units kept from earlier in the pass (``reshard_after_
  forward`` False: ``P``; an int ``k``: ``P/k``; with PP every unit: ``P``).
* **backward**: ``A_i`` is freed right after its copy-out (417-425: no deferral in backward),
  then ``A_{i-1}`` is prefetched (``_backward_prefetch``); autograd makes ``G_i``; the previous
  unit's ``R_{i+1}`` is kept (``reduce_scatter_states``, one buffer in flight) until this
  unit's ``post_backward``, which reshards ``P_i``, drops ``R_{i+1}``, copies ``G_i`` into
  ``R_i`` and frees ``G_i``; the last ``R`` is dropped by the final callback. Moments:
  ``P_i + A_i + R_{i+1}`` (copy-out), ``P_i + A_{i-1} + G_i + R_{i+1}`` (compute),
  ``A_{i-1} + G_i + R_i`` (post-backward), plus the units before ``i`` kept from the forward.
* **with pipeline parallelism** (:attr:`FsdpPlan.accumulate`): the units are gathered at the
  stage's first forward and kept to the step; each backward's ``G_i`` is accumulated into
  ``R_i``, allocated at the unit's first backward and kept to the step.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.memory.fsdp_units import FsdpPlan, FsdpUnit


@dataclass(frozen=True)
class FsdpBytes:
    """FSDP's unsharded bytes at one moment, by the ledger's category: ``weights`` (unsharded
    parameters), ``gradients`` (autograd gradients, reduce-scatter inputs, accumulated
    gradients), ``buffers`` (all-gather outputs)."""

    weights: float = 0.0
    gradients: float = 0.0
    buffers: float = 0.0

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.buffers

    def __add__(self, other: FsdpBytes) -> FsdpBytes:
        return FsdpBytes(
            self.weights + other.weights,
            self.gradients + other.gradients,
            self.buffers + other.buffers,
        )


NONE = FsdpBytes()


@dataclass(frozen=True)
class FsdpState:
    """A stage's FSDP state between actions (module doc).

    Attributes:
        gathered: with accumulation, its units are unsharded (after its first forward).
        accumulated: with accumulation, its gradients are allocated (after its first backward).
        held: without accumulation, its ``reshard_after_forward`` False (or int) units are kept
            from a forward until the next backward.
    """

    gathered: bool = False
    accumulated: bool = False
    held: bool = False


def kept_bytes(fs: FsdpPlan, state: FsdpState) -> FsdpBytes:
    """Bytes the stage keeps between actions in ``state``."""
    if fs.accumulate:
        w = sum(fs.unsharded_bytes(u) for u in fs.units) if state.gathered else 0.0
        g = sum(fs.grad_bytes(u) for u in fs.units) if state.accumulated else 0.0
        return FsdpBytes(w, g)
    if state.held:
        return FsdpBytes(sum(fs.held_bytes(u) for u in fs.units))
    return NONE


def _kept_after_forward(fs: FsdpPlan, unit: FsdpUnit) -> float:
    return fs.unsharded_bytes(unit) if fs.accumulate else fs.held_bytes(unit)


def forward_peak(fs: FsdpPlan, state: FsdpState) -> FsdpBytes:
    """The largest moment of a forward of the stage in ``state`` (module doc)."""
    if fs.accumulate and state.gathered:
        return kept_bytes(fs, state)
    units, best = fs.units, NONE
    before = 0.0
    for i, unit in enumerate(units):
        p = fs.unsharded_bytes(unit)
        prev = fs.unsharded_bytes(units[i - 1]) if i else 0.0
        nxt = fs.unsharded_bytes(units[i + 1]) if i + 1 < len(units) else 0.0
        for cand in (FsdpBytes(before + p, 0.0, prev + p), FsdpBytes(before + p, 0.0, p + nxt)):
            best = max(best, cand, key=lambda b: b.total)
        before += _kept_after_forward(fs, unit)
    return best


def backward_peak(fs: FsdpPlan, state: FsdpState) -> FsdpBytes:
    """The largest moment of a backward of the stage in ``state`` (module doc)."""
    units, best = fs.units, NONE
    if fs.accumulate:
        every = sum(fs.unsharded_bytes(u) for u in units)
        done = sum(fs.grad_bytes(u) for u in units) if state.accumulated else 0.0
        for unit in reversed(units):
            g = unit.elements * fs.param_bytes
            if not state.accumulated:
                done += fs.grad_bytes(unit)
            best = max(best, FsdpBytes(every, done + g), key=lambda b: b.total)
        return best
    held = [fs.held_bytes(u) for u in units]
    for i in reversed(range(len(units))):
        unit = units[i]
        p, g, r = fs.unsharded_bytes(unit), unit.elements * fs.param_bytes, fs.grad_bytes(unit)
        kept = sum(held[:i])
        gathered = unit.reshard is not False
        r_next = fs.grad_bytes(units[i + 1]) if i + 1 < len(units) else 0.0
        prefetch = 0.0
        if i and units[i - 1].reshard is not False:
            prefetch = fs.unsharded_bytes(units[i - 1])
        moments = [
            FsdpBytes(kept + p, g + r_next, prefetch),
            FsdpBytes(kept, g + r, prefetch),
        ]
        if gathered:
            moments.append(FsdpBytes(kept + p, r_next, p))
        for cand in moments:
            best = max(best, cand, key=lambda b: b.total)
    return best


def after(fs: FsdpPlan, state: FsdpState, op: str, done: bool) -> FsdpState:
    """The stage's state after an action ``op`` (``done``: it ends a micro-batch's backward)."""
    if op == "F":
        return FsdpState(fs.accumulate, state.accumulated, not fs.accumulate)
    if fs.accumulate:
        return FsdpState(state.gathered, True, False)
    return FsdpState(False, False, state.held and not done)


def step_peak_bytes(fs: FsdpPlan) -> float:
    """The largest of a stage's FSDP moments over a step (its first forward, its backwards
    with the gradients of earlier micro-batches), for a plan's estimate."""
    first = forward_peak(fs, FsdpState())
    gathered = after(fs, FsdpState(), "F", False)
    later = after(fs, gathered, "B", True) if fs.accumulate else FsdpState(held=True)
    return max(first.total, backward_peak(fs, gathered).total, backward_peak(fs, later).total)
