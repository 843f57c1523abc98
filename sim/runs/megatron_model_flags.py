"""Megatron-LM flags of the model and layout features added for issue 26, read for
:func:`sim.runs.megatron_args.read_megatron`: the hybrid layer pattern and its Mamba-2 sizes
(:mod:`sim.runs.hybrid_pattern`), the stage layout its ``|`` segments or
``--decoder-first/last-pipeline-num-layers`` give (:mod:`sim.runs.pipeline_layout`), and
``--num-distributed-optimizer-instances`` (:mod:`sim.memory.dist_opt`)."""

from __future__ import annotations

from sim.parallel.layout import ParallelLayout
from sim.runs.hybrid_pattern import HybridPattern, mamba_sizes, parse_pattern, stage_layout
from sim.runs.megatron_reading import Reading
from sim.runs.record import ArgNote


def hybrid_pattern(r: Reading) -> HybridPattern | None:
    """``--hybrid-layer-pattern`` (or the deprecated ``--hybrid-override-pattern``) parsed
    (:mod:`sim.runs.hybrid_pattern`); None without one or when it cannot be read (noted)."""
    flag = "hybrid-layer-pattern" if r.has("hybrid-layer-pattern") else "hybrid-override-pattern"
    text = r.text(flag)
    if not text:
        return None
    try:
        return parse_pattern(text)
    except ValueError as exc:
        r.unmapped(flag, str(exc))
        return None


def hybrid_features(r: Reading, pattern: HybridPattern | None, h: int) -> tuple[str, ...]:
    """A hybrid model's layer pattern (``hybrid_pattern=``, separators removed), its Mamba-2
    sizes (``mamba=H,P,N,G`` with Megatron's defaults) and MTP depths from the pattern
    (``hybrid_mtp=`` each depth's pattern, ``,``-joined; ``mtp=`` when ``--mtp-num-layers``
    does not say)."""
    if pattern is None:
        return ()
    sizes = mamba_sizes(h, *(r.int(f"mamba-{k}") for k in ("num-heads", "head-dim",
                                                          "state-dim", "num-groups")))  # fmt: skip
    for k in ("num-heads", "head-dim", "state-dim", "num-groups"):
        r.mapped(f"mamba-{k}", "Mamba-2 mixer (sim.compute.ssm.MambaShape)")
    out = [f"hybrid_pattern={pattern.layers}", "mamba=" + ",".join(map(str, sizes))]
    if pattern.mtp:
        out.append("hybrid_mtp=" + ",".join(pattern.mtp))
        if not r.int("mtp-num-layers"):
            out.append(f"mtp={len(pattern.mtp)}")
    return tuple(out)


def pattern_layout(r: Reading) -> str:
    """The stage layout a hybrid pattern's ``|`` segments give (:func:`stage_layout`), or ""."""
    text = r.flags.get("hybrid-layer-pattern") or r.flags.get("hybrid-override-pattern")
    try:
        return stage_layout(parse_pattern(str(text))) if text else ""
    except ValueError:
        return ""


def uneven_layout(r: Reading, lay: ParallelLayout) -> str:
    """``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers`` as a
    layout string: the first (last) pipeline stage builds that many decoder layers, the others
    split the rest evenly (NVIDIA/Megatron-LM@d98e8a64 ``megatron/core/transformer/
    transformer_block.py::get_num_layers_to_build`` and ``megatron/core/transformer/
    transformer_config.py``'s check that the middle layers divide evenly); one virtual stage
    per rank (with several, Megatron splits each rank's share again: not read here).
    "" without the flags; noted unmapped when the split is not whole.

    Example: 12 layers on 4 stages, first 2, last 2: ``Ett|tttt|tttt|ttL``.
    """
    flags = ("decoder-first-pipeline-num-layers", "decoder-last-pipeline-num-layers")
    if not any(r.has(f) for f in flags):
        return ""
    if lay.pp < 2:
        for f in flags:
            r.mapped(f, "one pipeline stage: nothing to split")
        return ""
    layers = r.int("num-layers") or r.int("decoder-num-layers") or 0
    first, last = (r.int(f) for f in flags)
    middle = lay.pp - (first is not None) - (last is not None)
    rest = layers - (first or 0) - (last or 0)
    if lay.vp > 1 or rest < middle or (middle and rest % middle) or (not middle and rest):
        for f in flags:
            if r.has(f):
                r.unmapped(f, f"uneven stages: {rest} layers do not split evenly over "
                           f"{middle} middle stages (or virtual stages {lay.vp} > 1)")  # fmt: skip
        return ""
    per = rest // middle if middle else 0
    counts = [per] * lay.pp
    if first is not None:
        counts[0] = first
    if last is not None:
        counts[-1] = last
    parts = ["t" * n for n in counts]
    parts[0], parts[-1] = "E" + parts[0], parts[-1] + "m" * (r.int("mtp-num-layers") or 0) + "L"
    for f in flags:
        r.mapped(f, f"uneven stages: options.boundaries of the layout {'|'.join(parts)}")
    return "|".join(parts)


def optimizer_instances(r: Reading, lay: ParallelLayout, dist: bool) -> int:
    """``--num-distributed-optimizer-instances`` (:mod:`sim.memory.dist_opt`); with
    Megatron-FSDP, ``--outer-dp-sharding-strategy no_shard`` over one instance is the default
    (no outer sharding). Megatron asserts that the instances divide ``dp x cp``
    (``megatron/core/parallel_state.py`` lines 920-929)."""
    n = r.int("num-distributed-optimizer-instances", 1) or 1
    outer = r.text("outer-dp-sharding-strategy")
    if outer is not None and outer == "no_shard" and n == 1:
        r.mapped("outer-dp-sharding-strategy", "no outer sharding (one instance): the default")
    if n == 1:
        r.mapped("num-distributed-optimizer-instances", "one instance: the default")
        return 1
    if not dist or (lay.dp * lay.cp) % n:
        r.unmapped("num-distributed-optimizer-instances", f"{n} instances need the distributed "
                   f"optimizer and to divide dp x cp = {lay.dp * lay.cp}")  # fmt: skip
        return 1
    r.mapped("num-distributed-optimizer-instances", f"memory policy dist_opt:instances={n}")
    return n


def activation_offload(r: Reading, layers: int) -> float:
    """The share of the transformer layers' stash Megatron's ``--cpu-offloading`` keeps on the
    host: ``--cpu-offloading-num-layers N`` of the model's ``layers`` (memory policy
    ``act_offload:N/L``, :mod:`sim.memory.act_offload`); 0 without it. Weight offloading
    (``--cpu-offloading-weights``) does nothing in TE (``transformer_engine/pytorch/
    cpu_offload.py`` at d0067d0 warns that it is deprecated and has no effect)."""
    if not r.switch("cpu-offloading"):
        return 0.0
    n = r.int("cpu-offloading-num-layers", 0) or 0
    if n <= 0 or layers <= 0:
        r.unmapped("cpu-offloading", "CPU offloading of no layers: nothing offloaded")
        return 0.0
    share = min(1.0, n / layers)
    why = (
        f"activation offloading: memory policy act_offload:{share:g} ({n} of {layers} layers' "
        "activations on the host, with FSDP or without optimizer sharding; else counted on "
        "the GPU); the copies are timed over the GPU-host link under TE's default offload "
        "schedule (sim.memory.offload_schedule), their HBM traffic is not"
    )
    for flag in ("cpu-offloading", "cpu-offloading-num-layers", "cpu-offloading-weights"):
        if flag in r.flags:
            r.done.add(flag)
            r.notes.append(ArgNote(flag, str(r.flags[flag]), "approximated", why))
    return share
