"""The memory policy of a measured run, for :func:`sim.runs.express.express`: its optimizer
sharding (distributed optimizer, ZeRO stages, FSDP), recompute and activation offloading as one
of pipesim's policy names (:mod:`sim.memory`), or None and the reason pipesim has none."""

from __future__ import annotations

from sim.compute.recompute_modules import MODULES, SAC
from sim.runs.record import MeasuredRun


def policy(run: MeasuredRun) -> tuple[str | None, str]:
    """The memory policy of a run's optimizer sharding and recompute, or None and why
    (``dist_opt:instances=N:...`` with several distributed-optimizer instances;
    ``act_offload:SHARE`` for Megatron's activation offloading where nothing else is planned:
    FSDP or plain DDP without recompute)."""
    name, why = _policy_name(run)
    if name == "none" and run.activation_offload > 0:  # sim.memory.act_offload
        return f"act_offload:{run.activation_offload:.6g}", why
    if name and name.startswith("dist_opt") and run.optimizer_instances > 1:
        name = f"dist_opt:instances={run.optimizer_instances}" + name[len("dist_opt") :]
    return name, why


def _block(rc: str) -> str:
    """A run's recompute as the recompute policy's argument: Megatron's ``full:block:N`` is
    ``full:N`` (the first N layers of each stage, :mod:`sim.memory.recompute`).

    >>> _block("full:block:4"), _block("selective:core_attn")
    ('full:4', 'selective:core_attn')
    """
    return f"full:{rc.rsplit(':', 1)[1]}" if rc.startswith("full:block:") else rc


def _policy_name(run: MeasuredRun) -> tuple[str | None, str]:
    rc, dist = run.recompute, run.distributed_optimizer
    if rc.startswith("selective:"):  # Megatron's --recompute-modules (sim.memory.recompute)
        mods = rc.split(":", 1)[1].replace("+", ",")
        if set(mods.split(",")) - set(MODULES):
            return None, f"recompute modules {mods} (pipesim has {', '.join(MODULES)})"
        rc = f"selective:{mods}"
    if run.layout.dp_shard > 1:  # FSDP shards the states itself (sim.memory.fsdp)
        return ("none" if rc == "none" else f"recompute:{_block(rc)}"), ""
    if rc == SAC:  # torchtitan's per-op SAC (sim.memory.recompute)
        return ("dist_opt:recompute:sac" if dist or run.zero_stage == 1 else "recompute:sac"), ""
    if (dist or run.zero_stage == 1) and rc.startswith("selective"):
        return f"dist_opt:recompute:{rc}", ""
    tail = "" if rc == "none" else ":recompute" if rc == "full" else None
    if run.zero_stage >= 3:
        name = "zero3" + (":offload" if run.offload else "")
        return (name + tail if tail is not None else None), (
            f"recompute {rc} with ZeRO-3 / FSDP (issue 26 item 5)"
        )
    if run.zero_stage == 2 and "optimizer" in run.offload:
        return ("zero_offload" + tail if tail is not None else None), (
            f"recompute {rc} with ZeRO-Offload (issue 26 item 5)"
        )
    if run.zero_stage == 2:
        return None, "ZeRO-2 (gradients partitioned too): no pipesim policy (issue 26 item 3)"
    if dist or run.zero_stage == 1:
        if rc in ("none", "full"):
            return ("dist_opt" if rc == "none" else "dist_opt:recompute"), ""
        if rc.startswith("full:block:"):  # Megatron's block recompute (sim.memory.dist_opt)
            return f"dist_opt:recompute:{_block(rc)}", ""
        return (
            None,
            f"recompute {rc} with the distributed optimizer (issue 26 item 5: module-"
            "level selective recompute with any data-parallel strategy)",
        )
    if rc == "none":
        return "none", ""
    if rc.startswith("selective:"):
        return f"recompute:{rc}", ""
    if rc in ("full", "selective") or rc.startswith("full:uniform"):
        return ("recompute:selective" if rc == "selective" else "recompute:full"), ""
    if rc.startswith("full:block:"):
        return f"recompute:full:{rc.rsplit(':', 1)[1]}", ""
    return None, f"recompute {rc} (issue 26 item 5: module-level selective recompute)"
