"""What the hardware replay runs for a memory policy on one stage: :class:`ReplayPlan`.

A policy says how the torch replay (``backends/torch``) runs it on a stage with
:meth:`sim.memory.base.MemoryPolicy.replay`, or raises :class:`NotReplayable`; the replay only
reads the plan (which layers to checkpoint with ``torch.utils.checkpoint``, which layers' saved
tensors go to host memory), so this module, like all of ``sim``, never imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class NotReplayable(ValueError):
    """The torch replay cannot run this memory policy (the message says which and why)."""


@dataclass(frozen=True)
class ReplayPlan:
    """How one stage runs its memory policy on real devices.

    Attributes:
        checkpoint: indices (within the stage) of the layers run under
            ``torch.utils.checkpoint`` (their activations are recomputed before the backward).
        swap: indices of the layers whose saved tensors go to host memory
            (``torch.autograd.graph.save_on_cpu``).
        swap_loss: the loss's saved tensors go to host memory too (every layer swaps).
        notes: where the replay differs from what the simulator models, for the report.

    Example:
        >>> ReplayPlan(checkpoint=frozenset({0, 1})).swap
        frozenset()
    """

    checkpoint: frozenset[int] = frozenset()
    swap: frozenset[int] = frozenset()
    swap_loss: bool = False
    notes: tuple[str, ...] = field(default=())
