"""torchtitan (pytorch/torchtitan): FSDP2 data parallelism with torch pipelining.

Parameters, gradients and optimizer state sharded over the data-parallel replicas by
``fully_shard`` per transformer block, gradients reduce-scattered per block while the last
backward runs; torch's pipeline schedules; the embedding and the output layer counted as one
layer each by the even split; the global gradient norm all-reduced over the pipeline before the
update.
"""

from __future__ import annotations

from typing import ClassVar

from sim.framework.base import Framework, Setting
from sim.framework.pytorch_ddp import TORCH_SCHEDULES
from sim.parallel.shard import layer_kind
from sim.trace.schema import Trace

_PP = "torchtitan/distributed/pipeline_parallel.py"


class Torchtitan(Framework):
    """torchtitan's training loop (module doc)."""

    name: ClassVar[str] = "torchtitan"
    description: ClassVar[str] = (
        "torchtitan: FSDP2 per block (sharded state, reduce-scatter overlapped), torch pipelining"
    )
    schedules = Setting(TORCH_SCHEDULES, f"{_PP}::build_pipeline_schedule (get_schedule_class)")
    dp_bucket_bytes = Setting(
        "one transformer block",
        "torchtitan/models/llama3/infra/parallelize.py::apply_fsdp (fully_shard per block: one "
        "reduce-scatter per block as its backward ends)",
    )
    tied_embedding = Setting(
        False, "torchtitan/models/llama3/model/model.py: tok_embeddings and output are separate"
    )
    placement = Setting(
        "layers",
        f"{_PP}::generate_llm_fqn_per_model_part (input_weight = output_weight = 1: embedding "
        "and output count as one layer each)",
    )
    fewer_microbatches = Setting(
        False, "torch/distributed/pipelining/schedules.py::Schedule1F1B (m < p raises)"
    )
    blocking_p2p = Setting(False, "torch/distributed/pipelining/schedules.py (isend/irecv)")
    step_barrier = Setting(
        "before_update",
        "torchtitan/distributed/utils.py::clip_grad_norm_ (total norm all-reduced over the "
        "pipeline mesh before optimizer.step)",
    )
    low_precision_library = Setting(
        "torchao",
        "torchtitan/components/quantization/float8.py::Float8LinearConverter (torchao.float8, "
        "recipes rowwise and rowwise_with_gw_hp) and mx.py (torchao MXFP8)",
    )
    distributed_optimizer = Setting(
        True,
        "torchtitan/models/llama3/infra/parallelize.py::apply_fsdp (fully_shard; "
        "data_parallel_shard_degree = -1 by default)",
    )

    def bucket_bytes(self, trace: Trace) -> float:
        """One FSDP unit's gradients: the largest transformer block's parameter bytes."""
        blocks = [x.param_bytes for x in trace.layers if layer_kind(x.name) == "block"]
        return max(blocks or [x.param_bytes for x in trace.layers])
