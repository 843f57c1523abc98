"""Policy ``recompute``: activation checkpointing, full or selective (memory.md §5.1).

``recompute`` / ``recompute:full``: every transformer block keeps only its input and runs its
forward again before its backward (Megatron ``full``, ``uniform`` with one layer per chunk).
Only blocks are checkpointed (:func:`~sim.trace.schema.layer_kind`), never the embedding or the
head: Megatron-LM checkpoints the layers of its ``TransformerBlock``
(``megatron/core/transformer/transformer_block.py::_checkpointed_forward``), DeepSpeed's
pipeline only ``ParallelTransformerLayerPipe`` layers of a ``GPTModelPipe``
(``deepspeed/runtime/pipe/module.py::PipelineModule._is_checkpointable``), and the torch replay
wraps each ``Block`` (:mod:`backends.torch.replay.memory`).
``recompute:full:N``: only the blocks among the first ``N`` layers of each stage (Megatron's
``block`` method: a knob for using exactly the memory each stage has). ``recompute:partition``:
every layer of the stage, embedding and head too, as GPipe checkpoints a partition whole
(torchgpipe ``checkpoint='always'``/``'except_last'``: each micro-batch's forward through the
partition runs under one checkpoint, ``torchgpipe/checkpoint.py``; GPipe §2.2
"re-materialization"); pipesim keeps each layer's input, a little more than the partition's.
``recompute:selective``: drop only the
attention core of every layer (Korthikanti et al.; Megatron's default ``core_attn``); on a trace
without ``attn_core_act_bytes`` it does nothing, and its notes say so.
``recompute:selective:M1,M2``: Megatron-Core's module-level selective recompute
(``--recompute-modules``: ``core_attn``, ``layernorm``, ``mlp``, ``moe_act``, ``moe``,
``mla_up_proj``; ``megatron/core/transformer/transformer_config.py``); ``recompute:sac``:
torchtitan's per-op selective activation checkpointing (``selective_ac_option = "op"``,
``torchtitan/distributed/activation_checkpoint.py``): each module's dropped bytes and re-run
seconds are the layer's (:mod:`sim.compute.recompute_modules`, decoder traces). These work
with any data-parallel strategy: DDP, FSDP (``dp_shard``, :mod:`sim.memory.fsdp`), the
distributed optimizer (``dist_opt:recompute:...``).

The recompute runs on the compute stream before each backward; the stash follows
:mod:`sim.memory.stash`.
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.compute.recompute_modules import MODULES, SAC
from sim.memory.base import MemoryPolicy, ReplayPlan
from sim.memory.compose import activation_plan, describe
from sim.memory.context import StageContext
from sim.memory.plan import StagePlan
from sim.memory.stash import Stash, has_attn_core, stash
from sim.memory.states import StateBytes, stage_state_bytes_per_param
from sim.trace.schema import layer_kind

PARTITION = "partition"
"""``recompute:partition``: every layer of a stage, as GPipe checkpoints a partition."""


class RecomputePolicy(MemoryPolicy):
    """Activation checkpointing.

    Args:
        mode: ``full``, ``selective``, ``sac`` or ``partition`` (module doc).
        layers: with ``full``, checkpoint only the first ``layers`` layers of each stage
            (None: all).
        modules: with ``selective``, Megatron's recompute modules (empty: the trace's
            attention core).
    """

    name = "recompute"
    description = (
        "activation checkpointing: full[:layers per stage], selective[:modules], sac "
        "(torchtitan's per-op) or partition (GPipe's)"
    )
    replayable = True
    plans_to_capacity = False  # no plan reads ctx.capacity_bytes (only describe's notes)

    def __init__(
        self, mode: str = "full", layers: int | None = None, modules: frozenset[str] = frozenset()
    ):
        self.mode, self.layers = mode, layers
        self.modules = frozenset({SAC}) if mode == SAC else modules

    @classmethod
    def from_args(cls, args: list[str]) -> RecomputePolicy:
        if not args:
            return cls()
        mode, rest = args[0], args[1:]
        if mode not in ("full", "selective", SAC, PARTITION):
            raise ValueError(
                f"recompute mode must be full, selective, sac or partition, got {mode!r}"
            )
        if mode in (SAC, PARTITION) and rest:
            raise ValueError(f"recompute:{mode} takes no further parameter")
        if mode == "selective":
            return cls(mode, modules=_modules(rest))
        if len(rest) > 1:
            raise ValueError("use recompute:full:N (N layers per stage)")
        if rest and (not rest[0].isdigit() or int(rest[0]) < 1):
            raise ValueError(f"layers per stage must be a positive integer, got {rest[0]!r}")
        return cls(mode, int(rest[0]) if rest else None)

    def stash(self, ctx: StageContext) -> Stash:
        """What one micro-batch keeps on ``ctx``'s stage under this choice."""
        if self.modules:
            return stash(ctx, modules=self.modules)
        if self.mode == "selective":
            return stash(ctx, selective=True)
        n = len(ctx.layers) if self.layers is None else min(self.layers, len(ctx.layers))
        whole = self.mode == PARTITION
        blocks = [i for i in range(n) if whole or layer_kind(ctx.layers[i].name) == "block"]
        return stash(ctx, full=blocks)

    def plan(self, ctx: StageContext) -> StagePlan:
        st, extra = self.stash(ctx), {}
        if self.mode == "selective" and not self.modules and not has_attn_core(ctx):
            extra = {
                "warning": "trace has no attn_core_act_bytes: selective recompute does nothing"
            }
        elif self.modules and not any(x.recompute_parts for x in ctx.layers):
            extra = {"warning": "trace has no recompute modules (decoder traces): nothing dropped"}
        m = ctx.microbatches
        return describe(ctx, activation_plan(ctx, st), st.label, m * st.recompute_s, **extra)

    def min_state_bytes_per_param(
        self, states: StateBytes, dp_width: int, versions: int, version_bytes: float
    ) -> float:
        """Every model state stays on the GPU (only activations are dropped)."""
        return stage_state_bytes_per_param(states, versions, version_bytes)

    def bound_recompute_mode(self) -> str | None:
        """``full`` or ``selective`` when every layer recomputes (not ``recompute:full:N``,
        nor modules: none counted, a valid bound; ``partition`` recomputes the blocks and
        more: ``full``)."""
        if self.layers is not None or self.modules:
            return None
        return "full" if self.mode == PARTITION else self.mode

    def replay(self, is_block: Sequence[bool], where: str) -> ReplayPlan:
        """``torch.utils.checkpoint`` around the stage's blocks (among its first ``layers``
        layers); selective recompute is not replayed: the stage keeps every activation and a
        note says so."""
        if self.mode not in ("full", PARTITION):
            return ReplayPlan(
                notes=(
                    f"{where} not replayed: the stage keeps every activation, as "
                    "'none' (the simulator drops and re-runs the attention core)",
                )
            )
        n = len(is_block)
        blocks = frozenset(i for i, b in enumerate(is_block) if b)
        first = n if self.layers is None else min(self.layers, n)
        others = [i for i in range(first) if i not in blocks]
        if self.mode == PARTITION and others:
            return ReplayPlan(
                checkpoint=blocks,
                notes=(
                    f"{where}: the replay checkpoints the blocks only; the non-block layers at "
                    f"positions {others} keep their activations (the simulator drops them too)",
                ),
            )
        notes = (
            ()
            if not others or self.layers is None
            else (
                f"{where}: checkpoints the blocks among the first {first} layers; the "
                f"non-block layers at positions {others} keep their activations (as simulated)",
            )
        )
        return ReplayPlan(checkpoint=frozenset(i for i in blocks if i < first), notes=notes)


def _modules(names: list[str]) -> frozenset[str]:
    """The modules of ``recompute:selective:M1,M2`` (empty: the trace's attention core).

    Raises:
        ValueError: more than one parameter, or an unknown module (listing the known ones).
    """
    if not names:
        return frozenset()
    if len(names) > 1:
        raise ValueError("use recompute:selective:M1,M2 (modules joined by ',')")
    mods = frozenset(x.strip() for x in names[0].split(","))
    unknown = sorted(mods - set(MODULES))
    if unknown:
        raise ValueError(f"unknown recompute modules {unknown}; use {', '.join(MODULES)}")
    return mods
