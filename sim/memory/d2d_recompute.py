"""Policy ``d2d_swap+recompute`` (MPress with recomputation, Zhou et al. HPCA'23; memory.md
§5.3): checkpoint every layer (as ``recompute``, memory.md §5.1) and let MPress's planner park
the checkpoints on NVLink peers' spare memory, or the host, where the stage still overflows.

Zero peer and host bytes is one of its candidates, so it fits every model ``recompute`` fits,
and more where peers have room; it pays the full recompute even where ``d2d_swap`` (which
recomputes only as much as it must) would not.
"""

from __future__ import annotations

from sim.memory.d2d_swap import D2DSwapPolicy


class D2DRecomputePolicy(D2DSwapPolicy):
    """``d2d_swap`` with every layer fully checkpointed (module doc).

    Args:
        weights: also try moving stashed weight versions with the checkpoints.
    """

    name = "d2d_swap+recompute"
    description = "MPress + full recompute: checkpoint every layer, park checkpoints on peers"
    recompute = "full"
