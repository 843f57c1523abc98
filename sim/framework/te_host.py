"""Transformer Engine's modules in a stage's layers: the host work their Python adds.

Megatron-Core builds its layers from Transformer Engine modules unless ``--transformer-impl
local`` (NVIDIA/Megatron-LM@d98e8a64 ``megatron/core/transformer/transformer_config.py``:
``transformer_impl = "transformer_engine"``). A TE module's forward runs Python that a torch
Linear does not (``prepare_forward``, the recipe and dtype checks, its ``autograd.Function``'s
argument handling): NVIDIA/TransformerEngine#2053 measured the host time of one Linear forward
(BF16, hidden 2048, 8192 tokens) at 99.66 us for ``te.Linear`` and 37.08 us for
``torch.nn.Linear`` on GB200, 90.53 and 33.17 us on GH200. The layers' op counts stand for
Megatron's local layers (:mod:`sim.compute.megatron_ops`, :mod:`sim.compute.mcore_ops`), so
each TE module adds :attr:`~sim.hardware.host_ops.HostOverhead.te_module_s` on the host
(:data:`sim.compute.mcore_ops.TE_MODULES` per layer) in its forward, and as much again in its
backward (an assumption: TE#2053 timed the forward only; NVIDIA/TransformerEngine#445 timed a
host-bound ``te.Linear`` step on an H100 at 3.3x torch's, 0.574 against 0.176 ms, where the
forward alone is 2.7x: :meth:`sim.hardware.host_ops.HostOverhead.calls_s`). TE#2053 ran a TE of
2025-08 (<= 2.6), before TE's CPU-overhead PRs (#2377 and #2400 in v2.10, #2559 in v2.14, #2957
in v2.16), none of which states a host figure; the price is not made version-dependent for want
of one (``measurements/host/grace_host.md``).

**What the extra is, and how it carries from Grace to x86.** TE#2053 measured the extra on
Grace only (its x86 TE row is not readable). In BF16 what ``te.Linear``'s forward runs beyond
``torch.nn.Linear``'s is Python (TE v2.6 = c90a7207, the last release before TE#2053:
``module/linear.py`` 1307-1424, the module's checks, a walk of ``named_parameters()`` for
``torch.cuda.device``, ``prepare_forward`` in ``module/base.py`` 980-1025, a 36-argument
``_Linear.apply``; ``_Linear.forward`` 82-463, its branches and ~40 ``ctx`` attributes); its
C++ is one ``tex.generic_gemm`` in place of torch's ``addmm`` (both allocate the output and run
cuBLASLt), with no aten op of its own (``cast_if_needed`` returns its input when the dtype
matches, ``utils.py`` 418-425). So an x86 host's ``te_module_s`` is GB200's over the Grace/x86
ratio of Python work (1.135, pytorch/pytorch#187862, as ``module_s`` and ``function_s``):
55.1 us, not torch Linear's ratio (2.75, which prices C++ dispatch; 22.8 us until 2026-11-30).
Assumption: the few C++ calls among it (``cudaGetDevice`` / ``cudaSetDevice``, tensor property
reads) are negligible.
"""

from __future__ import annotations

from dataclasses import replace

from sim.compute.decoder_shape import base_kind
from sim.compute.mcore_ops import te_modules
from sim.engine.stage_cost import StageCost


def with_te_modules(cost: StageCost, kinds: list[str]) -> StageCost:
    """``cost`` with each forward layer's Transformer Engine modules set from its kind
    (``kinds``: the stage's layer kinds in order; :func:`sim.compute.mcore_ops.te_modules`).
    Unchanged when the stage has no per-layer forward counts.

    Example:
        >>> c = StageCost(1.0, 2.0, 0.0, 0.0, fwd_layers=((0.5, 60.0, 11.0, 8.0, 0.0),) * 2)
        >>> [x[4] for x in with_te_modules(c, ["embedding", "block"]).fwd_layers]
        [0.0, 4.0]
    """
    if not cost.fwd_layers:
        return cost
    layers = tuple(
        (sec, ops, mods, fns, te_modules(base_kind(kind)))
        for (sec, ops, mods, fns, _), kind in zip(cost.fwd_layers, kinds, strict=False)
    )
    return replace(cost, fwd_layers=layers)


__all__ = ["with_te_modules"]
