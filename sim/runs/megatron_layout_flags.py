"""Megatron-LM's parallel layout flags, for :func:`sim.runs.megatron_args.read_megatron`: the
job's GPUs, the tensor, pipeline, context, expert and data-parallel sizes, virtual stages,
Megatron-FSDP, the context-parallel exchange, the distributed optimizer, and the pipeline
layout (``--pipeline-model-parallel-layout`` or Megatron's even split). Defaults follow
``megatron/training/arguments.py::validate_args`` at NVIDIA/Megatron-LM@d98e8a64dd
(``dp = world / (tp x pp x cp)``)."""

from __future__ import annotations

from sim.parallel.layout import ParallelLayout
from sim.runs.megatron_model_flags import pattern_layout, uneven_layout
from sim.runs.megatron_reading import Reading
from sim.runs.pipeline_layout import parse_layout, split_layout
from sim.runs.record import ArgNote


def read_world(r: Reading) -> int | None:
    """GPUs in the job: ``--world-size``, else the launcher's ``--nproc-per-node x --nnodes``;
    None when neither is given."""
    world = r.int("world-size")
    if world:
        r.mapped("world-size", "GPUs in the job")
        return world
    nproc, nodes = r.int("nproc-per-node"), r.int("nnodes", 1) or 1
    for f in ("nproc-per-node", "nnodes"):
        r.mapped(f, "GPUs in the job: nproc-per-node x nnodes")
    return nproc * nodes if nproc else None


A2A_P2P = (
    "hierarchical CP 'a2a+p2p' simulated as the p2p ring over all cp ranks: Transformer "
    "Engine runs an all-to-all inside each group of the first --hierarchical-context-parallel-"
    "sizes (heads split) and the KV ring only across the groups (fewer, larger ring steps; "
    "NVIDIA/TransformerEngine transformer_engine/pytorch/attention/dot_product_attention/"
    "context_parallel.py, AttnFuncWithCPAndKVP2P with cp_group_a2a)"
)
"""What the reader changes of an ``a2a+p2p`` run."""


def read_layout(r: Reading, world: int | None) -> tuple[ParallelLayout, bool]:
    """The run's :class:`~sim.parallel.layout.ParallelLayout` over ``world`` GPUs (``dp = world
    / (tp x pp x cp)``; 1 when unknown) and whether the optimizer state is sharded (the
    distributed or a layer-wise distributed optimizer), each flag read noted in ``r``."""
    tp = r.int("tensor-model-parallel-size", 1) or 1
    pp = r.int("pipeline-model-parallel-size", 1) or 1
    cp = r.int("context-parallel-size", 1) or 1
    ep = r.int("expert-model-parallel-size", 1) or 1
    etp = r.int("expert-tensor-parallel-size")
    layers = r.int("num-layers") or r.int("decoder-num-layers") or 0
    vp = r.int("num-virtual-stages-per-pipeline-rank") or 1
    per_vstage = r.int("num-layers-per-virtual-pipeline-stage")
    if per_vstage and layers and pp:
        vp = max(1, layers // (pp * per_vstage))
    vp = _layout_vp(r, pp, vp)
    dp = max(1, world // (tp * pp * cp)) if world else 1
    comm = {"p2p": "p2p", "a2a": "a2a", "allgather": "all_gather"}
    cp_comm = r.text("cp-comm-type", "p2p") or "p2p"
    if cp > 1 and cp_comm == "a2a+p2p":
        r.done.add("cp-comm-type")
        r.notes.append(ArgNote("cp-comm-type", cp_comm, "approximated", A2A_P2P))
        r.mapped("hierarchical-context-parallel-sizes", "the a2a+p2p split (approximated, "
                 "see cp-comm-type)")  # fmt: skip
        cp_comm = "p2p"
    elif cp > 1 and cp_comm not in comm:
        r.unmapped("cp-comm-type", f"{cp_comm!r}: hierarchical CP exchange (issue 26 item 7)")
    if etp is None and ep > 1 and (dp * cp) % ep:
        etp = _folded_etp(tp, cp, dp, ep)
    fsdp = r.switch("use-megatron-fsdp")
    lay = ParallelLayout(
        pp=pp, vp=vp, dp_replicate=1 if fsdp else dp, dp_shard=dp if fsdp else 1, cp=cp, tp=tp,
        sp=r.switch("sequence-parallel") and tp > 1, ep=ep,
        etp=etp if etp not in (None, tp) else None, cp_comm=comm.get(cp_comm, "p2p"),
    )  # fmt: skip
    if fsdp:
        r.mapped("use-megatron-fsdp", f"layout.dp_shard = dp = {dp} (sim.memory.fsdp)")
        _main_params(r)  # the gradient and comm dtypes: options (sim.runs.megatron_overlap)
        r.mapped("data-parallel-sharding-strategy", "Megatron-FSDP as the megatron-lm "
                 "profile's fsdp setting")  # fmt: skip
    for f, what in (
        ("tensor-model-parallel-size", "tp"), ("pipeline-model-parallel-size", "pp"),
        ("context-parallel-size", "cp"), ("expert-model-parallel-size", "ep"),
        ("expert-tensor-parallel-size", "etp"), ("sequence-parallel", "sp"),
        ("num-layers-per-virtual-pipeline-stage", f"vp = layers / (pp x this) = {vp}"),
        ("num-virtual-stages-per-pipeline-rank", "vp"), ("cp-comm-type", "cp_comm"),
    ):  # fmt: skip
        r.mapped(f, f"layout.{what}" if " " not in what else what)
    dist = r.switch("use-distributed-optimizer") or _layer_wise(r)
    r.mapped("use-distributed-optimizer", "memory policy dist_opt (ZeRO-1)")
    return lay, dist


NO_MAIN_WEIGHTS = (
    "no fp32 main weight buffer: Megatron-FSDP's optimizer steps the model's own weight shard "
    "(NVIDIA/Megatron-LM@d98e8a64 megatron/core/distributed/fsdp/src/megatron_fsdp/"
    "param_and_grad_buffer.py:2688-2706, main_weight_buffer only when main_params_dtype is "
    "set; :3378 no gradient cast without it); pipesim keeps the fp32 main weight, its state "
    "bytes and the step's gradient cast"
)
"""Why a Megatron-FSDP main weight dtype other than fp32 is approximated."""


def _main_params(r: Reading) -> None:
    """``--megatron-fsdp-main-params-dtype``: fp32 (the default) is the profile's fsdp
    setting; another dtype is approximated (:data:`NO_MAIN_WEIGHTS`)."""
    flag = "megatron-fsdp-main-params-dtype"
    main = str(r.flags.get(flag, "fp32")).removeprefix("torch.")
    if main in ("fp32", "float32"):
        r.mapped(flag, "Megatron-FSDP as the megatron-lm profile's fsdp setting")
        return
    r.done.add(flag)
    r.notes.append(ArgNote(flag, main, "approximated", NO_MAIN_WEIGHTS))


LAYER_WISE = (
    "layer-wise distributed optimizer (--optimizer dist_*): each data-parallel rank keeps the "
    "optimizer state of its share of the parameters, dense ones over dp x cp, expert ones "
    "over the expert data-parallel group, as the distributed optimizer's shards: memory policy "
    "dist_opt (NVIDIA/Megatron-LM@addc601 megatron/core/optimizer/__init__.py lines 746-755: "
    "'dist_muon' is 'muon' with use_layer_wise; layer_wise_optimizer.py LayerWiseDistributed"
    "Optimizer.shard_params, lines 433-462); its gradients are all-reduced and its parameters "
    "all-gathered, timed as the distributed optimizer's reduce-scatter and all-gather"
)
"""What the simulation changes of a layer-wise distributed optimizer run."""


def _layer_wise(r: Reading) -> bool:
    """Whether ``--optimizer`` names a layer-wise distributed optimizer (``dist_muon``:
    :data:`LAYER_WISE`), which shards the state without ``--use-distributed-optimizer``."""
    return str(r.flags.get("optimizer", "")).startswith("dist_")


def read_pipeline_layout(r: Reading, lay: ParallelLayout) -> str:
    """The run's pipeline layout (:mod:`sim.runs.pipeline_layout`): ``--pipeline-model-
    parallel-layout``, or Megatron's even split over several virtual stages (the embedding on
    the first, the output layer and loss on the last, or counted as layers with
    ``--account-for-embedding-in-pipeline-split`` / ``--account-for-loss-in-pipeline-split``:
    :func:`~sim.runs.pipeline_layout.split_layout`); "" for one stage or layers that do not
    split evenly (Megatron asserts they do)."""
    layout = r.text("pipeline-model-parallel-layout") or pattern_layout(r) or uneven_layout(r, lay)
    r.mapped("pipeline-model-parallel-layout", "options.boundaries (sim.runs.pipeline_layout)")
    flags = ("account-for-embedding-in-pipeline-split", "account-for-loss-in-pipeline-split")
    emb, loss = (r.switch(f) for f in flags)
    if layout:
        return layout
    if lay.pp * lay.vp == 1:
        for f in flags:
            r.mapped(f, "one stage: the split does not change")
        return ""
    try:
        layout = split_layout(r.int("num-layers") or 0, lay.pp * lay.vp, emb, loss,
                              r.int("mtp-num-layers") or 0)  # fmt: skip
    except ValueError as exc:
        for f in flags:
            if r.has(f):
                r.unmapped(f, str(exc))
        return ""
    for f in flags:
        r.mapped(f, f"options.boundaries of the layout {layout} (sim.runs.pipeline_layout)")
    return layout


def _layout_vp(r: Reading, pp: int, vp: int) -> int:
    """``--pipeline-model-parallel-layout``'s virtual stages per rank: its stages over ``pp``
    (``PipelineParallelLayerLayout.__init__``; :mod:`sim.runs.pipeline_layout`), else ``vp``."""
    text = r.text("pipeline-model-parallel-layout") or pattern_layout(r)
    try:
        n = len(parse_layout(text)) if text else 0
    except ValueError:
        return vp
    return n // pp if n and n % pp == 0 else vp


def _folded_etp(tp: int, cp: int, dp: int, ep: int) -> int | None:
    """The expert tensor-parallel size a run with ``ep`` not dividing ``dp x cp`` must use:
    the largest divisor of ``tp`` with ``ep x etp`` dividing ``tp x cp x dp`` (Megatron-Core's
    ``initialize_model_parallel`` refuses any other; MoE parallel folding), or None."""
    for e in range(tp, 0, -1):
        if tp % e == 0 and (tp * cp * dp) % (ep * e) == 0:
            return e
    return None
