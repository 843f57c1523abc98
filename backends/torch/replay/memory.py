"""Replaying memory policies on a rank: recompute, and swapping saved tensors to the host.

What a stage saves for backward is counted by
:class:`backends.torch.profile.saved_bytes.SavedBytes`.

Policies (memory.md §7, "Replaying policies"), read from the simulator's own
policy class for the rank's stage (:func:`replay_policy`, ``MemoryPolicy.replay``):

* ``none``: keep every saved tensor on the device.
* ``recompute`` / ``recompute:full``: ``torch.utils.checkpoint`` around each block (done by
  :class:`backends.torch.models.transformer.StageModule`); only block inputs are saved.
  ``recompute:full:N``: only the blocks among the stage's first ``N`` layers.
  ``recompute:selective`` is not replayed: the stage keeps every activation and a note says so.
* ``cpu_swap[:f]``: the saved tensors of the stage's first ``round(f * L)`` of ``L`` layers go
  to host memory (a note gives the count when ``f < 1``: the simulator swaps ``f`` of the stash
  bytes). On CUDA this is torch's ``torch.autograd.graph.save_on_cpu(pin_memory=True)`` around
  those layers; on CPU, where device and host are the same memory, :class:`SavedBytes` copies
  them and counts them as host bytes, not device bytes. As in ``save_on_cpu``, each saved tensor
  gets its own copy, so tensors that shared a storage on the device no longer share it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from backends.torch.models.transformer import Block, StageModule
from backends.torch.profile.saved_bytes import SavedBytes
from sim.memory.registry import replay_plan
from sim.memory.replay import ReplayPlan

if TYPE_CHECKING:
    from backends.torch.models.user_stage import UserStageModule


ReplayPolicy = ReplayPlan
"""What one rank does about memory: the replay of its stage's policy
(:class:`sim.memory.replay.ReplayPlan`, which the policy's class builds)."""


def replay_policy(text: str, stage: int, stages: int, is_block: Sequence[bool]) -> ReplayPolicy:
    """The :class:`ReplayPolicy` of ``stage`` for the ``memory_policy`` string ``text``: what
    the stage's policy class says (:func:`sim.memory.registry.replay_plan`).

    Args:
        text: the simulator's ``memory_policy`` (per-stage specs joined by ``|`` allowed).
        stage: this rank's stage; ``stages``: the pipeline depth.
        is_block: for each layer of the stage, whether it is a transformer block.

    Raises:
        ValueError: a policy the replay cannot run (only replayable classes: ``none``,
            ``recompute`` and ``cpu_swap``), or a per-stage spec for another number of stages.

    Example:
        >>> replay_policy("none|cpu_swap:0.5", 1, 2, [True] * 4).swap
        frozenset({0, 1})
    """
    return replay_plan(text, stage, stages, is_block)


@contextlib.contextmanager
def offloading(tracker: SavedBytes | None) -> Iterator[None]:
    """Tensors saved for backward inside go to host memory: ``tracker``'s host copies (CPU) or
    ``save_on_cpu(pin_memory=True)`` (``tracker`` None: CUDA)."""
    if tracker is None:
        with torch.autograd.graph.save_on_cpu(pin_memory=True):
            yield
        return
    before, tracker.offload = tracker.offload, True
    try:
        yield
    finally:
        tracker.offload = before


def install_swaps(
    layers: nn.ModuleList | Sequence[nn.Module], policy: ReplayPolicy, tracker: SavedBytes | None
) -> None:
    """Run ``layers[i]``, ``i`` in ``policy.swap``, under :func:`offloading` (forward pre/post
    hooks enter and leave it)."""
    for i in sorted(policy.swap):
        open_contexts: list[Any] = []

        def enter(_module: nn.Module, _args: Any, _open: list[Any] = open_contexts) -> None:
            ctx = offloading(tracker)
            ctx.__enter__()
            _open.append(ctx)

        def leave(_m: nn.Module, _a: Any, _out: Any, _open: list[Any] = open_contexts) -> None:
            _open.pop().__exit__(None, None, None)

        layers[i].register_forward_pre_hook(enter)
        layers[i].register_forward_hook(leave)


def apply_policy(
    module: StageModule | UserStageModule,
    text: str,
    stage: int,
    stages: int,
    tracker: SavedBytes | None,
) -> ReplayPolicy:
    """Set ``module`` up to run stage ``stage``'s policy from ``text``; returns what it runs.

    Raises:
        ValueError: as :func:`replay_policy`.
    """
    # a user's model (backends.torch.models.user_stage) has no Block class: each layer counts
    blocks = [isinstance(x, Block) or not isinstance(module, StageModule) for x in module.layers]
    policy = replay_policy(text, stage, stages, blocks)
    module.recompute = policy.checkpoint
    install_swaps(module.layers, policy, tracker)
    return policy
