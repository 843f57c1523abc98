"""How a training framework lays out a rank's memory around the model: :class:`FrameworkMemory`.

The same model states cost different bytes per parameter in different frameworks, and the
frameworks keep buffers of their own. A framework profile (:mod:`sim.framework`) builds one
:class:`FrameworkMemory` for a point (:meth:`sim.framework.base.Framework.memory`); the stage
contexts carry it, so the plans, the engine's ledger, the planner's bounds and ``sim memory``
count the same bytes:

* **gradient buffer dtype** (``main_grads_fp32``): Megatron-Core keeps an fp32 ``main_grad``
  for 16-bit parameters when gradients accumulate in fp32 (``--bf16`` sets
  ``accumulate_allreduce_grads_in_fp32`` unless ``--grad-reduce-in-bf16``:
  ``megatron/training/arguments.py`` ``validate_args``; ``grad_dtype = torch.float if
  grad_reduce_in_fp32``, ``megatron/core/distributed/param_and_grad_buffer.py``), 4 bytes per
  parameter where ZeRO's accounting has 2 (:func:`sim.memory.states.state_bytes`);
* **fp32 gradient copy** (``hp_grad_bytes``): DeepSpeed's ``BF16_Optimizer`` keeps an fp32
  gradient buffer beside the bf16 ``.grad`` of every parameter (:mod:`sim.framework.
  deepspeed_bf16`): 2 + 4 bytes of gradients per parameter;
* **bucket copy** (``bucket_copy``): ``torch.nn.parallel.DistributedDataParallel`` (default
  ``gradient_as_bucket_view=False``) copies the gradients it reduces into flat buckets, one more
  copy of the GPU gradients with data parallelism; Megatron's contiguous gradient buffer *is*
  the bucket (``_ParamAndGradBuffer``: each ``param.main_grad`` is a view into ``grad_data``),
  so nothing is added;
* **flat reduce buckets** (``reduce_bucket_bytes``): DeepSpeed's pipeline engine flattens the
  gradients it reduces into one bucket at a time and frees it after copying it back
  (:mod:`sim.memory.flat_reduce`): no copy of the whole gradient, one bucket of at most this
  many bytes (plus the tensor that crosses it) after the backward;
* **step transient** (``step_transient``): GPU bytes a mixed-precision optimizer step allocates
  per gradient byte and frees after it (DeepSpeed's ``FP16_Optimizer``: 4; Megatron's with
  16-bit ``main_grad``: 2), the step moment of :mod:`sim.memory.step_moment`;
* **stage outputs** (``deallocate_outputs``): Megatron pseudo-deallocates a stage's output
  once it is sent (``deallocate_output_tensor``, ``megatron/core/pipeline_parallel/
  schedules.py``; ``deallocate_pipeline_outputs = True`` in ``megatron/training/
  argument_utils.py``), where torch's pipelining keeps it until the backward
  (:func:`sim.memory.reserve.output_cache_bytes`);
* **TE's dummy weight gradients** (``dummy_wgrads``): with gradient-accumulation fusion a
  Transformer Engine linear layer (and Megatron's own ``ColumnParallelLinear`` when TE is
  installed) returns a cached tensor of the weight's shape as its weight gradient, one per
  distinct ``(shape, dtype)`` for the life of the process (``get_dummy_wgrad``,
  ``transformer_engine/pytorch/module/base.py``; ``megatron/core/tensor_parallel/layers.py``
  ``LinearWithGradAccumulationAndAsyncCommunication.backward``): :func:`dummy_wgrad_bytes`;
* **workspaces** (``workspace_bytes``): GEMM workspaces allocated through PyTorch's allocator
  (TE's cuBLAS workspace, ``get_cublas_workspace``: 32 MiB + 1 KiB on compute capability 9 and
  later, 4 MiB before, ``transformer_engine/pytorch/cpp_extensions/gemm.py``); PyTorch's own
  cuBLAS workspaces, two of ``CUBLAS_WORKSPACE_CONFIG``'s size (``cublas_workspace_config``;
  :mod:`sim.memory.cublas_workspace`), are counted beside them;
* **layer transients** (``work``: :class:`~sim.memory.layer_work.WorkOptions`): the loss
  implementation and gradient-accumulation fusion;
* **allocator** (``allocator``): PyTorch's caching allocator options
  (:class:`~sim.memory.allocator.AllocatorConfig`).

The defaults are pipesim's torch runtime (what ``sim validate`` replays): ZeRO's bytes per
parameter, DDP's bucket copy, outputs kept, no TE.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from sim.memory.allocator import AllocatorConfig
from sim.memory.layer_work import LayerWork, WorkOptions
from sim.memory.states import StateBytes, state_bytes

MIB = 1 << 20

TE_WORKSPACE_BYTES = {"hopper+": 32 * MIB + 1024, "pre-hopper": 4 * MIB}
"""TE's cuBLAS workspace (``get_cublas_workspace_size_bytes``: 32 MiB + 1 KiB "for NVFP4 GEMM,
plus additional 1024 B for alignment and misc scales" on compute capability >= 9, else 4 MiB;
NVIDIA/TransformerEngine@d0067d0 ``transformer_engine/pytorch/cpp_extensions/gemm.py``)."""

TE_GROUPED_GEMM_STREAMS = 4
"""TE's grouped GEMM (``GroupedLinear``, Megatron's ``--moe-grouped-gemm`` experts) allocates
one more workspace per compute stream (``get_cublas_workspace(..., grouped_gemm=True)`` loops
over ``tex.get_num_cublas_streams()``, ``cpp_extensions/gemm.py`` 48-66;
``num_compute_streams = 4``, ``transformer_engine/common/util/multi_stream.cpp`` 53,
NVIDIA/TransformerEngine@d0067d0)."""


@dataclass(frozen=True)
class FrameworkMemory:
    """A framework's memory layout around the model (module doc).

    Attributes:
        main_grads_fp32: gradients accumulate in an fp32 buffer for 16-bit parameters.
        bucket_copy: DDP copies the gradients into flat buckets (with data parallelism).
        deallocate_outputs: a stage's output is freed once sent.
        dummy_wgrads: one weight-gradient buffer per distinct GEMM weight shape.
        workspace_bytes: GEMM workspaces allocated through PyTorch.
        cublas_workspace_config: ``CUBLAS_WORKSPACE_CONFIG`` of the run (``":4096:8"``):
            the size of each of PyTorch's cuBLAS workspaces; None: the GPU's default
            (:mod:`sim.memory.cublas_workspace`).
        work: how its layers run (:class:`~sim.memory.layer_work.WorkOptions`).
        allocator: the caching allocator's options.
        weight_copy_bytes: bytes per parameter of further weight copies the framework keeps
            beside the training-dtype weights (Transformer Engine's FP8 weight cache: the
            precision profiles set it; 0: none), counted as weights.
        adam_state_bytes: bytes per parameter of Adam's master weight and moments where the
            framework sets their dtypes (Megatron's precision-aware optimizer:
            :func:`sim.memory.precision_aware.adam_state_bytes`); None: ZeRO's 12 (or 8).
        decoupled_grad: the optimizer takes the 16-bit gradient as it is (no fp32 copy of the
            gradient shard at the step: the precision-aware optimizer's ``decoupled_grad``).
        hp_grad_bytes: bytes per parameter of a gradient copy kept beside the 16-bit ``.grad``
            (DeepSpeed's ``BF16_Optimizer``: 4, fp32; :mod:`sim.framework.deepspeed_bf16`),
            counted as gradients; 0: none.
        reduce_bucket_bytes: the gradient reduction after the backward flattens the gradients
            into buckets of this many bytes, one at a time, freed after the copy back
            (DeepSpeed's ``allreduce_no_retain``, :mod:`sim.memory.flat_reduce`), instead of
            DDP's copy of the whole gradient (``bucket_copy``); 0: none.
        step_transient: GPU bytes the optimizer step allocates per GPU gradient byte while
            it runs, freed after it (fp32 gradient copies: :mod:`sim.memory.step_moment`;
            :meth:`sim.framework.base.Framework.step_transient_per_byte`); 0: none.
    """

    main_grads_fp32: bool = False
    bucket_copy: bool = True
    deallocate_outputs: bool = False
    dummy_wgrads: bool = False
    workspace_bytes: float = 0.0
    cublas_workspace_config: str | None = None
    work: WorkOptions = field(default_factory=WorkOptions)
    allocator: AllocatorConfig = field(default_factory=AllocatorConfig)
    weight_copy_bytes: int = 0
    adam_state_bytes: int | None = None
    decoupled_grad: bool = False
    hp_grad_bytes: int = 0
    reduce_bucket_bytes: float = 0.0
    step_transient: float = 0.0

    def state(self, dtype: str, optimizer: str) -> StateBytes:
        """Bytes per parameter of each model-state class: ZeRO's accounting
        (:func:`~sim.memory.states.state_bytes`) with the gradient in fp32 where
        ``main_grads_fp32`` (Megatron's 2 + 4 + 12 = 18 for bf16 Adam), the weights'
        further copies (``weight_copy_bytes``) and Adam's state in the dtypes the framework
        sets (``adam_state_bytes``: 2 + 2 + 6 = 10 for the precision-aware optimizer with bf16
        gradients and moments), and a gradient copy beside 16-bit gradients
        (``hp_grad_bytes``: DeepSpeed's bf16 2 + 4 = 6).

        Raises:
            ValueError: unknown dtype or optimizer.
        """
        sb = state_bytes(dtype, optimizer)
        if self.main_grads_fp32 and sb.grad < 4:
            sb = replace(sb, grad=4)
        elif self.hp_grad_bytes and sb.grad < 4:
            sb = replace(sb, grad=sb.grad + self.hp_grad_bytes)
        if self.weight_copy_bytes:
            sb = replace(sb, weight=sb.weight + self.weight_copy_bytes)
        if self.adam_state_bytes is not None and optimizer == "adam":
            sb = replace(sb, optimizer=self.adam_state_bytes)
        return sb


PIPESIM_MEMORY = FrameworkMemory()
"""pipesim's torch runtime (module doc)."""


def dummy_wgrad_bytes(works: Iterable[LayerWork], elem_bytes: int) -> float:
    """Bytes of TE's dummy weight gradients on a rank: one ``elem_bytes`` buffer per distinct
    weight shape of ``works`` (the rank's layers, every stage chunk it runs).

    Example:
        >>> w = LayerWork(weights=((4, 8), (8, 4)))
        >>> dummy_wgrad_bytes([w, w, LayerWork(weights=((16, 8),))], 2)
        384.0
    """
    shapes = {s for w in works for s in w.weights}
    return float(sum(r * c for r, c in shapes) * elem_bytes)
