"""Widths of the number formats the kernel and communication models count, in bytes per
element, for constants that both :mod:`sim.compute` and :mod:`sim.comm` need (they sit on one
floor and must not import each other, so the width lives on the floor below).

Source: IEEE 754-2019, binary32 (``torch.float32``: ``torch.finfo(torch.float32).bits`` = 32).
"""

from __future__ import annotations

FP32_BYTES = 4
"""Bytes of one IEEE 754 binary32 (``fp32``) element: routing probabilities are fp32 in
HybridEP (:data:`sim.compute.hybridep.PROB_BYTES`) and in its benchmark
(:func:`sim.comm.ep_dispatch.bench_payload`)."""
