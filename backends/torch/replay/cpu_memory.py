"""CPU memory measured, not counted: the process's resident high-water mark during a replay.

torch 2.13 keeps no statistics for its CPU allocator (``torch.accelerator.memory_stats`` covers
accelerators only), so a CPU rank measures what the operating system saw: Linux's ``VmHWM``
(the peak resident set size, ``/proc/self/status``, proc(5)), reset to the current resident size
just before the run by writing ``5`` to ``/proc/self/clear_refs`` (Linux >= 4.0, proc(5)).

:class:`ResidentPeak` reports ``HWM during the run - RSS just before it + tensor bytes resident
before it`` (the stage's parameters and buffers, built before the run): what the run added at its
peak (gradients, saved activations, weight versions, receive buffers, the allocator's and
gloo's buffers, memory freed but not yet returned to the OS) on top of the weights it started
with. Before the baseline, freed heap memory is handed back with glibc's ``malloc_trim(0)``
so a layer the rank built and dropped (a user's model is built whole) does not count, and the
stage has already run one forward and backward (:func:`rehearse`), so what a process grows by
once at its first backward (library code paged in, oneDNN's JIT kernels, the allocator's and
autograd's thread caches: about 12 MiB, measured on the ViT example's stage, against a few MiB
of its tensors) does not count either. Where
``/proc`` or ``clear_refs`` is missing (not Linux) the measurement is ``nan``.
"""

from __future__ import annotations

import ctypes
import gc
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

STATUS = Path("/proc/self/status")
CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_kib(key: str) -> int | None:
    try:
        match = re.search(rf"^{key}:\s+(\d+) kB", STATUS.read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(match.group(1)) if match else None


def rss_bytes() -> float:
    """Resident set size now, bytes (``VmRSS``; ``nan`` where unknown)."""
    kib = _status_kib("VmRSS")
    return math.nan if kib is None else kib * 1024.0


def peak_rss_bytes() -> float:
    """Peak resident set size since the last reset, bytes (``VmHWM``; ``nan`` where unknown)."""
    kib = _status_kib("VmHWM")
    return math.nan if kib is None else kib * 1024.0


def reset_peak() -> bool:
    """Reset ``VmHWM`` to the current resident size; False where the kernel cannot."""
    try:
        CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


def trim_heap() -> None:
    """Collect garbage and return free heap memory to the OS (glibc ``malloc_trim(0)``)."""
    gc.collect()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


class ResidentPeak:
    """The resident peak of one run over its start (module docstring).

    Args:
        resident_tensor_bytes: bytes of the tensors the run starts with (parameters, buffers).

    Example:
        >>> peak = ResidentPeak(0.0)
        >>> peak.start(); block = bytearray(64 * 2**20); peak.stop() >= 60 * 2**20 or not peak.ok
        True
    """

    def __init__(self, resident_tensor_bytes: float):
        self.tensor_bytes = resident_tensor_bytes
        self.baseline = math.nan
        self.ok = False

    def start(self) -> None:
        """Trim the heap, take the baseline and reset the high-water mark."""
        trim_heap()
        self.baseline = rss_bytes()
        self.ok = reset_peak() and not math.isnan(self.baseline)

    def stop(self) -> float:
        """Bytes at the peak: ``VmHWM - baseline + resident_tensor_bytes`` (``nan`` if not
        measurable here)."""
        if not self.ok:
            return math.nan
        return peak_rss_bytes() - self.baseline + self.tensor_bytes


def rehearse(
    module: nn.Module, inputs: tuple[Any, ...], loss: Callable[[Any], torch.Tensor] | None
) -> None:
    """One forward and backward of ``module`` on ``inputs`` before a run's baseline (module
    docstring): with the RNG state restored after it, and the gradients it made dropped; the
    weights are untouched. ``loss`` maps the output to the last stage's loss; None: the
    output's backward with a gradient of ones."""
    with torch.random.fork_rng():
        y = module(*inputs)
        if loss is not None:
            torch.autograd.backward(loss(y))
        else:
            torch.autograd.backward(y, torch.ones_like(y))
    for p in module.parameters():
        p.grad = None


def stage_input(shape: Any, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A random received activation of ``shape`` and ``dtype`` (requiring grad when it is a
    float) for :func:`rehearse`."""
    t = torch.randn(shape, device=device).to(dtype)
    return t.requires_grad_() if t.is_floating_point() else t
