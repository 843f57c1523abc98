"""What :func:`sim.runs.express.express` simulates differently from a run, as the explicit
``approximated: ...`` entries of :attr:`~sim.runs.express.Expressed.approximations` (shown in
``predictions.csv``), and the hybrid model's generator fields."""

from __future__ import annotations

from typing import Any

from sim.compute.ssm import MambaShape
from sim.runs.hybrid_pattern import MAMBA_DEFAULTS
from sim.runs.model_shapes import shape_assumptions
from sim.runs.record import MeasuredRun, ModelShape, feature

APPROXIMATED_ACTIVATIONS = {
    "squared_relu": "squared-ReLU MLP (--squared-relu; Nemotron-H, Nemotron 3) timed as the "
    "ungated MLP's GeLU: the same two GEMMs, one element-wise kernel of the same bytes "
    "(relu(x)^2 vs GeLU: both memory-bound)",
}
"""MLP activations the decoder generator times as its ungated (GeLU) MLP, with what changes."""


SSD_RATE = (
    "assumption: Mamba-2's SSD scan kernels (mamba_ssm Triton) at their measured H100 rate "
    "(vllm#27299: 0.410 of 3.35 TB/s), carried to other GPUs per SM and bounded by that HBM "
    "fraction; the backward's own kernels at 0.741 of that rate (TFLA benchmark of "
    "mamba_split_conv1d_scan_combined, H100; sim.compute.ssd_speed)"
)
"""The assumption behind a hybrid model's scan times (shown with its rows)."""


def model_approximations(run: MeasuredRun, decoder: bool) -> tuple[str, ...]:
    """What the generated model changes of the run's (shown as ``approximated:`` entries)."""
    s, out = run.shape, []
    act = feature(s, "activation")
    if act in APPROXIMATED_ACTIVATIONS and decoder:
        out.append(f"approximated: {APPROXIMATED_ACTIVATIONS[act]}")
    if feature(s, "hybrid_pattern") and decoder:
        out.append(SSD_RATE)
    out.extend(shape_assumptions(run.name))
    if feature(s, "hybrid_pattern") and feature(s, "mtp"):
        out.extend(_hybrid_mtp(s))
    return tuple(out)


def _hybrid_mtp(s: ModelShape) -> tuple[str, ...]:
    """The ``approximated:`` entry of a hybrid model's MTP depths, or none where they are what
    the decoder generator builds: projection, then an attention and a MoE layer (``*E``, where
    the model has experts) or an attention and an MLP layer (``*-``), the shared output layer's
    logits and loss (NVIDIA/Megatron-LM@d98e8a64 ``megatron/core/transformer/
    multi_token_prediction.py`` lines 1183-1214: ``eh_proj``, then a ``HybridStack`` of the
    depth's pattern)."""
    built = "*E" if s.moe_experts else "*-"
    depths = feature(s, "hybrid_mtp")
    if depths and all(d == built for d in depths.split(",")):
        return ()
    seen = depths or "(the recipe's, from the model's Hugging Face config: not read)"
    return (f"approximated: hybrid MTP depths {seen} built as '{built}' (projection, "
            "attention, the model's MoE layer where it has experts, else a dense MLP of "
            "ffn_hidden)",)  # fmt: skip


INSTANCES_TIME = (
    "approximated: --num-distributed-optimizer-instances {n}: the gradient reduce-scatter and "
    "parameter all-gather are simulated over all {w} data-parallel ranks; Megatron-Core runs "
    "them over the {k} ranks of an instance and all-reduces the 1/{k} shard across the {n} "
    "instances (megatron/core/distributed/param_and_grad_buffer.py lines 676-745): the "
    "optimizer memory and step are the instance's (sim.memory.dist_opt)"
)
"""The timing approximation of several distributed-optimizer instances."""


ALLGATHER_TP = (
    "approximated: the allgather token dispatcher's TP x EP gather is timed over the EP ranks "
    "with the tensor ranks' tokens folded into each pair (sim.parallel.expert): the exchange "
    "inside the tensor group is not timed"
)
"""The allgather dispatcher with tensor parallelism (what the simulation leaves out)."""


def hybrid_fields(s: ModelShape) -> dict[str, Any]:
    """A hybrid model's ``pattern`` and Mamba-2 ``mamba`` shape (Megatron's ``MambaMixer``
    chunk 128, conv kernel 4: :data:`sim.runs.hybrid_pattern.MAMBA_DEFAULTS`), or {}."""
    pattern = feature(s, "hybrid_pattern")
    if not pattern:
        return {}
    heads, head_dim, state, groups = (int(x) for x in (feature(s, "mamba") or "").split(","))
    mamba = MambaShape(heads, head_dim, state, groups, MAMBA_DEFAULTS["conv_kernel"],
                       MAMBA_DEFAULTS["chunk"]) if "M" in pattern else None  # fmt: skip
    return {"pattern": pattern, "mamba": mamba}
