"""The sweep's expert- and context-parallel axes and their validity checks.

``sweep.expert_parallel``, ``context_parallel``, ``context_parallel_comm`` and ``ep_overlap``
(and each model's ``routing``) expand into ``(ep, cp, comm, overlap)`` combinations; a
combination a model or schedule cannot run is skipped with its reason (decoder traces only,
``ep`` dividing the data x context ranks and the experts, overlap only where a schedule pairs a
forward and a backward: :mod:`sim.parallel.decoder_shard`, :mod:`sim.engine.overlap`).
"""

from __future__ import annotations

from sim.compute.routing import parse_routing
from sim.config import as_list
from sim.errors import InputError
from sim.framework.base import Framework
from sim.memory.base import MemoryPolicy
from sim.memory.fsdp import fsdp_problem
from sim.parallel.context import COMM_TYPES
from sim.parallel.decoder_split import decoder_problem
from sim.parallel.layout import ParallelLayout
from sim.point.experiment import Prepared
from sim.schedules.base import Schedule
from sim.trace.decoder import decoder_shape, is_decoder


def parallel_axes(prep: Prepared) -> list[tuple[int, int, str, bool, int | None, int]]:
    """``(expert_parallel, context_parallel, context_parallel_comm, ep_overlap,
    expert_tensor_parallel, dp_shard)`` combinations of the sweep (the comm kind only varies
    where ``cp > 1``), and every model's routing checked.

    Raises:
        InputError: an unknown context-parallel comm kind or routing spec, or one the model's
            experts cannot take (an imbalance above the expert count, a histogram of another
            length), naming the field.
    """
    sw, file = prep.exp.sweep, prep.file
    kinds = as_list(sw.context_parallel_comm)
    for i, kind in enumerate(kinds):
        if kind not in COMM_TYPES:
            field = "sweep.context_parallel_comm" + (f".{i}" if len(kinds) > 1 else "")
            raise InputError(
                f"{kind!r} is not one of {', '.join(COMM_TYPES)}", file=file, field=field
            )
    for i, model in enumerate(prep.exp.models):
        try:
            routing = parse_routing(model.routing)
            trace = prep.traces[model.name]
            moe = decoder_shape(trace).moe if is_decoder(trace) else None
            if moe is not None:
                routing.loads(moe.experts)  # an imbalance or histogram that fits the experts
        except ValueError as exc:
            raise InputError(str(exc), file=file, field=f"models.{i}.routing") from None
    out = []
    etps = as_list(sw.expert_tensor_parallel)
    for ep in as_list(sw.expert_parallel):
        for cp in as_list(sw.context_parallel):
            for ov in as_list(sw.ep_overlap):
                for etp in etps:
                    for shard in as_list(sw.dp_shard):
                        ks = kinds if cp > 1 else kinds[:1]
                        out += [(ep, cp, k, ov, etp, shard) for k in ks]
    return out


def shard_reason(w: int, shard: int) -> str:
    """Why ``dp_shard`` ``shard`` cannot split ``w`` data-parallel ranks, or ``""``."""
    if shard != -1 and w % shard:
        return f"dp_shard {shard} must divide dp_width {w}"
    return ""


def overlap_invalid(cls: type[Schedule], overlap: bool, ep: int, cp: int) -> str:
    """Why ``ep_overlap`` cannot apply to schedule ``cls``, or ``""``."""
    if not overlap:
        return ""
    if not cls.overlaps_pairs:
        return f"ep_overlap needs a schedule with OVERLAP_F_B pairs (dualpipe_v), not {cls.name}"
    if ep == 1 and cp == 1:
        return "ep_overlap has no exchange to overlap without expert or context parallelism"
    return ""


def is_decoder_model(prep: Prepared, mi: int) -> bool:
    """Whether model ``mi``'s trace is a decoder trace."""
    return is_decoder(prep.traces[prep.exp.models[mi].name])


def parallel_invalid(prep: Prepared, mi: int, lay: ParallelLayout, policy: MemoryPolicy) -> str:
    """Why expert/context parallelism of ``lay`` cannot run for model ``mi`` here, or ``""``."""
    trace = prep.traces[prep.exp.models[mi].name]
    if not is_decoder(trace):
        if lay.ep > 1 or lay.cp > 1:
            return (
                "expert and context parallelism model decoder traces (sim.trace.decoder); "
                f"{trace.name} is not one"
            )
        return ""
    problems = lay.problems()
    if problems:
        return problems[0]
    parts = policy.parts()
    if lay.ep > 1 and any(p.shards_states and not p.shards_experts for p in parts):
        # the routed experts' states would partition over the expert-data-parallel group,
        # which these policies do not model
        return (
            f"memory policy {policy.text} partitions states over replicas; not with expert_parallel"
        )
    return decoder_problem(decoder_shape(trace), lay)


def sharding_invalid(
    lay: ParallelLayout, policy: MemoryPolicy, framework: Framework, cls: type[Schedule]
) -> str:
    """Why FSDP (``dp_shard > 1``, or where the framework runs it without sharding:
    :meth:`~sim.framework.base.Framework.runs_fsdp`) cannot run with ``policy`` under
    ``framework``, or ``""``:
    a framework without FSDP, a policy that shards or moves model states itself (ZeRO, the
    distributed optimizer, chunks, offload: it would shard them twice), expert groups that
    leave the shard group (:func:`~sim.memory.fsdp.fsdp_problem`)."""
    if not framework.runs_fsdp(lay):
        return ""
    what = (
        f"dp_shard {lay.dp_shard}"
        if lay.dp_shard > 1
        else f"dp_shard 1 ({framework.name} shards over context_parallel {lay.cp})"
        if lay.cp > 1
        else f"dp_shard 1 ({framework.name} runs its {lay.dp_replicate} replicas as FSDP)"
    )
    if framework.fsdp.value is None:
        return f"framework {framework.name} has no FSDP (dp_shard {lay.dp_shard}): {framework.fsdp.source}"
    why = fsdp_problem(lay)
    if why:
        return why
    if cls.splits_backward or cls.overlaps_pairs:
        return f"{what}: FSDP units are modelled for F and B actions, not {cls.name}"
    taken = [p.name for p in policy.parts() if p.shards_states or p.name == "dist_opt"]
    if taken:
        return (
            f"{what} shards the model states by FSDP; memory policy "
            f"{taken[0]} shards them itself (use none or recompute with dp_shard)"
        )
    return ""
