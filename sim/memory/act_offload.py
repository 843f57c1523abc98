"""Policy ``act_offload:SHARE``: Megatron-Core's activation offloading (``--cpu-offloading``).

Megatron wraps each transformer layer's forward in Transformer Engine's CPU-offload context
(``TransformerBlock.__init__`` -> ``get_cpu_offload_context(cpu_offloading,
cpu_offloading_num_layers, num_layers, ...)``, ``megatron/core/transformer/transformer_block.py``
298-320, ``megatron/core/extensions/transformer_engine.py`` 3442-3480, NVIDIA/Megatron-LM@
d98e8a64dd). TE's default synchronizer offloads the saved tensors of layers ``0 .. N-1`` of
``L`` to pinned host memory on a side stream, layer ``i``'s copy finishing before layer
``L - N + i`` starts, and reloads them in the backward symmetrically, "to ensure that activation
memory usage is equal to (num_layers - num_offloaded_layers) * T"
(``DefaultOffloadSynchronizer._init_offload_synchronization_dicts`` and the
``get_cpu_offload_context`` docstring, ``transformer_engine/pytorch/cpu_offload.py``
NVIDIA/TransformerEngine@d0067d0).

pipesim keeps ``1 - SHARE`` of every stage's transformer-layer stash on the GPU
(``SHARE = N / L``); the embedding's and the head's stash stay (they are outside the context).
The copies run on TE's offload stream beside the compute, timed over the GPU's route to its
host (:func:`sim.memory.estimate.copy_s`, shared ``host_sharers`` ways); the compute stream
waits where TE's default schedule makes it wait (:mod:`sim.memory.offload_schedule`), per
micro-batch: ``offload_fwd_stall_s`` in each forward, ``offload_bwd_stall_s`` in each backward.
The host's pinned buffers are not checked against its DRAM. With pipeline parallelism the same
share of each stage's layers is offloaded, the first ``round(SHARE * layers)`` of the stage,
scheduled as if the stage were the whole model (an assumption: TE's counter runs over
``config.num_layers`` and interleaved micro-batches are not modelled).
"""

from __future__ import annotations

from dataclasses import replace

from sim.memory.base import MemoryPolicy
from sim.memory.compose import activation_plan, describe, gib, ms
from sim.memory.context import StageContext
from sim.memory.cpu_swap import parse_fraction
from sim.memory.estimate import copy_s
from sim.memory.offload_schedule import offload_stalls_s
from sim.memory.plan import StagePlan
from sim.memory.stash import stash
from sim.memory.states import StateBytes, stage_state_bytes_per_param
from sim.trace.schema import layer_kind

OUTSIDE = ("embedding", "head")
"""Layer kinds outside TE's offload context (Megatron wraps the transformer layers only)."""


def offloaded_bytes(ctx: StageContext, share: float) -> float:
    """Bytes of one micro-batch's stash on the host: ``share`` of the stage's transformer
    layers' stash."""
    layers = sum(a.act_bytes for a in ctx.layers if layer_kind(a.name) not in OUTSIDE)
    return share * layers


def offload_stalls(ctx: StageContext, share: float) -> tuple[float, float]:
    """``(forward, backward)`` seconds one micro-batch waits for TE's copies
    (:func:`~sim.memory.offload_schedule.offload_stalls_s`) when the first
    ``round(share * L)`` of the stage's ``L`` transformer layers are offloaded (at most
    ``L - 1``, TE's limit), each layer's stash copied over ``ctx.gpu``'s route to ``ctx.host``."""
    blocks = [a for a in ctx.layers if layer_kind(a.name) not in OUTSIDE]
    n = min(round(share * len(blocks)), len(blocks) - 1)
    if n <= 0:
        return 0.0, 0.0
    k = ctx.host_sharers
    out = [copy_s(ctx, ctx.gpu, ctx.host, a.act_bytes, k) for a in blocks[:n]]
    back = [copy_s(ctx, ctx.host, ctx.gpu, a.act_bytes, k) for a in blocks[:n]]
    fwd = [a.fwd_s for a in blocks]
    bwd = [a.bwd_s for a in blocks]
    return offload_stalls_s(fwd, bwd, out, back, n)


class ActOffloadPolicy(MemoryPolicy):
    """Offload ``share`` of each micro-batch's transformer-layer stash, layer by layer.

    Args:
        share: ``cpu_offloading_num_layers / num_layers``, in (0, 1].
    """

    name = "act_offload"
    description = "Megatron/TE activation offloading: a share of the layers' stash on the host"

    def __init__(self, share: float = 0.5):
        self.share = share

    @classmethod
    def from_args(cls, args: list[str]) -> ActOffloadPolicy:
        if len(args) != 1:
            raise ValueError("use act_offload:SHARE (offloaded layers / layers, in (0, 1])")
        return cls(parse_fraction(args[0], "act_offload share"))

    def plan(self, ctx: StageContext) -> StagePlan:
        st = stash(ctx)
        off = min(offloaded_bytes(ctx, self.share), st.kept_bytes)
        plan = activation_plan(ctx, st)
        # dropped after F and back for B, never all at once (TE's synchronizer): no rebuild
        f_s, b_s = offload_stalls(ctx, self.share)
        plan = replace(
            plan,
            resident_act_bytes=st.kept_bytes - off,
            transient_bytes=0.0,
            offload_fwd_stall_s=f_s,
            offload_bwd_stall_s=b_s,
        )
        return describe(
            ctx,
            plan,
            f"act_offload {self.share:g}",
            ctx.microbatches * (f_s + b_s),
            offloaded_gib=gib(off),
            offload_stall_ms_per_microbatch=ms(f_s + b_s),
        )

    def min_state_bytes_per_param(
        self, states: StateBytes, dp_width: int, versions: int, version_bytes: float
    ) -> float:
        """Every model state stays on the GPU (only activations move)."""
        return stage_state_bytes_per_param(states, versions, version_bytes)
