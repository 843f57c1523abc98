"""torchtitan (pytorch/torchtitan@b5bcd76): FSDP2 data parallelism with torch pipelining.

With ``dp_shard > 1`` (torchtitan's ``data_parallel_shard_degree``) parameters, gradients and
optimizer state are sharded by ``fully_shard`` per transformer block, the token embedding and
``[norm, output]`` (:mod:`sim.memory.fsdp`: bf16 all-gathers, fp32 reduce-scatters, fp32
shards; reshard after forward except the output unit, never with PP), replicated over
``dp_width / dp_shard`` (HSDP); with ``dp_shard = 1`` and several replicas, DDP
(``apply_ddp``: ``replicate(model, bucket_cap_mb=100)``). torch's pipeline schedules; the
embedding and the output layer counted as one layer each by the even split; the global gradient
norm all-reduced over the pipeline before the update.
"""

from __future__ import annotations

from typing import ClassVar

from sim.framework.base import Framework, Setting
from sim.framework.pytorch_ddp import TORCH_SCHEDULES
from sim.memory.fsdp import FsdpSpec

_PP = "torchtitan/distributed/pipeline_parallel.py"
_FSDP = "torchtitan/distributed/fsdp.py"


class Torchtitan(Framework):
    """torchtitan's training loop (module doc)."""

    name: ClassVar[str] = "torchtitan"
    description: ClassVar[str] = (
        "torchtitan: FSDP2 per block (sharded state, reduce-scatter overlapped), torch pipelining"
    )
    schedules = Setting(TORCH_SCHEDULES, f"{_PP}::build_pipeline_schedule (get_schedule_class)")
    dp_bucket_bytes = Setting(
        100 * 2**20,
        "torchtitan/models/llama3/infra/parallelize.py::apply_ddp (replicate(model, "
        "bucket_cap_mb=100), with dp_shard 1; FSDP's per-unit reduce-scatters: sim.memory.fsdp)",
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
        False,
        "torchtitan shards states only by FSDP (dp_shard; data_parallel_shard_degree, "
        "torchtitan/config/configs.py), replicates them with DDP otherwise",
    )
    fsdp = Setting(
        FsdpSpec(
            param_bytes=2,
            reduce_bytes=4,
            fp32_shards=True,
            reshard_after_forward=True,
            reshard_with_pp=False,
            head_reshard=False,
            accumulate_with_pp=True,
        ),
        f"{_FSDP}::apply_fsdp_to_decoder (MixedPrecisionPolicy(param_dtype=bf16, "
        "reduce_dtype=fp32), training.dtype float32: torchtitan/config/configs.py; "
        "fsdp_reshard_after_forward 'default': True per block, False with PP, [norm, output] "
        "False); torch/distributed/pipelining/stage.py (no gradient sync nor resharding per "
        "micro-batch, reduce-scatter at REDUCE_GRAD)",
    )
