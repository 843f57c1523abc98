"""Megatron-Core's unfused MoE router (``moe_router_fusion=False``) as the kernels it runs.

With ``moe_router_fusion`` off, Megatron-Core's ``TopKRouter`` scores, selects and balances
with eager PyTorch ops (NVIDIA/Megatron-LM@d98e8a64 ``megatron/core/transformer/moe/
router.py`` ``TopKRouter.forward`` / ``routing``; ``moe_utils.py``
``topk_routing_with_score_function``, ``compute_routing_scores_for_aux_loss``,
``switch_load_balancing_loss_func``, ``MoEAuxLossAutoScaler``, ``RandomSTE``) instead of
Transformer Engine's fused top-k and aux-loss kernels. The Megatron-Bridge MoE recipes that
leave it off are the Nemotron-H family's (Nemotron 3 Nano, Super, 3.5 Lightning; the recipe
table's ``moe_router_fusion`` column), whose router is a sigmoid score with an expert bias and
the sequence-level auxiliary loss (NVIDIA-NeMo/Megatron-Bridge v0.4.1
``models/nemotronh/nemotron_h_provider.py`` lines 48-52) under the performance recipes'
``moe_router_force_load_balancing`` (random logits, ``RandomSTE``).

Counted, not read: ``scripts/count_router_ops.py`` runs those functions, taken from the
Megatron-LM source at d98e8a64, forward and backward on the CPU under torch 2.13's dispatch
mode, each ATen op that is not a view a kernel moving its inputs and outputs, and fits the
bytes over four shapes as ``a r E + b r k`` (``r`` tokens, ``E`` experts, top-``k``; exact at
the fitted shapes, within 0.2 % at the others): :data:`FWD`, :data:`BWD`. Left out: the
tensor-parallel all-reduce of the token counts (a collective of ``E`` integers), and the
router GEMM (timed apart, :func:`sim.compute.moe.moe_fwd`). The one-kernel ``router_topk``
of the fused router stays the model elsewhere.

The kernels keep the names ``router_topk`` / ``router_topk_bwd`` (the router's, for
recompute, :mod:`sim.compute.recompute_modules`); their bytes are split evenly, which
:func:`sim.compute.kernels.kernel_time_s` times the same as the counted split (each a
memory-bound kernel: launch overhead plus bytes at the HBM rate), but for one forward kernel:
the expert bias's token count (``_apply_expert_bias``, ``router.py`` lines 733-744: the
script's ``rmap.sum(dim=0)``, reading the ``r x E`` bool map and writing ``E`` int64 counts,
``r E + 8 E`` bytes) is named :data:`sim.compute.router_fused.BIAS_COUNT`, as the fused
router's, since it runs only with gradients enabled and a recompute runs it once
(:data:`sim.compute.router_fused.GRAD_ONLY`).
"""

from __future__ import annotations

from sim.compute.kernels import Kernel, mem
from sim.compute.router_fused import BIAS_COUNT, MAP_BYTES

COUNT_BYTES = 8
"""``routing_map.sum(dim=0)`` of a bool map writes int64 counts."""

FWD = (31, 144.2, 76.0)
"""``(kernels, bytes per r*E, bytes per r*k)`` of the forward (module doc)."""
BWD = (24, 112.1, 88.0)
"""The same for the backward (module doc)."""


def _kernels(name: str, counted: tuple[int, float, float], r: int, e: int, k: int) -> list[Kernel]:
    n, per_re, per_rk = counted
    total = per_re * r * e + per_rk * r * k
    return [mem(name, total / n) for _ in range(n)]


def router_fwd(r: int, experts: int, top_k: int) -> list[Kernel]:
    """The forward's kernels after the router GEMM, the expert bias's count last (module doc).

    Example: 2 tokens, 4 experts, top-1: 31 kernels, ``144.2*8 + 76*2 = 1305.6`` bytes, the
    count's ``8 + 32 = 40`` of them.

    >>> ks = router_fwd(2, 4, 1)
    >>> len(ks), round(sum(k.bytes for k in ks), 1), ks[-1].name, ks[-1].bytes
    (31, 1305.6, 'router_topk[bias_count]', 40.0)
    """
    count = float(MAP_BYTES * r * experts + COUNT_BYTES * experts)
    n, per_re, per_rk = FWD
    rest = per_re * r * experts + per_rk * r * top_k - count
    return [mem("router_topk", rest / (n - 1)) for _ in range(n - 1)] + [mem(BIAS_COUNT, count)]


def router_bwd(r: int, experts: int, top_k: int) -> list[Kernel]:
    """The backward's kernels before the router GEMM's gradients (module doc)."""
    return _kernels("router_topk_bwd", BWD, r, experts, top_k)
