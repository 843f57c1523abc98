"""Policy ``recompute``: activation checkpointing, full or selective (memory.md §5.1).

``recompute`` / ``recompute:full``: every transformer block keeps only its input and runs its
forward again before its backward (Megatron ``full``, ``uniform`` with one layer per chunk).
Only blocks are checkpointed (:func:`~sim.trace.schema.layer_kind`), never the embedding or the
head: Megatron-LM checkpoints the layers of its ``TransformerBlock``
(``megatron/core/transformer/transformer_block.py::_checkpointed_forward``), DeepSpeed's
pipeline only ``ParallelTransformerLayerPipe`` layers of a ``GPTModelPipe``
(``deepspeed/runtime/pipe/module.py::PipelineModule._is_checkpointable``), and the torch replay
wraps each ``Block`` (:mod:`backends.torch.memory`).
``recompute:full:N``: only the blocks among the first ``N`` layers of each stage (Megatron's
``block`` method: a knob for using exactly the memory each stage has). ``recompute:selective``: drop only the
attention core of every layer (Korthikanti et al.; Megatron's default ``core_attn``); on a trace
without ``attn_core_act_bytes`` it does nothing, and its notes say so.

The recompute runs on the compute stream before each backward; the stash follows
:mod:`sim.memory.stash`.
"""

from __future__ import annotations

from sim.memory.base import MemoryPolicy, StageContext
from sim.memory.compose import activation_plan, describe
from sim.memory.plan import StagePlan
from sim.memory.stash import has_attn_core, stash
from sim.trace.schema import layer_kind


class RecomputePolicy(MemoryPolicy):
    """Activation checkpointing.

    Args:
        mode: ``full`` or ``selective``.
        layers: with ``full``, checkpoint only the first ``layers`` layers of each stage
            (None: all).
    """

    name = "recompute"
    description = "activation checkpointing: full[:layers per stage] or selective"

    def __init__(self, mode: str = "full", layers: int | None = None):
        self.mode, self.layers = mode, layers

    @classmethod
    def from_args(cls, args: list[str]) -> RecomputePolicy:
        if not args:
            return cls()
        mode, rest = args[0], args[1:]
        if mode not in ("full", "selective"):
            raise ValueError(f"recompute mode must be full or selective, got {mode!r}")
        if mode == "selective" and rest:
            raise ValueError("recompute:selective takes no further parameter")
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
        blocks = [i for i in range(n) if layer_kind(ctx.layers[i].name) == "block"]
        st = stash(ctx, full=blocks)
        return describe(ctx, activation_plan(ctx, st), st.label, m * st.recompute_s)
