"""Counting the bytes autograd saves for backward, and replaying memory policies.

:class:`SavedBytes` is a pair of ``torch.autograd.graph.saved_tensors_hooks`` (memory.md §7):
``pack`` counts ``untyped_storage().nbytes()`` once per storage (keyed by its ``data_ptr``),
skipping parameters, and returns a small holder whose finaliser un-counts the storage when
autograd frees the saved tensor (after the backward, or when the graph is dropped). So
``live_bytes`` is the activation stash alive right now and ``peak_bytes`` its maximum: exact
and device-agnostic (the CUDA caching allocator rounds; this does not).

Policies (memory.md §7, "Replaying policies"), read from the simulator's own
policy class for the rank's stage (:func:`replay_policy`, ``MemoryPolicy.replay``):

* ``none``: keep every saved tensor on the device.
* ``recompute`` / ``recompute:full``: ``torch.utils.checkpoint`` around each block (done by
  :class:`backends.torch.models.StageModule`); only block inputs are saved.
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
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from backends.torch.models import Block, StageModule
from sim.memory.registry import replay_plan
from sim.memory.replay import ReplayPlan

if TYPE_CHECKING:
    from backends.torch.user_stage import UserStageModule


class _Held:
    """A saved tensor plus the bookkeeping that un-counts it when autograd drops it."""

    __slots__ = ("owner", "key", "tensor", "host")

    def __init__(self, owner: SavedBytes, key: int, tensor: torch.Tensor, host: bool):
        self.owner, self.key, self.tensor, self.host = owner, key, tensor, host

    def __del__(self) -> None:
        self.owner._release(self.key, self.host)


class SavedBytes:
    """Live and peak bytes saved for backward (once per storage, parameters excluded).

    Args:
        exclude: tensors (parameters) whose storages are never counted.
        offload: copy each saved tensor (``cpu_swap`` on a CPU device) and count it in
            ``host_live_bytes`` instead of ``live_bytes``.

    Example:
        >>> lin = torch.nn.Linear(4, 4)
        >>> sb = SavedBytes(lin.parameters())
        >>> with sb.hooks():
        ...     y = lin(torch.ones(2, 4, requires_grad=True)).relu()
        >>> sb.live_bytes  # the input (32 B) and relu's output (32 B)
        64
    """

    def __init__(self, exclude: Iterable[torch.Tensor] = (), offload: bool = False):
        self.offload = offload
        self._excluded: set[int] = set()
        self._refs: dict[tuple[int, bool], list[int]] = {}
        self.live_bytes = 0
        self.peak_bytes = 0
        self.host_live_bytes = 0
        self.host_peak_bytes = 0
        self.exclude(exclude)

    def exclude(self, tensors: Iterable[torch.Tensor]) -> None:
        """Never count the storages of ``tensors`` (call for every new weight version)."""
        self._excluded.update(t.untyped_storage().data_ptr() for t in tensors)

    def hooks(self) -> torch.autograd.graph.saved_tensors_hooks:
        """The context manager that installs the counting hooks."""
        return torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    def _pack(self, t: torch.Tensor) -> object:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr == 0 or ptr in self._excluded:
            return t
        if self.offload:
            t = t.detach().to("cpu", copy=True)
            ptr = t.untyped_storage().data_ptr()
            storage = t.untyped_storage()
        key = (ptr, self.offload)
        entry = self._refs.get(key)
        if entry is None:
            self._refs[key] = [1, storage.nbytes()]
            self._add(storage.nbytes(), self.offload)
        else:
            entry[0] += 1
        return _Held(self, ptr, t.detach(), self.offload)

    @staticmethod
    def _unpack(obj: object) -> torch.Tensor:
        return obj.tensor if isinstance(obj, _Held) else obj  # type: ignore[return-value]

    def _add(self, nbytes: int, host: bool) -> None:
        if host:
            self.host_live_bytes += nbytes
            self.host_peak_bytes = max(self.host_peak_bytes, self.host_live_bytes)
        else:
            self.live_bytes += nbytes
            self.peak_bytes = max(self.peak_bytes, self.live_bytes)

    def _release(self, ptr: int, host: bool) -> None:
        entry = self._refs.get((ptr, host))
        if entry is None:
            return
        entry[0] -= 1
        if entry[0] == 0:
            del self._refs[(ptr, host)]
            self._add(-entry[1], host)


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
    # a user's model (backends.torch.user_stage) has no Block class: each of its layers counts
    blocks = [isinstance(x, Block) or not isinstance(module, StageModule) for x in module.layers]
    policy = replay_policy(text, stage, stages, blocks)
    module.recompute = policy.checkpoint
    install_swaps(module.layers, policy, tracker)
    return policy


def saved_context(tracker: SavedBytes | None) -> contextlib.AbstractContextManager[Any]:
    """The context a stage's forward runs in: the counting hooks on CPU, nothing on CUDA."""
    return tracker.hooks() if tracker is not None else contextlib.nullcontext()


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Sum of ``numel * element_size`` in bytes."""
    return sum(t.numel() * t.element_size() for t in tensors)
