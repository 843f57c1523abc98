"""Megatron-LM run with ``--DDP-impl torch``, as the SC'21 paper's scripts ran its smaller models.

Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM", SC'21 (arXiv:2104.04473): ``examples/sc21/run_table_1.sh`` of NVIDIA/Megatron-LM
sets ``DDP=torch`` for the 1.7B to 18B models of Table 1 (``local`` from 39B on), so
``megatron/training.py::get_model`` wraps each model chunk in
``torch.nn.parallel.DistributedDataParallel`` over the data-parallel group: gradients reduced in
25 MiB buckets as the backward produces them, overlapped with it. Everything else is Megatron-LM
(:mod:`sim.framework.megatron_lm`): 1F1B, batched p2p with ``torch.cuda.synchronize()``, the
tied embedding all-reduce, the found-inf and grad-norm reductions before the update, its fp16
optimizer's passes over the gradients.
"""

from __future__ import annotations

from typing import ClassVar

from sim.engine.inputs import DDP_BUCKET_BYTES
from sim.framework.base import Setting
from sim.framework.megatron_lm import MegatronLM

SC21 = "NVIDIA/Megatron-LM examples/sc21/run_table_1.sh (DDP=torch for 1.7B-18B)"


class MegatronLMTorchDDP(MegatronLM):
    """Megatron-LM with torch DDP (module doc)."""

    name: ClassVar[str] = "megatron-lm-torch-ddp"
    description: ClassVar[str] = (
        "Megatron-LM with --DDP-impl torch (SC'21 Table 1 up to 18B): DP gradients in 25 MiB "
        "buckets overlapped with the backward; otherwise megatron-lm"
    )
    dp_bucket_bytes = Setting(
        DDP_BUCKET_BYTES,
        f"{SC21} -> megatron/training.py::get_model (torchDDP(model_module, device_ids=[i], "
        "process_group=mpu.get_data_parallel_group())); torch DistributedDataParallel's "
        "bucket_cap_mb=25 default",
    )
    reduce_extra_bytes = Setting(
        (0.0, 0.0),
        "assumption: torch DDP copies gradients into its buckets and divides them inside the "
        "overlapped reduction (torch/csrc/distributed/c10d/reducer.cpp), not after it",
    )
    main_grads_fp32 = Setting(
        False, f"{SC21}: fp16 training (--fp16), gradients in the parameters' dtype"
    )
    main_grad_step_bytes = Setting(None, f"{SC21}: fp16 gradients (step_extra_bytes)")
    grad_buffer_passes = Setting(
        (0.0, 0.0),
        "assumption: the 2021 torch DDP path had no gradient buffer of Megatron-Core's (no "
        "zero_grad_buffer, no check_grads before the reduction)",
    )
    bucket_copy = Setting(
        True,
        "torch/nn/parallel/distributed.py DistributedDataParallel "
        "(gradient_as_bucket_view=False copies gradients into its flat buckets)",
    )
    wgrad_fusion = Setting(
        False, "assumption: the 2021 scripts' torch DDP path has no gradient-accumulation fusion"
    )
    python_grad_hooks = Setting(
        False,
        "torch/nn/parallel/distributed.py: the Reducer's autograd hooks are C++ "
        "(torch/csrc/distributed/c10d/reducer.cpp), no Python call per parameter",
    )
    te_workspace = Setting(False, f"{SC21}: Megatron's own layers (before Transformer Engine)")
    mcore_layer_python = Setting(
        False, f"{SC21}: Megatron-LM's 2021 layers (megatron/model), before Megatron-Core"
    )

    OPTIONS = ()
    """The SC'21 scripts' Megatron-LM (2021) had none of Megatron-Core's overlap options."""
