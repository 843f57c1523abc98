"""Counting the bytes autograd saves for backward: :class:`SavedBytes`.

:class:`SavedBytes` is a pair of ``torch.autograd.graph.saved_tensors_hooks`` (memory.md §7):
``pack`` counts ``untyped_storage().nbytes()`` once per storage (keyed by its ``data_ptr``),
skipping parameters, and returns a small holder whose finaliser un-counts the storage when
autograd frees the saved tensor (after the backward, or when the graph is dropped). So
``live_bytes`` is the activation stash alive right now and ``peak_bytes`` its maximum: exact
and device-agnostic (the CUDA caching allocator rounds; this does not). The profiler counts a
layer's saved bytes with it, and every replay its stage's stash (the memory policies that move
or drop saved tensors: :mod:`backends.torch.replay.memory`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

import torch


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
        return torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)

    def pack(self, t: torch.Tensor) -> object:
        """The pack hook: count ``t``'s storage once (not a parameter's, nor an empty one) and
        return a holder that un-counts it when autograd drops it; with ``offload`` a host copy."""
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
    def unpack(obj: object) -> torch.Tensor:
        """The unpack hook: the tensor :meth:`pack` kept."""
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


def saved_context(tracker: SavedBytes | None) -> contextlib.AbstractContextManager[Any]:
    """The context a stage's forward runs in: the counting hooks on CPU, nothing on CUDA."""
    return tracker.hooks() if tracker is not None else contextlib.nullcontext()


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Sum of ``numel * element_size`` in bytes."""
    return sum(t.numel() * t.element_size() for t in tensors)
