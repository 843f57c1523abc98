"""Megatron-LM's overlap, CUDA-graph and dispatcher flags as options of the ``megatron-lm``
profile (:mod:`sim.framework.megatron_options`, issue 26 item 2).

Each flag of :data:`FLAG_OPTIONS` becomes ``option=value`` on the run's framework spec
(``megatron-lm[overlap_grad_reduce,tp_comm_overlap]``) when it matters for the run's layout (an
overlap of data-parallel gradients with ``dp x cp = 1`` overlaps nothing: noted ``ignored``).
Values are read as Megatron reads them: ``--cuda-graph-scope attn,moe_router`` joins its
modules with ``+`` (the spec's separator is the comma), Megatron-Bridge's legacy
``enable_cuda_graph=True`` is the local per-layer graph, ``--moe-token-dispatcher-type flex``
takes its backend from ``--moe-flex-dispatcher-backend`` (DeepEP by default).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sim.parallel.layout import ParallelLayout
from sim.runs.record import Status

Matters = Callable[[ParallelLayout, bool], bool]


def _dp(lay: ParallelLayout, dist: bool) -> bool:
    return lay.dp * lay.cp > 1


def _gather(lay: ParallelLayout, dist: bool) -> bool:
    return dist and lay.dp * lay.cp > 1


def _tp(lay: ParallelLayout, dist: bool) -> bool:
    return lay.tp > 1


def _ep(lay: ParallelLayout, dist: bool) -> bool:
    return lay.ep > 1


def _always(lay: ParallelLayout, dist: bool) -> bool:
    return True


def _interleaved(lay: ParallelLayout, dist: bool) -> bool:
    return lay.pp > 1 and lay.vp > 1


def _fsdp(lay: ParallelLayout, dist: bool) -> bool:
    return lay.dp_shard > 1


FLAG_OPTIONS: dict[str, tuple[str, Matters, str]] = {
    "overlap-grad-reduce": ("overlap_grad_reduce", _dp, "gradients reduced in Megatron-Core's "
                            "buckets during the last backward"),
    "ddp-bucket-size": ("ddp_bucket_size", _dp, "parameters per gradient bucket"),
    "overlap-param-gather": ("overlap_param_gather", _gather, "the distributed optimizer's "
                             "all-gather under the next forward"),
    "no-align-param-gather": ("align_param_gather", _gather, "all-gathers not aligned by chunk"),
    "no-overlap-p2p-communication": ("overlap_p2p_comm", _interleaved, "interleaved: every "
                                     "action waits for the rank's pipeline sends"),
    "overlap-param-gather-with-optimizer-step": ("overlap_param_gather_with_optimizer_step",
                                                 _gather, "all-gathers launched in the step"),
    "tp-comm-overlap": ("tp_comm_overlap", _tp, "TP collectives beside their GEMMs (TE "
                        "userbuffers)"),
    "overlap-moe-expert-parallel-comm": ("overlap_moe_expert_parallel_comm", _ep, "combined "
                                         "1F1B: expert all-to-alls under the other micro-batch"),
    "delay-wgrad-compute": ("delay_wgrad_compute", _ep, "weight gradients beside the "
                            "backward's all-to-alls"),
    "moe-flex-dispatcher-backend": ("moe_token_dispatcher", _ep, "the flex dispatcher's kernels"),
    "moe-flex-dispatcher-num-sms": ("moe_dispatcher_sms", _ep, "the dispatcher's SMs"),
    "moe-deepep-num-sms": ("moe_dispatcher_sms", _ep, "DeepEP's SMs"),
    "moe-hybridep-num-sms": ("moe_dispatcher_sms", _ep, "HybridEP's SMs"),
    "cuda-graph-impl": ("cuda_graph_impl", _always, "CUDA graphs: the captured layers' host "
                        "work removed"),
    "enable-cuda-graph": ("cuda_graph_impl", _always, "per-layer CUDA graphs (legacy flag)"),
    "external-cuda-graph": ("cuda_graph_impl", _always, "per-layer CUDA graphs (TE's)"),
    "cuda-graph-scope": ("cuda_graph_scope", _always, "what a per-layer graph captures"),
    "cuda-graph-modules": ("cuda_graph_scope", _always, "what a per-layer graph captures"),
    "megatron-fsdp-main-grads-dtype": ("megatron_fsdp_main_grads_dtype", _fsdp, "Megatron-FSDP's "
                                       "gradient shard dtype (its bytes, the step's fp32 copy)"),
    "megatron-fsdp-grad-comm-dtype": ("megatron_fsdp_grad_comm_dtype", _fsdp, "Megatron-FSDP's "
                                      "reduce-scatter dtype"),
}  # fmt: skip
"""Flag -> (option, whether it matters for a layout and the distributed optimizer, reason)."""

WITH_STEP_ALONE = (
    "without --overlap-param-gather it changes nothing: Megatron-Core's DDP issues the "
    "parameter all-gathers synchronously at the step either way (``start_param_sync`` returns "
    "early only when dispatching from the forward hooks, which exist only with "
    "overlap_param_gather; NVIDIA/Megatron-LM@d98e8a64 megatron/core/distributed/"
    "distributed_data_parallel.py lines 476-483 and 618-638). Megatron-LM's arguments.py "
    "refuses the pair; Megatron-Bridge's configs (no such check) reach here with it"
)
"""Why ``overlap_param_gather_with_optimizer_step`` alone is ignored."""

FSDP_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "none": "auto"}
"""A Megatron-FSDP dtype as Megatron-Bridge's configs spell it -> the option's value."""

SCOPES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba")


def option_value(flag: str, value: Any) -> str | None:
    """The option's value for ``flag = value`` (module doc); None: nothing to set.

    Example:
        >>> option_value("cuda-graph-scope", "attn,moe_router"), option_value("enable-cuda-graph", True)
        ('attn+moe_router', 'local')
        >>> option_value("no-align-param-gather", True), option_value("cuda-graph-impl", "none")
        ('false', None)
    """
    text = str(value).strip().strip("[]'\"")
    if flag.startswith("megatron-fsdp-"):  # a dtype as Megatron or Bridge (torch.bfloat16) says
        return FSDP_DTYPES.get(text.lower().removeprefix("torch."), text.lower())
    if flag in ("no-align-param-gather", "no-overlap-p2p-communication"):
        return "false"
    if flag in ("enable-cuda-graph", "external-cuda-graph"):
        return "local" if value is True or text.lower() == "true" else None
    if flag == "cuda-graph-impl":
        low = text.lower()
        if "enable_cuda_graph=true" in low:
            return "local"
        if low.startswith("none") or "false" in low:
            return None
        return next(
            (m for m in ("full_iteration", "transformer_engine", "local") if m in low), None
        )
    if flag in ("cuda-graph-scope", "cuda-graph-modules"):
        parts = [p.strip(" '\"") for p in text.replace(" ", ",").split(",")]
        mods = [p for p in parts if p in SCOPES]
        return "+".join(mods) if mods else None
    if value is True:
        return "true"
    return text or None


def read_options(
    flags: dict[str, Any], lay: ParallelLayout, dist: bool
) -> tuple[dict[str, str], list[tuple[str, Status, str]]]:
    """``(options, notes)`` of the flags in :data:`FLAG_OPTIONS`: each option with its value,
    and ``(flag, status, reason)`` per flag read (``mapped``, or ``ignored`` where the layout
    gives it nothing to do)."""
    options: dict[str, str] = {}
    notes: list[tuple[str, Status, str]] = []
    for flag, (name, matters, why) in FLAG_OPTIONS.items():
        if flag not in flags:
            continue
        if not matters(lay, dist):
            notes.append((flag, "ignored", f"{why}: nothing to overlap in this layout"))
            continue
        if (
            flag == "overlap-param-gather-with-optimizer-step"
            and "overlap-param-gather" not in flags
        ):
            notes.append((flag, "ignored", WITH_STEP_ALONE))
            continue
        value = option_value(flag, flags[flag])
        if value is None:
            notes.append((flag, "ignored", f"{why}: off"))
            continue
        options[name] = value
        notes.append((flag, "mapped", f"framework option {name}={value} ({why})"))
    if flags.get("moe-token-dispatcher-type") == "flex" and lay.ep > 1:
        options.setdefault("moe_token_dispatcher", "deepep")
    if "tp-comm-overlap-cfg" in flags and lay.tp > 1:
        notes.append(("tp-comm-overlap-cfg", "approximated", "tuned userbuffers config: "
                      "Transformer Engine's default methods and SMs are used"))  # fmt: skip
    return options, notes
