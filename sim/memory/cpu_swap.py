"""Policy ``cpu_swap``: stashed activations go to pinned host DRAM between F and B (§4, §5.2).

After each forward the stash (or the fraction given as ``cpu_swap:0.5``) is copied to the GPU's
host socket over its PCIe route and freed on the GPU; it is prefetched back one action before the
backward, which stalls when the copy is late. Copies hold every link of the route, so two GPUs
behind one PCIe switch uplink (DGX-1) share it, and the host's DRAM holds the swapped bytes
(its capacity is checked by the ledger).
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.memory.base import MemoryPolicy, ReplayPlan
from sim.memory.compose import activation_plan, describe, ms
from sim.memory.context import StageContext
from sim.memory.estimate import swap_exposed_s, swap_live
from sim.memory.plan import StagePlan
from sim.memory.stash import stash
from sim.memory.states import StateBytes, stage_state_bytes_per_param


def parse_fraction(text: str, what: str) -> float:
    """A fraction in (0, 1] from ``text``.

    Raises:
        ValueError: not a number in (0, 1].
    """
    try:
        f = float(text)
    except ValueError:
        raise ValueError(f"{what} must be a number in (0, 1], got {text!r}") from None
    if not 0 < f <= 1:
        raise ValueError(f"{what} must be in (0, 1], got {text}")
    return f


class CpuSwapPolicy(MemoryPolicy):
    """Swap a fraction of every stash to host DRAM.

    Args:
        fraction: share of each micro-batch's stash that is swapped, in (0, 1].
    """

    name = "cpu_swap"
    description = "stash to pinned host DRAM over PCIe after F, prefetched back before B"
    replayable = True

    def __init__(self, fraction: float = 1.0):
        self.fraction = fraction

    @classmethod
    def from_args(cls, args: list[str]) -> CpuSwapPolicy:
        if len(args) > 1:
            raise ValueError("use cpu_swap or cpu_swap:FRACTION")
        return cls(parse_fraction(args[0], "cpu_swap fraction") if args else 1.0)

    def plan(self, ctx: StageContext) -> StagePlan:
        st = stash(ctx)
        parts = ((ctx.host, st.kept_bytes * self.fraction),)
        exposed = swap_exposed_s(ctx, parts)
        plan = activation_plan(ctx, st, parts)
        return describe(
            ctx,
            plan,
            f"cpu_swap {self.fraction:g}",
            ctx.microbatches * exposed,
            target=ctx.host,
            uplink_sharers=ctx.host_sharers,
            exposed_ms_per_microbatch=ms(exposed),
            swapped_live_microbatches=round(swap_live(ctx, parts), 2),
        )

    def min_state_bytes_per_param(
        self, states: StateBytes, dp_width: int, versions: int, version_bytes: float
    ) -> float:
        """Every model state stays on the GPU (only stashes move)."""
        return stage_state_bytes_per_param(states, versions, version_bytes)

    def replay(self, is_block: Sequence[bool], where: str) -> ReplayPlan:
        """The saved tensors of the stage's first ``round(fraction x L)`` of ``L`` layers go to
        host memory (a note gives the count when ``fraction < 1``)."""
        n = len(is_block)
        k = round(self.fraction * n)
        notes = (
            ()
            if k == n
            else (
                f"{where}: saved tensors of the first {k} of {n} layers go to host (the "
                f"simulator swaps {self.fraction:g} of the stash bytes)",
            )
        )
        return ReplayPlan(swap=frozenset(range(k)), swap_loss=k == n, notes=notes)
