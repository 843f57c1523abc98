"""PyTorch's cuBLAS workspaces: how many a training process allocates and how large.

PyTorch gives every cuBLAS handle a workspace **allocated through its caching allocator**, so
it counts in ``torch.cuda.max_memory_allocated`` (and in Megatron's ``mem-max-allocated-bytes``):
``getNewWorkspace`` calls ``CUDACachingAllocator::get()->allocate(getChosenWorkspaceSize())``,
one per ``(handle, stream)`` pair (``setWorkspaceForHandle``), and handles are per thread (a
``thread_local`` pool window in ``getCurrentCUDABlasHandle``) (pytorch/pytorch@26a39059ec
``aten/src/ATen/cuda/CublasHandlePool.cpp``). A training step runs its forward GEMMs on the
Python thread and its backward GEMMs on autograd's device thread (``Engine::
start_device_threads``, one worker per CUDA device, ``torch/csrc/autograd/engine.cpp``), both
on the compute stream: two handles, two workspaces (:data:`TORCH_CUBLAS_HANDLES`).

The size (``parseChosenWorkspaceSize``): the ``CUBLAS_WORKSPACE_CONFIG`` environment variable,
``:SIZE_KIB:COUNT`` pairs summed (``:4096:8`` = 32 MiB, which Megatron's ``--deterministic-mode``
sets: ``megatron/training/determinism.py`` ``DETERMINISM_ENV_VAR_DEFAULTS``,
NVIDIA/Megatron-LM@d98e8a64dd), else ``:4096:2:16:8`` = 8 MiB + 128 KiB, or 32 MiB on
compute capability 9.0 exactly (Hopper; Blackwell gets the 8.125 MiB default):
``RuntimeReserve.cublas_workspace_bytes`` of the GPU (:mod:`sim.hardware.capacity`).
The cuBLASLt workspace is the same one (``TORCH_CUBLASLT_UNIFIED_WORKSPACE`` on by default,
``getCUDABlasLtWorkspace``).

Checked against Megatron-LM's functional tests (steady ``mem-allocated-bytes`` minus the
model states of a 12-layer h-512 GPT at tp 1, pp 1 with the distributed optimizer): 68.0 MiB
on A100 (2 x 32 MiB with ``:4096:8`` + TE's 4 MiB) and 96.0 MiB on GB200 (2 x 32 MiB + TE's
32 MiB + 1 KiB); these checks set no constant here.
"""

from __future__ import annotations

import re

TORCH_CUBLAS_HANDLES = 2
"""cuBLAS handles with a workspace in a training process: the forward's thread and autograd's
device thread (module doc)."""

_PAIR = re.compile(r":([0-9]+):([0-9]+)")


def parse_workspace_config(config: str) -> int:
    """Bytes of one workspace under ``CUBLAS_WORKSPACE_CONFIG=config``, as PyTorch parses it:
    every ``:SIZE:COUNT`` pair adds ``SIZE KiB x COUNT``.

    Raises:
        ValueError: no ``:SIZE:COUNT`` pair in ``config`` (PyTorch warns and takes its default;
            pipesim refuses the value instead).

    Example:
        >>> parse_workspace_config(":4096:8")
        33554432
        >>> parse_workspace_config(":4096:2:16:8")
        8519680
    """
    pairs = _PAIR.findall(config)
    if not pairs:
        raise ValueError(
            f"CUBLAS_WORKSPACE_CONFIG {config!r}: expected ':SIZE:COUNT' pairs (':4096:8')"
        )
    return sum(int(size) * 1024 * int(count) for size, count in pairs)


def torch_cublas_bytes(default_bytes: float, config: str | None = None) -> float:
    """Bytes of PyTorch's cuBLAS workspaces on a training GPU: :data:`TORCH_CUBLAS_HANDLES`
    workspaces of ``CUBLAS_WORKSPACE_CONFIG``'s size (``config``) or, unset, of the GPU's
    default (``default_bytes``: 8.125 MiB, 32 MiB on Hopper).

    Example:
        >>> torch_cublas_bytes(8519680.0, ":4096:8") / 2**20
        64.0
        >>> torch_cublas_bytes(8519680.0) / 2**20
        16.25
    """
    one = float(parse_workspace_config(config)) if config else default_bytes
    return TORCH_CUBLAS_HANDLES * one
