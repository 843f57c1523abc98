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
"re-materialization"); pipesim keeps each layer's input, a little more than the partition's. ``recompute:selective``: drop only the
attention core of every layer (Korthikanti et al.; Megatron's default ``core_attn``); on a trace
without ``attn_core_act_bytes`` it does nothing, and its notes say so.

The recompute runs on the compute stream before each backward; the stash follows
:mod:`sim.memory.stash`.
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.memory.base import MemoryPolicy, ReplayPlan
from sim.memory.compose import activation_plan, describe
from sim.memory.context import StageContext
from sim.memory.plan import StagePlan
from sim.memory.stash import has_attn_core, stash
from sim.memory.states import StateBytes, stage_state_bytes_per_param
from sim.trace.schema import layer_kind


class RecomputePolicy(MemoryPolicy):
    """Activation checkpointing.

    Args:
        mode: ``full``, ``selective`` or ``partition`` (module doc).
        layers: with ``full``, checkpoint only the first ``layers`` layers of each stage
            (None: all).
    """

    name = "recompute"
    description = "activation checkpointing: full[:layers per stage], selective or partition"
    replayable = True

    def __init__(self, mode: str = "full", layers: int | None = None):
        self.mode, self.layers = mode, layers

    @classmethod
    def from_args(cls, args: list[str]) -> RecomputePolicy:
        if not args:
            return cls()
        mode, rest = args[0], args[1:]
        if mode not in ("full", "selective", "partition"):
            raise ValueError(f"recompute mode must be full, selective or partition, got {mode!r}")
        if mode in ("selective", "partition") and rest:
            raise ValueError(f"recompute:{mode} takes no further parameter")
        if len(rest) > 1:
            raise ValueError("use recompute:full:N (N layers per stage)")
        if rest and (not rest[0].isdigit() or int(rest[0]) < 1):
            raise ValueError(f"layers per stage must be a positive integer, got {rest[0]!r}")
        return cls(mode, int(rest[0]) if rest else None)

    def plan(self, ctx: StageContext) -> StagePlan:
        m = ctx.microbatches
        if self.mode == "selective":
            st = stash(ctx, selective=True)
            extra = (
                {}
                if has_attn_core(ctx)
                else {
                    "warning": "trace has no attn_core_act_bytes: selective recompute does nothing"
                }
            )
            return describe(ctx, activation_plan(ctx, st), st.label, m * st.recompute_s, **extra)
        n = len(ctx.layers) if self.layers is None else min(self.layers, len(ctx.layers))
        whole = self.mode == "partition"
        blocks = [i for i in range(n) if whole or layer_kind(ctx.layers[i].name) == "block"]
        st = stash(ctx, full=blocks)
        return describe(ctx, activation_plan(ctx, st), st.label, m * st.recompute_s)

    def min_state_bytes_per_param(
        self, states: StateBytes, dp_width: int, versions: int, version_bytes: float
    ) -> float:
        """Every model state stays on the GPU (only activations are dropped)."""
        return stage_state_bytes_per_param(states, versions, version_bytes)

    def bound_recompute_mode(self) -> str | None:
        """``full`` or ``selective`` when every layer recomputes (not ``recompute:full:N``;
        ``partition`` recomputes the blocks and more: ``full``)."""
        if self.layers is not None:
            return None
        return "full" if self.mode == "partition" else self.mode

    def replay(self, is_block: Sequence[bool], where: str) -> ReplayPlan:
        """``torch.utils.checkpoint`` around the stage's blocks (among its first ``layers``
        layers); selective recompute is not replayed: the stage keeps every activation and a
        note says so."""
        if self.mode == "selective":
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
        if self.mode == "partition" and others:
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
