"""The fused MoE router's kernels beside its top-k: the random logits and the balancing loss.

With ``moe_router_fusion`` (every Megatron-Bridge MoE recipe but the Nemotron-H family's, whose
eager router :mod:`sim.compute.router_unfused` counts) Megatron-Core's ``TopKRouter`` runs, per
forward after the router GEMM (NVIDIA/Megatron-LM@d98e8a64 ``megatron/core/transformer/moe/
router.py`` ``forward`` lines 845-870, ``routing`` lines 746-838):

1. with ``moe_router_force_load_balancing`` (the performance recipes' forced balance:
   NVIDIA-NeMo/Megatron-Bridge@067f987 ``scripts/performance/utils/overrides.py`` lines
   459-462), ``RandomSTE`` (``moe_utils.py`` lines 1258-1292): ``logits.clone().normal_()``,
   a copy of the ``r x E`` logits (reads and writes ``L r E``) and a fill of normal samples
   (writes ``L r E``); its backward is the identity (no kernel). ``L``: bytes per logit;
2. Transformer Engine's fused top-k (the one ``router_topk`` kernel of :mod:`sim.compute.moe`);
3. with an auxiliary loss (``aux_loss`` or ``seq_aux_loss`` with a coefficient above 0,
   ``router.py`` lines 804-833, 410-505): Transformer Engine's
   ``fused_compute_score_for_moe_aux_loss`` (``moe_utils.py`` lines 989-1001;
   NVIDIA/TransformerEngine@d0067d0 ``transformer_engine/pytorch/csrc/extensions/router.cpp``
   lines 342-389: reads the logits, writes fp32 scores, a bool routing map and an fp32
   intermediate: ``(L + 9) r E``), ``routing_map.sum(dim=0)`` (``moe_utils.py`` line 276:
   reads ``r E`` bools) and ``fused_moe_aux_loss`` (``moe_utils.py`` lines 136-144: reads the
   fp32 scores, ``4 r E``);
4. with an expert bias (``moe_router_enable_expert_bias``, :mod:`sim.parallel.router_bias`),
   ``_apply_expert_bias`` (``router.py`` lines 733-744, called at line 835):
   ``local_tokens_per_expert += routing_map.sum(dim=0)`` under ``@jit_fuser``, which is
   ``torch.compile`` from torch 2.2 (``megatron/core/jit.py`` lines 7-33): one reduction
   kernel with the add fused (assumption), reading the ``r x E`` bool map and the ``E`` fp32
   counts and writing the counts (``r E + 8 E``). It runs only with gradients enabled
   (line 740), so a recomputed router counts once per micro-batch, not twice: Megatron's
   checkpoints run the first forward under ``torch.no_grad()`` and the recompute with grad
   enabled (``megatron/core/tensor_parallel/random.py`` ``CheckpointFunction`` lines 616 and
   658; Transformer Engine's ``checkpoint``, reentrant by default, likewise: NVIDIA/
   TransformerEngine v2.16 ``transformer_engine/pytorch/distributed.py`` lines 372 and 438).
   :data:`GRAD_ONLY` names it for :mod:`sim.compute.recompute_modules`; the unfused router
   runs the same count (:mod:`sim.compute.router_unfused`).

Backward of 3 (TE ``transformer_engine/pytorch/router.py`` lines 385-398 and 477-488):
``fused_moe_aux_loss_bwd`` writes the scores' fp32 gradient (``4 r E``);
``fused_score_for_moe_aux_loss_bwd`` reads it and the fp32 intermediate and writes the logits'
gradient (``(8 + L) r E``); autograd sums that with the top-k's gradient of the same logits
(reads ``2 L r E``, writes ``L r E``).

Left out: the scalar kernels of ``attach_and_log_load_balancing_loss`` and
``MoEAuxLossAutoScaler``, the all-reduce of the ``E`` token counts over the tensor- and
context-parallel group (none at TP = CP = 1), and ``global_aux_loss``'s data-parallel all-reduce
(no Bridge MoE row here uses it). Each kernel is memory-bound: launch overhead plus bytes at
the HBM rate (:func:`sim.compute.kernels.kernel_time_s`). The kernels keep the router's name,
``router_topk[...]`` / ``router_topk_bwd[...]``, so recompute and CUDA-graph scopes class them
with the router (:mod:`sim.compute.recompute_modules`).
"""

from __future__ import annotations

from sim.compute.kernels import Kernel, mem
from sim.hardware.formats import FP32_BYTES

SCORE_FP32_BYTES = FP32_BYTES
"""Transformer Engine's aux-loss scores, intermediate and their gradients are fp32
(``router.cpp`` lines 359 and 364)."""
MAP_BYTES = 1
"""The routing map is a bool (byte) map (``RoutingMapFormat.BYTEMAP``, the default)."""
BIAS_COUNT = "router_topk[bias_count]"
"""The expert bias's token count (module doc, step 4)."""
GRAD_ONLY = (BIAS_COUNT,)
"""Forward kernels that run only with gradients enabled: a checkpointed forward skips them
and its recompute runs them (module doc, step 4)."""


def random_logits_fwd(r: int, experts: int, logit_bytes: int) -> list[Kernel]:
    """``RandomSTE``'s clone and normal fill of the ``r x E`` logits (module doc, step 1).

    Example: 2 tokens, 4 experts, bf16: the clone moves ``2*2*8 = 32`` bytes, the fill 16.

    >>> [k.bytes for k in random_logits_fwd(2, 4, 2)]
    [32.0, 16.0]
    """
    n = float(r * experts)
    return [mem("router_topk[random_clone]", 2 * logit_bytes * n),
            mem("router_topk[random_normal]", logit_bytes * n)]  # fmt: skip


def aux_loss_fwd(r: int, experts: int, logit_bytes: int) -> list[Kernel]:
    """The balancing loss's forward kernels (module doc, step 3)."""
    n = float(r * experts)
    scores = (logit_bytes + 2 * SCORE_FP32_BYTES + MAP_BYTES) * n
    return [mem("router_topk[aux_scores]", scores),
            mem("router_topk[aux_tokens]", MAP_BYTES * n),
            mem("router_topk[aux_loss]", SCORE_FP32_BYTES * n)]  # fmt: skip


def aux_loss_bwd(r: int, experts: int, logit_bytes: int) -> list[Kernel]:
    """The balancing loss's backward kernels and the logits' gradient sum (module doc)."""
    n = float(r * experts)
    return [mem("router_topk_bwd[aux_loss]", SCORE_FP32_BYTES * n),
            mem("router_topk_bwd[aux_scores]", (2 * SCORE_FP32_BYTES + logit_bytes) * n),
            mem("router_topk_bwd[grad_sum]", 3 * logit_bytes * n)]  # fmt: skip


def bias_count_fwd(r: int, experts: int) -> list[Kernel]:
    """The expert bias's token count in the forward (module doc, step 4).

    Example: 2 tokens, 4 experts: the map's 8 bytes, the counts' 16 read and 16 written.

    >>> [k.bytes for k in bias_count_fwd(2, 4)]
    [40.0]
    """
    return [mem(BIAS_COUNT, MAP_BYTES * r * experts + 2 * FP32_BYTES * experts)]


def fused_extra_fwd(
    r: int,
    experts: int,
    logit_bytes: int,
    aux_loss: bool,
    random_logits: bool,
    expert_bias: bool = False,
) -> list[Kernel]:
    """The fused router's forward kernels besides the GEMM and the top-k (module doc).

    Args:
        r: tokens the rank routes; experts: ``E``; logit_bytes: ``L``.
        aux_loss: an ``aux_loss`` / ``seq_aux_loss`` with a coefficient above 0.
        random_logits: ``moe_router_force_load_balancing``.
        expert_bias: ``moe_router_enable_expert_bias`` (its count, step 4).
    """
    out = random_logits_fwd(r, experts, logit_bytes) if random_logits else []
    out += aux_loss_fwd(r, experts, logit_bytes) if aux_loss else []
    return out + (bias_count_fwd(r, experts) if expert_bias else [])


def fused_extra_bwd(r: int, experts: int, logit_bytes: int, aux_loss: bool) -> list[Kernel]:
    """The backward of :func:`fused_extra_fwd` (the random logits' backward runs no kernel)."""
    return aux_loss_bwd(r, experts, logit_bytes) if aux_loss else []
