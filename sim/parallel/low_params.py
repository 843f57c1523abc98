"""The parameters of a decoder layer on one rank whose GEMMs run in low precision
(:func:`low_precision_params`), which :class:`~sim.parallel.decoder_shard.DecoderShard` keeps
per layer (``low_params``) for the memory model (:mod:`sim.memory.precision`).
"""

from __future__ import annotations

from sim.compute.decoder import DecoderShape, layer_params
from sim.compute.decoder_shape import base_kind
from sim.compute.precision_rules import LowPrecision
from sim.parallel.layout import ParallelLayout
from sim.trace.decoder import MOE_KINDS


def low_precision_params(
    kind: str, m: DecoderShape, par: ParallelLayout, low: LowPrecision
) -> float:
    """Parameters of a layer on one rank whose GEMMs run under ``low`` (a layer its rules run
    low): the layer's linear weights (:func:`~sim.compute.decoder.layer_params` less its norms
    and, unless the rules quantize it, the router), dense ones split
    ``par.shards("dense_params")`` ways and routed experts ``par.shards("expert_params")``
    ways; the output layer's ``V x h`` where the rules quantize it; nothing else (the
    embedding is no GEMM). Norms: ``h`` per norm, two in a block, one in a hybrid layer (an
    upper bound of a per-layer error of ``h`` parameters)."""
    dense, experts = layer_params(kind, m)
    base = base_kind(kind)
    if base == "head":
        linear = float(m.vocab * m.hidden) if low.rules.head else 0.0
        return linear / par.shards("dense_params")
    if base == "embedding":
        return 0.0
    norms = 2 if base in ("block", "moe_block", "mtp") else 1
    linear = max(0.0, float(dense - norms * m.hidden))
    if base in MOE_KINDS and m.moe is not None and not low.rules.router:
        linear = max(0.0, linear - m.moe.router_params())
    return linear / par.shards("dense_params") + experts / par.shards("expert_params")
