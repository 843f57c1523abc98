"""The clamp of a clamped GLU expert (GPT-OSS) as the unfused kernels Megatron-Core runs.

GPT-OSS's experts clamp the GLU's two halves before the activation (Hugging Face
``GptOssExperts``: ``swiglu_limit`` 7.0; Megatron-Bridge's GPT-OSS bridge sets
``activation_func_clamp_value = 7.0``: NVIDIA-NeMo/Megatron-Bridge@f9b6319 ``models/gpt_oss/
gpt_oss_bridge.py`` line 83). Megatron-Core's fused activation does not clamp inside its fused
function: ``weighted_bias_quick_geglu_impl`` splits the ``[n, 2 f_e]`` output of the first
GEMM, clamps each half and concatenates them again as eager autograd ops before calling the
fused ``WeightedQuickGeGLUFunction`` (NVIDIA/Megatron-LM@d98e8a64
``megatron/core/fusions/fused_bias_geglu.py`` lines 424-432, unchanged since 2e29a5e1 "Add
quick geglu activation for gpt-oss [gpt-oss 4/5]", 2025-09-09; the ``torch.compile`` fuser
covers only the functions under ``@jit_fuser``). So, over the ``n x f_e`` elements of each
half (``d`` bytes each):

* forward: ``x_glu.clamp(max=c)`` and ``x_linear.clamp(-c, c)`` each read and write a half
  (``2 n f_e d`` each), ``torch.cat`` reads and writes both halves (``4 n f_e d``):
  three kernels, ``8 n f_e d`` bytes;
* backward: each clamp's backward (``clamp_backward``) builds a mask of its saved input and
  selects the gradient with it; the split's backward concatenates the two halves' gradients
  (``cat``'s backward is a pair of views). Counted with torch 2.13's dispatch mode (each ATen
  op a kernel moving its inputs and outputs, bool masks 1 byte): the upper-bounded half
  ``le`` (``1.5 n f_e d``) and ``where`` (``2.5``), the two-sided half ``ge``, ``le``,
  ``logical_and_`` (``1.5`` each) and ``where`` (``2.5``), the ``cat`` (``4``): seven
  kernels, ``15 n f_e d`` bytes;
* memory: each clamp keeps its input (a view of the first GEMM's output) and the fused function
  keeps the concatenated copy, so the layer keeps ``2 n f_e d`` more than the fused activation
  alone (:func:`kept_bytes`) unless ``moe_act`` recompute checkpoints the whole activation
  (checked on torch 2.13: ``ClampBackward1`` holds ``_saved_self``, whose storage is the GEMM
  output's; ``CatBackward0`` holds only its dimension).

The code is the same in the Megatron-Core of every Bridge release measured: the submodules of
NVIDIA-NeMo/Megatron-Bridge v0.2.0 (Megatron-LM@0d8e0714), v0.3.0 (@b0cc2706) and v0.4.1
(@d7288711) all have these lines.

**The offset's host-to-device copy.** After the clamp, the same function turns the GLU's
linear offset (GPT-OSS: ``glu_linear_offset = 1.0``, NVIDIA-NeMo/Megatron-Bridge v0.4.1
``models/gpt_oss/gpt_oss_bridge.py`` line 84; v0.2.0/v0.3.0 ``gpt_oss_provider.py`` line 80)
into a device tensor on every call: ``linear_offset = torch.tensor(linear_offset,
dtype=input.dtype, device=input.device)`` (``fused_bias_geglu.py`` line 434, the same line at
the three Bridge releases' Megatron-Core commits above and at d98e8a64, since 2e29a5e1).
``torch.tensor`` builds the value in a pageable CPU tensor and moves it with ``.to(device,
non_blocking=False)`` (pytorch/pytorch ``torch/csrc/utils/tensor_new.cpp``
``internal_new_from_data``); a blocking CPU-to-GPU copy is ``cudaMemcpyAsync`` followed by
``cudaStreamSynchronize`` on the current stream (``aten/src/ATen/native/cuda/Copy.cu``
``copy_kernel_cuda`` -> ``at::cuda::memcpy_and_sync``), and the CUDA runtime's own rule for a
copy from pageable memory is a stream sync before the copy (CUDA Runtime API, "API
synchronization behavior", Memcpy). So the host waits once per MoE layer's forward until the
device has run everything issued, up to the clamp: :func:`offset_copy`, a copy of no bytes
(one launch) that the engine treats as a host sync
(:data:`sim.compute.moe.HOST_SYNC_KERNELS`). Only the fused function does this
(``bias_activation_fusion``, which the GPT-OSS bridge sets: v0.4.1 ``gpt_oss_bridge.py``
line 73); the unfused ``glu`` of ``TEGroupedMLP`` adds the offset as a Python float
(``experts.py`` lines 998-1009), and Transformer Engine's fused grouped MLP runs no Python
activation. pipesim's clamped experts are GPT-OSS's quick-GeGLU ones (the only model with
:attr:`sim.compute.moe_shape.MoEShape.clamp`), so the copy goes with the clamp (an assumption for
any other clamped GLU: Megatron-Core's SwiGLU clamp makes no such copy).

The kernels are named ``expert_act_*`` so that ``moe_act`` recompute
(:mod:`sim.compute.recompute_modules`) re-runs them with the rest of the activation.
"""

from __future__ import annotations

from sim.compute.kernels import Kernel, mem

FWD_BYTES_PER_ELEMENT = (2, 2, 4)
"""Bytes per element of one half (times ``d``) of the forward's clamp, clamp, cat (module doc)."""
BWD_OPS = (
    ("glu_le", 1.5), ("glu_where", 2.5), ("linear_ge", 1.5), ("linear_le", 1.5),
    ("linear_and", 1.5), ("linear_where", 2.5), ("cat", 4.0),
)  # fmt: skip
"""The backward's kernels and their bytes per element of one half (times ``d``): the two clamp
backwards and the split's backward concatenation (module doc)."""


def clamp_fwd(n: int, fe: float, d: int, count: int = 1) -> list[Kernel]:
    """Forward kernels of the clamp for ``count`` experts of ``n`` rows each, ``fe`` the width
    of a GLU half (``f_e / etp``), ``d`` bytes per element (module doc).

    Example: 2 rows of half-width 3 in bf16 move ``(2 + 2 + 4) * 6 * 2 = 96`` bytes.
    """
    half = n * fe * d * count
    names = ("expert_act_clamp_glu", "expert_act_clamp_linear", "expert_act_clamp_cat")
    return [
        mem(f"{name}[{n}]", k * half) for name, k in zip(names, FWD_BYTES_PER_ELEMENT, strict=True)
    ]


def clamp_bwd(n: int, fe: float, d: int, count: int = 1) -> list[Kernel]:
    """Backward kernels of :func:`clamp_fwd` (module doc)."""
    half = n * fe * d * count
    return [mem(f"expert_act_clamp_{op}_bwd[{n}]", k * half) for op, k in BWD_OPS]


OFFSET_COPY = "expert_act_offset_h2d"
"""Name of the offset's host-to-device copy (module doc): an ``expert_act`` kernel, so that
``moe_act`` recompute re-runs it."""


def offset_copy() -> Kernel:
    """The offset's blocking host-to-device copy, one per forward call of the fused activation
    (module doc): no bytes worth timing (2 bytes), one launch."""
    return mem(OFFSET_COPY, 0.0)


def kept_bytes(rows: float, fe: float, d: int) -> float:
    """Bytes the clamp keeps for the backward beyond the fused activation's input: the
    concatenated copy, ``2 f_e`` per row (module doc)."""
    return 2.0 * rows * fe * d
