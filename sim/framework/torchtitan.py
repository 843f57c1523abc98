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
from sim.framework.options import Option
from sim.framework.pytorch_ddp import TORCH_SCHEDULES
from sim.parallel.shard import layer_kind
from sim.parallel.tp_overlap import ASYNC_TP, Implementation
from sim.trace.schema import Trace

_PP = "torchtitan/distributed/pipeline_parallel.py"
_COMPILE = "torchtitan/config/configs.py::CompileConfig; torchtitan/distributed/compile.py"


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
    distributed_optimizer = Setting(
        True,
        "torchtitan/models/llama3/infra/parallelize.py::apply_fsdp (fully_shard; "
        "data_parallel_shard_degree = -1 by default)",
    )

    def bucket_bytes(self, trace: Trace, replicas: int = 1) -> float:
        """One FSDP unit's gradients: the largest transformer block's parameter bytes."""
        blocks = [x.param_bytes for x in trace.layers if layer_kind(x.name) == "block"]
        return max(blocks or [x.param_bytes for x in trace.layers])

    OPTIONS = (
        Option(
            "compile",
            False,
            (False, True),
            f"{_COMPILE} (enable=False; each TransformerBlock compiled, fullgraph)",
            "torch.compile of each block: what async TP needs; its kernel fusion and host "
            "work are not modelled (the block's kernels and ops as eager)",
        ),
        Option(
            "enable_async_tensor_parallel",
            False,
            (False, True),
            f"{_COMPILE} (needs compile; symmetric memory and _micro_pipeline_tp); torch "
            "_inductor/fx_passes/micro_pipeline_tp.py",
            "tensor-parallel all-gathers and reduce-scatters fused with their matmuls in t "
            "chunks, copies on the copy engines",
        ),
    )

    def check_options(self) -> None:
        """torchtitan refuses async TP without compile (``compile.py``).

        Raises:
            ValueError: ``enable_async_tensor_parallel`` without ``compile``."""
        if self.values["enable_async_tensor_parallel"] and not self.values["compile"]:
            raise ValueError(
                "option enable_async_tensor_parallel needs compile (torchtitan "
                "distributed/compile.py: async TP is an Inductor pass)"
            )

    def tp_overlap(self, tensor_parallel: int, sequence_parallel: bool) -> Implementation | None:
        """torch's AsyncTP with ``enable_async_tensor_parallel`` (and ``t > 1`` with sequence
        parallelism: torchtitan's tensor-parallel plan always shards the norms' sequence)."""
        if (
            self.values["enable_async_tensor_parallel"]
            and tensor_parallel > 1
            and sequence_parallel
        ):
            return ASYNC_TP
        return None
