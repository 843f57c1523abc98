"""The model-shape features a Megatron-LM run's flags add beyond its sizes (read by
:func:`sim.runs.megatron_args.read_megatron`): its dropout masks, the MoE experts' unfused
probability weighting, the alltoall or HybridEP dispatcher's own permutations, the eager router,
the fused loss. Each flag read is noted on the :class:`~sim.runs.megatron_reading.Reading`."""

from __future__ import annotations

from sim.parallel.layout import ParallelLayout
from sim.runs.argv import switch_on
from sim.runs.megatron_reading import Reading


def run_features(r: Reading, lay: ParallelLayout, framework: str) -> list[str]:
    """The shape features the run's flags add (in this order): dropout, unfused MoE weighting,
    the alltoall or HybridEP dispatcher's permutations, the eager router, the loss fusion."""
    out = ["dropout=true"] if dropout(r, framework) else []
    if not fused_weighting(r, framework):
        out.append("moe_weighting=unfused")
    if r.flags.get("num-experts") and r.flags.get("moe-token-dispatcher-type") == "alltoall":
        out.append("moe_dispatcher=alltoall")  # its second permutation (sim.compute.moe_sort)
    if hybridep(r, lay):  # HybridEP's own permutation kernels (sim.compute.hybridep)
        out.append("moe_dispatcher=hybridep")
    if r.flags.get("num-experts") and unfused_router(r, framework):
        out.append("moe_router=unfused")  # its counted eager ops (sim.compute.router_unfused)
    if switch_on(r.flags.get("cross-entropy-loss-fusion")):
        out.append(f"cross_entropy={loss_fusion(r)}")
    return out


def unfused_router(r: Reading, framework: str) -> bool:
    """Whether a MoE run's router runs eager ops (:mod:`sim.compute.router_unfused`):
    ``moe_router_fusion`` stated off (a Megatron-Bridge recipe: the Nemotron-H family's), or a
    Megatron-LM run without ``--moe-router-fusion`` (Megatron-Core's default is off:
    NVIDIA/Megatron-LM@d98e8a64 ``megatron/core/transformer/transformer_config.py`` line 944)
    whose routing is top-k. ``sinkhorn`` routing (a data-dependent loop, not counted) and a
    Megatron-Bridge run that does not state it keep the one-kernel model (an approximation)."""
    if r.switch("no-moe-router-fusion"):
        return True
    if framework != "megatron-lm" or r.switch("moe-router-fusion"):
        return False
    return r.text("moe-router-load-balancing-type", "aux_loss") != "sinkhorn"


def hybridep(r: Reading, lay: ParallelLayout) -> bool:
    """Whether the experts are dispatched by the flex dispatcher's HybridEP backend with its
    standalone permute kernels (:mod:`sim.compute.hybridep`): ``flex`` with
    ``--moe-flex-dispatcher-backend hybridep`` over more than one expert rank (as
    :mod:`sim.runs.megatron_overlap` reads it), without ``moe_permute_fusion_into_hybridep``
    (Megatron-Core's default)."""
    fused = r.switch("moe-permute-fusion-into-hybridep")
    r.mapped("moe-permute-fusion-into-hybridep", "HybridEP's permutation inside its dispatch "
             "kernel: approximated by the all-to-all dispatcher's permute kernels "
             "(MoEShape.hybridep off)")  # fmt: skip
    flags = r.flags
    return bool(
        flags.get("num-experts") and lay.ep > 1 and not fused
        and flags.get("moe-token-dispatcher-type") == "flex"
        and flags.get("moe-flex-dispatcher-backend") == "hybridep"
    )  # fmt: skip


def loss_fusion(r: Reading) -> str:
    """``te`` or ``native``: the fused loss of ``--cross-entropy-loss-fusion`` (Megatron's
    default impl is ``native``), its passes over the logits timed by
    :mod:`sim.compute.loss_fusion` and its memory by :mod:`sim.memory.layer_work`, both from the
    model shape's ``cross_entropy_fusion`` (the ``cross_entropy`` feature)."""
    impl = "te" if str(r.flags.get("cross-entropy-fusion-impl", "native")) == "te" else "native"
    why = f"fused cross entropy ({impl}): its passes over the logits (sim.compute.loss_fusion)"
    r.mapped("cross-entropy-loss-fusion", why)
    r.mapped("cross-entropy-fusion-impl", why)
    return impl


def dropout(r: Reading, framework: str) -> bool:
    """Attention or hidden dropout with p > 0: the decoder keeps its masks
    (:attr:`sim.compute.decoder_shape.DecoderShape.dropout`). Megatron-LM's defaults are 0.1
    for both (``megatron/training/arguments.py`` ``--attention-dropout``, ``--hidden-dropout``,
    NVIDIA/Megatron-LM@d98e8a64dd); a Megatron-Bridge run without them is taken to train
    without dropout, as its providers of the Llama-like decoders do (an assumption)."""
    default = 0.1 if framework == "megatron-lm" else 0.0
    on = False
    for flag in ("attention-dropout", "hidden-dropout"):
        try:
            p = float(r.flags.get(flag, default))
        except (TypeError, ValueError):
            p = default
        on = on or p > 0
        r.mapped(flag, "dropout masks kept (DecoderShape.dropout)" if p > 0 else "no dropout")
    return on


def fused_weighting(r: Reading, framework: str) -> bool:
    """Whether a MoE run's experts multiply the routing probabilities in inside a fused
    activation (:attr:`sim.compute.moe_shape.MoEShape.fused_weighting`). Megatron-LM fuses a gated
    SiLU unless ``--no-bias-swiglu-fusion`` (``bias_activation_fusion`` is
    ``--bias-swiglu-fusion`` with ``--swiglu``, else ``--bias-gelu-fusion``:
    ``megatron/training/arguments.py``) and squared ReLU with
    ``--use-fused-weighted-squared-relu``; a GeLU expert has no fused form (``experts.py``
    raises for it, so its runs pass ``--no-bias-gelu-fusion``). Megatron-Bridge's performance
    recipes set the fusions (``bias_activation_fusion = True``: e.g. NVIDIA-NeMo/
    Megatron-Bridge@067f987df0 ``perf_recipes/qwen/b200/qwen3_moe.py:39``, the DeepSeek,
    Kimi and GPT-OSS bridges; ``use_fused_weighted_squared_relu = True``:
    ``perf_recipes/nemotronh/common.py:120``): fused."""
    if not r.flags.get("num-experts") or framework != "megatron-lm":
        return True
    if r.switch("swiglu"):
        r.mapped("no-bias-swiglu-fusion", "the experts' SiLU and probabilities unfused "
                 "(MoEShape.fused_weighting)")  # fmt: skip
        return not r.switch("no-bias-swiglu-fusion")
    if r.switch("squared-relu"):
        r.mapped("use-fused-weighted-squared-relu", "MoEShape.fused_weighting")
        return r.switch("use-fused-weighted-squared-relu")
    r.mapped("no-bias-gelu-fusion", "a GeLU expert: activation and probabilities unfused "
             "(MoEShape.fused_weighting)")  # fmt: skip
    return False
