"""Megatron-Core's unfused MoE router (``moe_router_fusion=False``) as the kernels it runs.

With ``moe_router_fusion`` off (Megatron-Core's default: NVIDIA/Megatron-LM@d98e8a64
``megatron/core/transformer/transformer_config.py`` line 944), Megatron-Core's ``TopKRouter``
scores, selects and balances with eager PyTorch ops (``megatron/core/transformer/moe/
router.py`` ``TopKRouter.forward`` / ``routing``, lines 746-870; ``moe_utils.py``
``topk_routing_with_score_function``, ``compute_routing_scores_for_aux_loss``,
``switch_load_balancing_loss_func``, ``MoEAuxLossAutoScaler``, ``RandomSTE``) instead of
Transformer Engine's fused top-k and aux-loss kernels. Which ops run depends on the router's
configuration (:class:`RouterConfig`): the score function (softmax top-k, Megatron's default,
or sigmoid), the expert bias, a balancing loss (``aux_loss`` / ``seq_aux_loss``), forced
balance (``RandomSTE``) and the router dtype (fp32 or the model's bf16). The Megatron-Bridge MoE
recipes that leave fusion off are the Nemotron-H family's (Nemotron 3 Nano, Super, 3.5
Lightning), whose router is a sigmoid score with an expert bias and the sequence-level
auxiliary loss in fp32 (NVIDIA-NeMo/Megatron-Bridge v0.4.1 ``models/nemotronh/
nemotron_h_provider.py`` lines 48-52) under the performance recipes' forced balance; the
Megatron-LM functional tests' MoE runs mostly a softmax top-k with ``aux_loss``.

Counted, not read: ``scripts/count_router_ops.py`` runs those functions, taken from the
Megatron-LM source at d98e8a64, forward and backward on the CPU under torch 2.13's dispatch
mode, each ATen op that is not a view a kernel moving its inputs and outputs, for each of the
32 configurations, and fits the bytes as ``a r E + b r k`` (``r`` tokens, ``E`` experts,
top-``k``; exact at the fitted shapes, within 0.3 % at two others): :data:`COUNTED`, printed by
``python scripts/count_router_ops.py --megatron moe_utils.py --table`` (``moe_utils.py``:
``git show d98e8a64:megatron/core/transformer/moe/moe_utils.py``). Left out (the script's doc
lists them): the tensor-parallel all-reduce of the token counts (a collective of ``E``
integers), the router GEMM (timed apart, :func:`sim.compute.moe.moe_fwd`), the metrics
tracker's scalar kernels, capacity-factor token dropping, ``sinkhorn`` routing. Three options
are counted as what they add over a configuration (:data:`FLAG_COUNTED`, ``--flags``: the
script checks that the loss and forced balance leave each unchanged and that together they add
what each adds alone): the top-k scaling factor (one ``r x k`` fp32 multiply each way,
``moe_utils.py`` lines 933-934), ``--deterministic-mode`` (``index_put_`` maps in place of the
two ``scatter``, lines 941-951: one forward kernel more, fewer bytes) and group-limited top-k
(``group_limited_topk``, lines 673-727: nine forward kernels, one backward where the scores'
gradient flows through the masked top-k), per counted group pair (:data:`GROUPS`), bytes
``a r E + b r k + c r`` (exact at five shapes). The host's ops
are not these kernels' business: :data:`sim.compute.mcore_ops.MOE_BLOCK` was counted with
Megatron-Core's default router, unfused softmax top-2 with ``aux_loss`` (``scripts/mcore_cpu.py``
``MOE``, lines 55-61). As counted for the Nemotron-H figures, a
configuration with the expert bias holds one kernel that Megatron does not run (the script
creates the ``E`` zero bias inside the count: ``4 E`` bytes). The one-kernel ``router_topk``
of the fused router stays the model elsewhere.

The kernels keep the names ``router_topk`` / ``router_topk_bwd`` (the router's, for
recompute, :mod:`sim.compute.recompute_modules`); their bytes are split evenly, which
:func:`sim.compute.kernels.kernel_time_s` times the same as the counted split (each a
memory-bound kernel: launch overhead plus bytes at the HBM rate), but for one forward kernel
with the expert bias: its token count (``_apply_expert_bias``, ``router.py`` lines 733-744:
the script's ``rmap.sum(dim=0)``, reading the ``r x E`` bool map and writing ``E`` int64
counts, ``r E + 8 E`` bytes) is named :data:`sim.compute.router_fused.BIAS_COUNT`, as the
fused router's, since it runs only with gradients enabled and a recompute runs it once
(:data:`sim.compute.router_fused.GRAD_ONLY`).
"""

from __future__ import annotations

from typing import NamedTuple

from sim.compute.kernels import Kernel, mem
from sim.compute.moe_shape import MoEShape
from sim.compute.router_fused import BIAS_COUNT, MAP_BYTES

COUNT_BYTES = 8
"""``routing_map.sum(dim=0)`` of a bool map writes int64 counts."""

SCORES = ("softmax", "sigmoid")
"""The score functions counted (Megatron-Core also has ``sqrtsoftplus``: not counted)."""


class RouterConfig(NamedTuple):
    """What decides the unfused router's ops (:data:`COUNTED`'s key: the first five; the last
    three are :data:`FLAG_COUNTED`'s options, added over it).

    Attributes:
        score: ``moe_router_score_function``, one of :data:`SCORES`.
        expert_bias: ``moe_router_enable_expert_bias``.
        loss: ``"aux"`` (``aux_loss`` or ``seq_aux_loss`` with a coefficient above 0) or
            ``"none"``.
        random_logits: ``moe_router_force_load_balancing`` (``RandomSTE``).
        fp32: ``moe_router_dtype="fp32"``: fp32 logits; False: the model's (bf16).
        scale: ``moe_router_topk_scaling_factor`` set (the probabilities' multiply).
        groups: group-limited top-k, ``"G/g"`` (``moe_router_num_groups`` ``G``,
            ``moe_router_group_topk`` ``g``), one of :data:`GROUPS`; ``""``: plain top-k.
        deterministic: ``--deterministic-mode`` (the ``index_put_`` maps).
    """

    score: str
    expert_bias: bool
    loss: str
    random_logits: bool
    fp32: bool
    scale: bool = False
    groups: str = ""
    deterministic: bool = False


Counted = tuple[tuple[int, float, float], tuple[int, float, float]]
"""``((kernels, bytes per r*E, bytes per r*k) forward, (the same) backward)``."""

# python scripts/count_router_ops.py --megatron moe_utils.py --table  (Megatron-LM@d98e8a64)
COUNTED: dict[tuple[str, bool, str, bool, bool], Counted] = {
    ('softmax', False, 'none', False, False): ((10, 33.0, 48.0), (6, 8.0, 46.0)),
    ('softmax', False, 'none', False, True): ((8, 49.0, 40.0), (4, 16.0, 40.0)),
    ('softmax', False, 'none', True, False): ((12, 41.0, 48.0), (6, 8.0, 46.0)),
    ('softmax', False, 'none', True, True): ((10, 65.0, 40.0), (4, 16.0, 40.0)),
    ('softmax', False, 'aux', False, False): ((22, 79.1, 68.0), (13, 32.0, 46.0)),
    ('softmax', False, 'aux', False, True): ((19, 95.1, 60.0), (10, 40.0, 40.0)),
    ('softmax', False, 'aux', True, False): ((24, 87.1, 68.0), (13, 32.0, 46.0)),
    ('softmax', False, 'aux', True, True): ((21, 111.1, 60.0), (10, 40.0, 40.0)),
    ('softmax', True, 'none', False, False): ((12, 34.0, 48.0), (6, 8.0, 46.0)),
    ('softmax', True, 'none', False, True): ((10, 50.0, 40.0), (4, 16.0, 40.0)),
    ('softmax', True, 'none', True, False): ((14, 42.0, 48.0), (6, 8.0, 46.0)),
    ('softmax', True, 'none', True, True): ((12, 66.0, 40.0), (4, 16.0, 40.0)),
    ('softmax', True, 'aux', False, False): ((24, 80.1, 68.0), (13, 32.0, 46.0)),
    ('softmax', True, 'aux', False, True): ((21, 96.1, 60.0), (10, 40.0, 40.0)),
    ('softmax', True, 'aux', True, False): ((26, 88.1, 68.0), (13, 32.0, 46.0)),
    ('softmax', True, 'aux', True, True): ((23, 112.1, 60.0), (10, 40.0, 40.0)),
    ('sigmoid', False, 'none', False, False): ((13, 49.0, 48.0), (13, 32.0, 92.0)),
    ('sigmoid', False, 'none', False, True): ((11, 57.0, 44.0), (11, 28.0, 88.0)),
    ('sigmoid', False, 'none', True, False): ((15, 57.0, 48.0), (13, 32.0, 92.0)),
    ('sigmoid', False, 'none', True, True): ((13, 73.0, 44.0), (11, 28.0, 88.0)),
    ('sigmoid', False, 'aux', False, False): ((28, 107.1, 68.0), (27, 116.1, 92.0)),
    ('sigmoid', False, 'aux', False, True): ((25, 115.1, 64.0), (24, 112.1, 88.0)),
    ('sigmoid', False, 'aux', True, False): ((30, 115.1, 68.0), (27, 116.1, 92.0)),
    ('sigmoid', False, 'aux', True, True): ((27, 131.1, 64.0), (24, 112.1, 88.0)),
    ('sigmoid', True, 'none', False, False): ((17, 62.1, 60.0), (13, 32.0, 92.0)),
    ('sigmoid', True, 'none', False, True): ((15, 70.1, 56.0), (11, 28.0, 88.0)),
    ('sigmoid', True, 'none', True, False): ((19, 70.1, 60.0), (13, 32.0, 92.0)),
    ('sigmoid', True, 'none', True, True): ((17, 86.1, 56.0), (11, 28.0, 88.0)),
    ('sigmoid', True, 'aux', False, False): ((32, 120.2, 80.0), (27, 116.1, 92.0)),
    ('sigmoid', True, 'aux', False, True): ((29, 128.2, 76.0), (24, 112.1, 88.0)),
    ('sigmoid', True, 'aux', True, False): ((34, 128.2, 80.0), (27, 116.1, 92.0)),
    ('sigmoid', True, 'aux', True, True): ((31, 144.2, 76.0), (24, 112.1, 88.0)),
}  # fmt: skip
"""The counted kernels and bytes per :class:`RouterConfig` (module doc)."""

Delta = tuple[tuple[int, float, float, float], tuple[int, float, float, float]]
"""``((kernels, bytes per r*E, per r*k, per r) forward, (the same) backward)`` an option adds."""

# python scripts/count_router_ops.py --megatron moe_utils.py --flags --table  (d98e8a64)
FLAG_COUNTED: dict[tuple[str, str, bool, bool], Delta] = {
    ('scale', 'softmax', False, False): ((1, 0.0, 8.0, 0.0), (1, 0.0, 8.0, 0.0)),
    ('scale', 'softmax', False, True): ((1, 0.0, 8.0, 0.0), (1, 0.0, 8.0, 0.0)),
    ('scale', 'softmax', True, False): ((1, 0.0, 8.0, 0.0), (1, 0.0, 8.0, 0.0)),
    ('scale', 'softmax', True, True): ((1, 0.0, 8.0, 0.0), (1, 0.0, 8.0, 0.0)),
    ('scale', 'sigmoid', False, False): ((1, 0.0, 8.0, 0.0), (1, 0.0, 8.0, 0.0)),
    ('scale', 'sigmoid', False, True): ((1, 0.0, 8.0, 0.0), (1, 0.0, 8.0, 0.0)),
    ('scale', 'sigmoid', True, False): ((1, 0.0, 8.0, 0.0), (1, 0.0, 8.0, 0.0)),
    ('scale', 'sigmoid', True, True): ((1, 0.0, 8.0, 0.0), (1, 0.0, 8.0, 0.0)),
    ('deterministic', 'softmax', False, False): ((1, -12.0, 6.0, 24.0), (0, 0.0, 0.0, 8.0)),
    ('deterministic', 'softmax', False, True): ((1, -8.0, 12.0, 24.0), (0, 0.0, 0.0, 8.0)),
    ('deterministic', 'softmax', True, False): ((1, -12.0, 6.0, 24.0), (0, 0.0, 0.0, 8.0)),
    ('deterministic', 'softmax', True, True): ((1, -8.0, 12.0, 24.0), (0, 0.0, 0.0, 8.0)),
    ('deterministic', 'sigmoid', False, False): ((1, -12.0, 6.0, 24.0), (0, 0.0, 0.0, 8.0)),
    ('deterministic', 'sigmoid', False, True): ((1, -8.0, 12.0, 24.0), (0, 0.0, 0.0, 8.0)),
    ('deterministic', 'sigmoid', True, False): ((1, -12.0, 6.0, 24.0), (0, 0.0, 0.0, 8.0)),
    ('deterministic', 'sigmoid', True, True): ((1, -8.0, 12.0, 24.0), (0, 0.0, 0.0, 8.0)),
    ('groups8/4', 'softmax', False, False): ((9, 16.0, 24.0, 168.0), (1, 5.0, 0.0, 0.0)),
    ('groups8/4', 'softmax', False, True): ((9, 28.0, 32.0, 272.0), (1, 9.0, 0.0, 0.0)),
    ('groups8/4', 'softmax', True, False): ((9, 16.0, 24.0, 168.0), (1, 5.0, 0.0, 0.0)),
    ('groups8/4', 'softmax', True, True): ((9, 28.0, 32.0, 272.0), (1, 9.0, 0.0, 0.0)),
    ('groups8/4', 'sigmoid', False, False): ((9, 28.0, 32.0, 272.0), (1, 9.0, 0.0, 0.0)),
    ('groups8/4', 'sigmoid', False, True): ((9, 28.0, 32.0, 272.0), (1, 9.0, 0.0, 0.0)),
    ('groups8/4', 'sigmoid', True, False): ((9, 28.0, 32.0, 272.0), (0, 0.0, 0.0, 0.0)),
    ('groups8/4', 'sigmoid', True, True): ((9, 28.0, 32.0, 272.0), (0, 0.0, 0.0, 0.0)),
    ('groups4/2', 'softmax', False, False): ((9, 16.0, 24.0, 84.0), (1, 5.0, 0.0, 0.0)),
    ('groups4/2', 'softmax', False, True): ((9, 28.0, 32.0, 136.0), (1, 9.0, 0.0, 0.0)),
    ('groups4/2', 'softmax', True, False): ((9, 16.0, 24.0, 84.0), (1, 5.0, 0.0, 0.0)),
    ('groups4/2', 'softmax', True, True): ((9, 28.0, 32.0, 136.0), (1, 9.0, 0.0, 0.0)),
    ('groups4/2', 'sigmoid', False, False): ((9, 28.0, 32.0, 136.0), (1, 9.0, 0.0, 0.0)),
    ('groups4/2', 'sigmoid', False, True): ((9, 28.0, 32.0, 136.0), (1, 9.0, 0.0, 0.0)),
    ('groups4/2', 'sigmoid', True, False): ((9, 28.0, 32.0, 136.0), (0, 0.0, 0.0, 0.0)),
    ('groups4/2', 'sigmoid', True, True): ((9, 28.0, 32.0, 136.0), (0, 0.0, 0.0, 0.0)),
}  # fmt: skip
"""What each option adds, per ``(option, score, expert bias, fp32)`` (module doc)."""

GROUPS = ("8/4", "4/2")
"""The ``(num_groups, group_topk)`` pairs counted (``scripts/count_router_ops.py`` ``GROUPS``:
DeepSeek-V3's 8 groups, top-4, and the Megatron-FSDP DeepSeek proxy test's 4, top-2)."""

NEMOTRON_H = RouterConfig("sigmoid", True, "aux", True, True)
"""The Nemotron-H family's router (module doc)."""


def router_config(shape: MoEShape) -> RouterConfig:
    """The unfused router's configuration of a MoE layer's ``shape``."""
    loss = "aux" if shape.aux_loss else "none"
    return RouterConfig(shape.router_score, shape.router_expert_bias, loss,
                        shape.random_logits, shape.router_fp32, shape.router_scaled,
                        shape.router_groups, shape.router_deterministic)  # fmt: skip


def counted(cfg: RouterConfig) -> Counted:
    """The counts of ``cfg``'s first five fields (without the options of :data:`FLAG_COUNTED`).

    Raises:
        ValueError: a score function not in :data:`SCORES` or a loss not ``aux``/``none``.
    """
    try:
        return COUNTED[tuple(cfg)[:5]]  # type: ignore[index]
    except KeyError:
        raise ValueError(f"the unfused router was not counted for {cfg}") from None


def option_deltas(cfg: RouterConfig) -> list[Delta]:
    """What ``cfg``'s options add (:data:`FLAG_COUNTED`; they add: module doc).

    Raises:
        ValueError: a group pair not in :data:`GROUPS`.
    """
    if cfg.groups and cfg.groups not in GROUPS:
        raise ValueError(f"group-limited top-k {cfg.groups} was not counted ({GROUPS})")
    names = [name for name, on in (("scale", cfg.scale), ("deterministic", cfg.deterministic),
                                   (f"groups{cfg.groups}", bool(cfg.groups))) if on]  # fmt: skip
    return [FLAG_COUNTED[(name, cfg.score, cfg.expert_bias, cfg.fp32)] for name in names]


def _phase(r: int, experts: int, top_k: int, cfg: RouterConfig, phase: int) -> tuple[int, float]:
    """Kernels and bytes of one phase (0 forward, 1 backward), the options' added."""
    n, per_re, per_rk = counted(cfg)[phase]
    total = per_re * r * experts + per_rk * r * top_k
    for delta in option_deltas(cfg):
        dn, a, b, c = delta[phase]
        n, total = n + dn, total + a * r * experts + b * r * top_k + c * r
    return n, total


def router_fwd(r: int, experts: int, top_k: int, cfg: RouterConfig = NEMOTRON_H) -> list[Kernel]:
    """The forward's kernels after the router GEMM, the expert bias's count last (module doc).

    Example: Nemotron-H's, 2 tokens, 4 experts, top-1: 31 kernels, ``144.2*8 + 76*2 = 1305.6``
    bytes, the count's ``8 + 32 = 40`` of them.

    >>> ks = router_fwd(2, 4, 1)
    >>> len(ks), round(sum(k.bytes for k in ks), 1), ks[-1].name, ks[-1].bytes
    (31, 1305.6, 'router_topk[bias_count]', 40.0)
    """
    n, total = _phase(r, experts, top_k, cfg, 0)
    if not cfg.expert_bias:
        return [mem("router_topk", total / n) for _ in range(n)]
    count = float(MAP_BYTES * r * experts + COUNT_BYTES * experts)
    rest = total - count
    return [mem("router_topk", rest / (n - 1)) for _ in range(n - 1)] + [mem(BIAS_COUNT, count)]


def router_bwd(r: int, experts: int, top_k: int, cfg: RouterConfig = NEMOTRON_H) -> list[Kernel]:
    """The backward's kernels before the router GEMM's gradients (module doc)."""
    n, total = _phase(r, experts, top_k, cfg, 1)
    return [mem("router_topk_bwd", total / n) for _ in range(n)]
