"""PyTorch ``DistributedDataParallel`` with ``torch.distributed.pipelining``.

Data-parallel gradients in 25 MiB buckets all-reduced while the backward runs; torch's pipeline
schedules with asynchronous ``isend``/``irecv``; nothing ties parameters across stages; the
module split counts every layer once.
"""

from __future__ import annotations

from typing import ClassVar

from sim.engine.inputs import DDP_BUCKET_BYTES
from sim.framework.base import Framework, Setting

TORCH_SCHEDULES = frozenset(
    {
        "gpipe",
        "1f1b",
        "interleaved_1f1b",
        "looped_bfs",
        "interleaved_zero_bubble",
        "zbv_zero_bubble",
        "dualpipe_v",
    }
)
"""The pipesim schedules that torch 2.13 ``torch/distributed/pipelining/schedules.py`` has
(``get_schedule_class``: GPipe, 1F1B, Interleaved1F1B, LoopedBFS, InterleavedZeroBubble,
ZBVZeroBubble, DualPipeV)."""

_PIPELINING = "torch/distributed/pipelining/schedules.py"


class PytorchDDP(Framework):
    """torch DDP around torch pipelining (module doc)."""

    name: ClassVar[str] = "pytorch-ddp"
    description: ClassVar[str] = (
        "torch DistributedDataParallel (25 MiB buckets overlapped) with torch pipelining"
    )
    schedules = Setting(TORCH_SCHEDULES, f"{_PIPELINING}::get_schedule_class")
    dp_bucket_bytes = Setting(
        DDP_BUCKET_BYTES,
        "torch/nn/parallel/distributed.py::DistributedDataParallel(bucket_cap_mb=25): buckets "
        "all-reduced by autograd hooks as their gradients become ready in the backward",
    )
    tied_embedding = Setting(
        False,
        f"{_PIPELINING}: stages exchange only activations and gradients "
        "(_batch_p2p); no collective shares parameters between stages",
    )
    placement = Setting(
        "layers", "torch/distributed/pipelining/_IR.py::pipeline (split points chosen by the user)"
    )
    fewer_microbatches = Setting(
        False,
        f"{_PIPELINING}::PipelineScheduleSingle._validate / Schedule1F1B: "
        "n_microbatches < num_stages raises (schedules.md §5)",
    )
    blocking_p2p = Setting(
        False,
        f"{_PIPELINING}::Schedule1F1B._step_microbatches (isend; send works waited at the end)",
    )
