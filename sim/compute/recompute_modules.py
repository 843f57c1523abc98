"""What each recompute choice of a decoder layer drops and re-runs, module by module.

**Megatron-Core's module-level selective recompute** (``--recompute-granularity selective
--recompute-modules ...``; ``megatron/core/transformer/transformer_config.py``
``recompute_modules``, default ``["core_attn"]``; ``transformer_layer.py``,
``multi_latent_attention.py``, ``moe/experts.py``): a module's forward runs without keeping its
internal activations, its inputs are kept, and it runs again before its backward. On one rank
(``t`` tokens of its GEMMs, ``r`` of its sequence-parallel element-wise kernels, ``d`` bytes per
element, as :mod:`sim.compute.decoder`):

=============== =================================================== ======================
module          dropped bytes                                       re-run kernels
=============== =================================================== ======================
``core_attn``   flash attention's log-sum-exp ``4 t a/tp`` (its     the attention core
                Q, K, V are kept as the checkpoint's inputs, its
                output by the projection)
``layernorm``   the outputs of the norms that are modules of their  ``norm1`` (MLA),
                own, ``r h d`` each: MLA's input norm and a MoE     ``norm2`` (MoE)
                layer's pre-MLP norm (none where the norm is fused
                into the first linear, below)
``mlp``         the dense MLP's ``t (up + f)/tp d``                 gate/up, act, down
``moe_act``     the experts' activation outputs ``n f_e/etp d``     ``expert_act``,
                (``n`` rows of the rank's experts; a clamped GLU:   ``expert_gate_mul``,
                its copy too, :mod:`sim.compute.glu_clamp`)         the clamp
``moe``         the MoE layer's stash but its input                 the MoE layer
                (``moe_act_bytes - 2 r h d``)
``mla_up_proj`` MLA's up-projected Q, K, V ``t a/tp (2 d_qk + d_v)  ``q_up``, ``kv_up``,
                d``                                                 ``rotary``
=============== =================================================== ======================

``fused_group_mlp`` is not a recompute module but Megatron-Core's fine-grained activation
offloading of the whole fused grouped MLP (``--fine-grained-activation-offloading
--offload-modules fused_group_mlp``, ``megatron/core/transformer/moe/experts.py`` 785-822,
``megatron/core/pipeline_parallel/fine_grained_activation_offload.py``, NVIDIA/Megatron-LM@
d98e8a64dd): every tensor the fused experts' ops save (the rows' fc1 input ``n w d``, the
activation's input ``n up_e/etp d`` and, unless ``moe_act`` recomputes it inside the fused op
(``activation_recompute_in_mlp``, ``experts.py`` 547-611), its output ``n f_e/etp d``) goes to
the host after the forward and comes back before the backward: dropped bytes and no re-run
kernels (the copies are not timed; the probabilities, below the manager's 1M-element
``min_offloaded_tensor_size`` on most ranks, are left out).

**torchtitan's per-op SAC** (``torchtitan/distributed/activation_checkpoint.py``, selective
``op``, the default of ``llama3_8b.toml``): the block runs under a policy that saves the outputs
of matmuls (``aten.mm``/``linear``), of attention (SDPA), ``topk``, ``max`` and collectives
(``reduce_scatter``, ``all_to_all``), except every second matmul in forward order
(``mm_count % 2 == 0``; the router gate always recomputed and not counted); everything else
(norms, RoPE, activations, element-wise ops, grouped expert GEMMs) is recomputed. Saved: the
block's input, the odd matmuls' outputs, the attention output and its log-sum-exp, the
dispatched and combined token rows; dropped: the rest of its stash. Re-run: every kernel but the
saved ones.

``layernorm`` recomputes only a norm that is not an ``IdentityOp``
(NVIDIA/Megatron-LM@d98e8a64 ``megatron/core/transformer/transformer_layer.py`` lines 475-477
and 521-527), and Megatron-Core's Transformer Engine specs fuse most norms into the first linear
(a ``TELayerNormColumnParallelLinear``, whose ``input_layernorm`` or ``pre_mlp_layernorm`` is
then an ``IdentityOp``): a GPT layer's attention norm unless the attention is MLA, and its
pre-MLP norm unless the MLP is a MoE layer, whose router needs the norm's output
(``megatron/core/models/gpt/gpt_layer_specs.py`` lines 245-345: MLA's ``input_layernorm`` and
a MoE layer's ``pre_mlp_layernorm`` are ``backend.layer_norm()``, a ``TENorm``; the default
``linear_qkv`` is ``column_parallel_layer_norm_linear()``; a dense MLP's ``linear_fc1`` likewise,
lines 541-550); in the hybrid stack the Mamba, attention and MLP layers fuse theirs and only
the MoE layer has a ``TENorm`` (``megatron/core/models/hybrid/hybrid_layer_specs.py`` lines
106-232, ``megatron/core/ssm/mamba_layer.py`` line 51): :func:`separate_norms`. Under FP8 or
FP4 the recomputed norm's consumers save its 16-bit output instead of a quantized copy
(``set_save_original_input``: MLA's down projections, ``multi_latent_attention.py`` lines
1114-1118; a MoE layer's router keeps the 16-bit tensor anyway, its shared expert's fc1 is set
likewise, ``moe/moe_layer.py`` lines 743-750), so the recompute drops that output, ``r h d``,
as in 16 bits; a fused norm's quantized copy, which its ``LayerNormLinear`` saves, stays
(the delayed-scaling shared expert's quantized copy, which the recompute also drops, is not
modelled). Megatron-Core's ``--transformer-impl local`` spec, whose norms are all separate
(``gpt_layer_specs.py`` lines 359-470) and which runs no FP8, is not modelled here.

Collectives are not re-run here (a recomputed MoE layer's all-to-alls, Megatron's ``moe``,
are left out: an assumption).

**Kernels that run only with gradients enabled** (:data:`sim.compute.router_fused.GRAD_ONLY`:
the router's expert-bias count, ``router.py`` line 740 ``torch.is_grad_enabled()``): Megatron's
checkpoints run a module's first forward under ``torch.no_grad()`` and its recompute with grad
enabled (``megatron/core/tensor_parallel/random.py`` lines 616 and 658), so a recomputed
router counts once per micro-batch. The layer's forward keeps the count and ``moe``'s re-run
kernels leave it out; full recompute (the layer's whole forward again, :mod:`sim.memory.stash`)
subtracts the :data:`NOGRAD` part's seconds. Per-op SAC (torchtitan, which has no such
count) re-runs it as listed.
"""

from __future__ import annotations

from dataclasses import replace

from sim.compute.decoder import ATTN, layer_act_bytes, layer_kernels, mtp_inner, tokens
from sim.compute.decoder_shape import DecoderShape, base_kind
from sim.compute.glu_clamp import kept_bytes
from sim.compute.kernels import Kernel
from sim.compute.router_fused import GRAD_ONLY

MODULES = ("core_attn", "layernorm", "mlp", "moe_act", "moe", "mla_up_proj", "fused_group_mlp")
"""Megatron-Core's ``recompute_modules`` pipesim models, and the offloaded fused grouped MLP
(``fused_group_mlp``, module doc)."""
SAC = "sac"
NOGRAD = "nograd"
"""The part of a layer whose kernels run only with gradients enabled (module doc): dropped
bytes 0, the forward kernels a checkpointed forward skips; not a recompute choice."""
FUSED_NORM_KINDS = ("mamba", "attention", "mlp")
"""Hybrid layer kinds whose norm is fused into their first linear (module doc)."""
MOE_KINDS = ("moe_block", "moe")
"""torchtitan's per-op selective activation checkpointing."""
CORE = ("flash_attn_fwd", "scores", "softmax", "attn_dropout", "attn_v")
_MLP = ("gate", "up", "act", "gate_mul", "down")
_MOE_SKIP = ("norm2", "mlp_residual")
_LINEARS: tuple[str, ...] = ("qkv", "q", "k", "v", "proj", "gate", "up", "down", "q_down")
_LINEARS += ("q_up", "kv_down", "kv_up", "shared_up", "shared_down", "eh_proj")
_FORCED = ("router",)

Part = tuple[str, float, tuple[Kernel, ...]]
"""``(choice, dropped bytes, re-run kernels)``."""


def module_parts(
    kind: str,
    m: DecoderShape,
    b: int,
    d: int,
    tp: int = 1,
    sp: bool = False,
    cp: int = 1,
    rows: tuple[float, ...] = (),
    etp: int | None = None,
) -> tuple[Part, ...]:
    """Every recompute choice of :data:`MODULES` that applies to a layer of ``kind``, and
    :data:`SAC`, on one rank (module doc), and the :data:`NOGRAD` kernels when it has any;
    embedding and head have none.

    Args:
        kind, m, b, d, tp, sp, cp, rows: as :func:`~sim.compute.decoder.layer_kernels`.
        etp: expert tensor-parallel size (None: ``tp``).
    """
    if kind in ("embedding", "head"):
        return ()
    base = base_kind(kind)
    etp = tp if etp is None else etp
    fwd = layer_kernels(kind, m, b, d, tp, sp, cp, rows, etp)[0]
    t, r = tokens(m, b, tp, sp, cp)
    h, at = m.hidden, m.heads // tp
    out: list[Part] = []
    if base in ATTN:
        out.append(("core_attn", 4.0 * t * at, _named(fwd, CORE)))
        if m.mla is not None:
            qkv = t * at * (2 * m.mla.d_qk + m.mla.d_v) * d
            out.append(("mla_up_proj", float(qkv), _named(fwd, ("q_up", "kv_up", "rotary"))))
    norms = _named(fwd, separate_norms(kind, m))
    if norms:
        out.append(("layernorm", float(len(norms) * r * h * d), norms))
    if base in ("block", "mlp"):
        up = (2 if m.gated_mlp else 1) * m.ffn_hidden
        out.append(("mlp", float(t * (up + m.ffn_hidden) // tp * d), _named(fwd, _MLP)))
    moe = m.moe is not None and base in MOE_KINDS
    if moe:
        assert m.moe is not None
        acts = tuple(k for k in fwd if k.name.startswith(("expert_act", "expert_gate_mul")))
        dropped = sum(rows) * m.moe.expert_ffn / etp * d
        if m.moe.clamp and not m.moe.fused_grouped_mlp:  # and the clamped copy (glu_clamp)
            dropped += kept_bytes(sum(rows), m.moe.expert_ffn / etp, d)
        out.append(("moe_act", float(dropped), acts))
        up_e = (2 if m.moe.gated else 1) * m.moe.expert_ffn / etp
        fused = sum(rows) * d * (m.moe.row_width + up_e + m.moe.expert_ffn / etp)
        out.append(("fused_group_mlp", float(fused), ()))
        layer = layer_act_bytes("moe", m, b, d, tp, sp, cp, rows, etp=etp)
        kept = 2 * r * h * d
        body = tuple(k for k in fwd if _in_moe(k) and k.name not in _MOE_SKIP + GRAD_ONLY)
        out.append(("moe", float(max(0.0, layer - kept)), body))
    out.append(_sac(kind, m, b, d, tp, sp, cp, rows, fwd, etp))
    nograd = _named(fwd, GRAD_ONLY)
    if nograd:
        out.append((NOGRAD, 0.0, nograd))
    return tuple(out)


def separate_norms(kind: str, m: DecoderShape) -> tuple[str, ...]:
    """The norm kernels of a layer of ``kind`` that Megatron-Core's Transformer Engine spec
    builds as modules of their own (``TENorm``), which ``layernorm`` recomputes: ``norm1``
    for MLA attention, ``norm2`` for a MoE layer (an MTP depth: its block's; module doc).

    Example:
        >>> from sim.compute.decoder_shape import DecoderShape
        >>> m = DecoderShape(layers=2, hidden=64, heads=4, seq_len=8, vocab=128, ffn_hidden=256)
        >>> separate_norms("block", m)
        ()
    """
    base = base_kind(kind)
    if base in FUSED_NORM_KINDS:
        return ()
    if base == "mtp":
        base = mtp_inner(m)
    mla = m.mla is not None and base in ATTN
    moe = m.moe is not None and base in MOE_KINDS
    return (("norm1",) if mla else ()) + (("norm2",) if moe else ())


def _named(kernels: list[Kernel], names: tuple[str, ...]) -> tuple[Kernel, ...]:
    return tuple(k for k in kernels if k.name in names)


def _in_moe(k: Kernel) -> bool:
    """Whether ``k`` belongs to the MoE MLP (:func:`sim.compute.moe.moe_fwd`)."""
    head = k.name.split("[")[0]
    return head in (
        "router",
        "router_topk",
        "token_count_sync",
        "flex_replicate",
        "hybridep_preprocess",
        "hybridep_rdma_stage",
        "permute",
        "hybridep_permute",
        "sort_by_expert",
        "expert_up",
        "expert_act",
        "expert_act_clamp_glu",
        "expert_act_clamp_linear",
        "expert_act_clamp_cat",
        "expert_act_offset_h2d",
        "expert_gate_mul",
        "expert_down",
        "unsort_by_expert",
        "unpermute",
        "hybridep_unpermute",
        "shared_up",
        "shared_act",
        "shared_gate_mul",
        "shared_down",
    )


def _separate_qkv(fwd: list[Kernel], m: DecoderShape, kind: str) -> list[Kernel]:
    """``fwd`` with a fused QKV GEMM counted as torchtitan's three linears ``wq, wk, wv``
    (``torchtitan/models/llama3/model/model.py::Attention``), each its share of the output
    width, flops and bytes."""
    blk = m.block_for(kind)
    widths = (blk.heads * blk.hd, blk.kv * blk.hd, blk.kv * blk.hd)
    out = []
    for k in fwd:
        if k.name != "qkv":
            out.append(k)
            continue
        for name, w in zip(("q", "k", "v"), widths, strict=True):
            f = w / sum(widths)
            n = max(1, round(k.n * f))
            out.append(replace(k, name=name, n=n, flops=k.flops * f, bytes=k.bytes * f))
    return out


def _sac(kind, m, b, d, tp, sp, cp, rows, fwd: list[Kernel], etp=None) -> Part:
    """torchtitan's per-op SAC of one layer (module doc)."""
    _, r = tokens(m, b, tp, sp, cp)
    h = m.hidden
    saved = float(r * h * d)  # the block's input (the checkpoint's)
    count, redo = 0, []
    for k in _separate_qkv(fwd, m, kind):
        if k.kind == "gemm" and k.batch == 1 and k.name in _LINEARS:
            count += 1
            if count % 2:
                saved += k.m * k.n * d
                continue
        elif k.kind == "attn":  # fused SDPA: its output [queries, head dim] and log-sum-exp
            saved += k.m * k.k * k.batch * d + 4 * k.m * k.batch
            continue
        elif k.kind == "gemm" and k.batch > 1 and not k.grouped:  # bmm (math attention)
            saved += k.m * k.n * d * k.batch
            continue
        redo.append(k)
    if m.moe is not None and base_kind(kind) in ("moe_block", "moe"):
        saved += 2 * sum(rows) * h * d  # the all-to-alls' outputs: dispatched, combined rows
    act = layer_act_bytes(kind, m, b, d, tp, sp, cp, rows, etp=etp)
    return (SAC, float(max(0.0, act - saved)), tuple(redo))
