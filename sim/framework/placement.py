"""Embedding and head placement: how a framework's even split puts layers on pipeline stages.

Three rules (:data:`PLACEMENTS`), each returning stage start-layer indices for ``partition:
uniform``:

* ``layers``: every layer counts once, embedding and head included; the first ``n mod p``
  stages take one more (:func:`sim.parallel.partition.uniform_partition`; torchtitan
  ``torchtitan/distributed/pipeline_parallel.py::generate_llm_fqn_per_model_part`` with
  ``input_weight = output_weight = 1``).
* ``megatron``: the transformer blocks split evenly, the embedding with the first stage and the
  head with the last (:func:`megatron_boundaries`).
* ``parameters``: contiguous stages of balanced parameter counts (DeepSpeed
  ``PipelineModule(partition_method="parameters")``, its default; :func:`parameter_boundaries`).

Layer kinds come from the layer names of the analytic traces (``embedding``, ``block.i``,
``head``: :func:`sim.parallel.shard.layer_kind`); a trace without those names is all blocks.
"""

from __future__ import annotations

from collections.abc import Callable

from sim.errors import InputError
from sim.parallel.partition import uniform_partition
from sim.parallel.shard import layer_kind
from sim.trace.schema import Trace


def layer_boundaries(trace: Trace, stages: int) -> tuple[int, ...]:
    """Every layer counts once (module doc, ``layers``).

    Raises:
        InputError: more stages than layers.
    """
    return tuple(uniform_partition(len(trace.layers), stages))


def megatron_boundaries(trace: Trace, stages: int) -> tuple[int, ...]:
    """The transformer blocks split evenly over ``stages`` (the first ``B mod stages`` take one
    more), the leading embedding layers with the first stage, the trailing head layers with
    the last.

    Megatron-LM ``megatron/core/transformer/transformer_block.py::get_num_layers_to_build``
    (``num_layers // pipeline_model_parallel_size`` blocks per stage; the embedding where
    ``pre_process``, the output layer where ``post_process``); Megatron-DeepSpeed
    ``megatron/model/gpt_model.py::GPTModelPipe`` (``partition_method="type:transformer"``:
    DeepSpeed ``runtime/pipe/module.py::_partition_layers`` balances the transformer layers
    only, ``runtime/utils.py::partition_balanced`` filling the first stages first).

    Raises:
        InputError: more stages than blocks.

    Example:
        GPT with 24 blocks on 4 stages: ``embedding + 6 | 6 | 6 | 6 + head``, where
        ``layers`` gives ``embedding + 6 | 7 | 6 | 5 + head``.
    """
    kinds = [layer_kind(x.name) for x in trace.layers]
    lead = next((i for i, k in enumerate(kinds) if k != "embedding"), len(kinds))
    trail = next((i for i, k in enumerate(reversed(kinds)) if k != "head"), len(kinds))
    blocks = len(kinds) - trail - lead
    if stages > blocks:
        raise InputError(
            f"{stages} stages but trace {trace.name} has {blocks} transformer blocks "
            "(Megatron's placement gives every stage at least one)",
            field="options.partition",
        )
    size, extra = divmod(blocks, stages)
    return (0, *(lead + j * size + min(j, extra) for j in range(1, stages)))


def parameter_boundaries(trace: Trace, stages: int) -> tuple[int, ...]:
    """Contiguous stages whose largest parameter count is as small as possible, filled first
    stage first (DeepSpeed ``runtime/utils.py::partition_balanced`` over the layers'
    parameter counts: a binary search of the bottleneck, then a greedy fill).

    Raises:
        InputError: more stages than layers.
    """
    weights = [x.param_bytes for x in trace.layers]
    if stages > len(weights):
        return layer_boundaries(trace, stages)  # raises the usual error
    lo, hi = max(max(weights), sum(weights) / stages), float(sum(weights))
    while hi - lo > 1e-6 * hi:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if _greedy(weights, stages, mid) else (mid, hi)
    starts = _greedy(weights, stages, hi)
    assert starts is not None
    return starts


def _greedy(weights: list[float], stages: int, cap: float) -> tuple[int, ...] | None:
    """Stage starts filling each stage up to ``cap`` (a layer opens the next stage when it
    would overflow the current one, or when every remaining layer must open one); None when
    ``stages`` stages cannot hold them under ``cap``."""
    starts, total, n = [0], 0.0, len(weights)
    for i, w in enumerate(weights):
        if i > starts[-1] and (total + w > cap or n - i == stages - len(starts)):
            if len(starts) == stages:
                return None
            starts.append(i)
            total = 0.0
        total += w
        if total > cap:
            return None
    return tuple(starts) if len(starts) == stages else None


PLACEMENTS: dict[str, Callable[[Trace, int], tuple[int, ...]]] = {
    "layers": layer_boundaries,
    "megatron": megatron_boundaries,
    "parameters": parameter_boundaries,
}
"""Placement rule name -> its boundaries function."""
