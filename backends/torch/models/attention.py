"""Choosing torch's scaled-dot-product attention kernel: ``flash`` or ``math``.

The GPT blocks (:class:`backends.torch.models.transformer.Block`) call
``torch.nn.functional.scaled_dot_product_attention`` through ``nn.MultiheadAttention`` with
``is_causal=True``, so torch may pick its flash kernel (no ``s x s`` score matrix is stored) or
the math path (scores and softmax are materialised and saved for backward: ``~5 a s^2 b`` bytes
per block, the Korthikanti formula of ``sim.trace.generator``). :func:`attention_kernel` pins
one of them with ``torch.nn.attention.sdpa_kernel``; the choice is made in the forward, and the
backward follows the kernel the forward used.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

ATTENTION_KERNELS = ("flash", "math")
"""Kernels :func:`attention_kernel` accepts."""


@contextlib.contextmanager
def attention_kernel(name: str | None) -> Iterator[None]:
    """Run the block's attention with kernel ``name`` inside (``None``: torch chooses).

    Raises:
        ValueError: ``name`` is not ``flash``, ``math`` or ``None``.
        RuntimeError: (from torch, at the first attention call) the kernel cannot run these
            inputs, e.g. flash with fp32 on a GPU.
    """
    if name is None:
        yield
        return
    if name not in ATTENTION_KERNELS:
        raise ValueError(f"attention {name!r} must be one of {', '.join(ATTENTION_KERNELS)}")
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = SDPBackend.FLASH_ATTENTION if name == "flash" else SDPBackend.MATH
    with sdpa_kernel([backend]):
        yield
