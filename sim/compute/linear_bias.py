"""The QKV projection's bias as its own kernel: ``F.linear`` on a 3-D input before PyTorch 1.12.

Megatron-LM's 2021 GPT layer (NVIDIA/Megatron-LM@6985e58938, the commit of
``examples/sc21/``) builds its QKV projection as ``mpu.ColumnParallelLinear`` without
``skip_bias_add`` (``megatron/model/transformer.py`` l.140-146; the MLP's and the output
projections set ``skip_bias_add=True`` and add their biases in the fused bias-GeLU and
bias-dropout-add, l.64-84, 179-184), and ``ColumnParallelLinear.forward`` calls
``F.linear(input_parallel, self.weight, bias)`` on the ``[s, b, h]`` activations
(``megatron/mpu/layers.py`` l.283-284). PyTorch's ``F.linear`` takes the fused ``addmm`` (bias
in the GEMM) only for a 2-D input; for any other it runs ``input.matmul(weight.t())`` and then
``output += bias`` (pytorch/pytorch#39661, "F.linear goes down to addmm for 2d tensors and to
matmul + add_ for other cases", 2020-06); the N-D input took the ``addmm`` path with
pytorch/pytorch#74070 (2022-03, "Linear bias fusion for ND input", which addresses #39661;
its thread places it in PyTorch 1.12, a reading of the thread, not a release note). The SC'21
runs used NGC PyTorch 20.12 (``examples/sc21/SRUN.sh``: ``nvcr.io#nvidia/pytorch:20.12-py3``;
the README of the same commit: PyTorch 1.8, CUDA 11.1, NCCL 2.8.3), so every QKV projection
there is a GEMM followed by an in-place broadcast add that reads and writes the GEMM's output:
``2 * T * n * d`` bytes for ``T`` tokens, ``n`` output columns on the rank, ``d`` bytes per
element. The backward is the same either way (the bias gradient is a sum of the output
gradient over the tokens on both paths), so only the forward (and its recompute) changes.
"""

from __future__ import annotations

from sim.compute.kernels import Kernel, mem

LINEAR_BIAS = ("fused", "unfused")
"""How a biased ``F.linear`` on a 3-D input adds its bias: ``fused`` (in the GEMM, PyTorch >= 1.12,
and pipesim's default: no kernel) or ``unfused`` (a separate ``add_``, PyTorch < 1.12)."""


def check_linear_bias(value: str) -> None:
    """Raises:
    ValueError: ``value`` not in :data:`LINEAR_BIAS`."""
    if value not in LINEAR_BIAS:
        raise ValueError(f"linear_bias must be one of {LINEAR_BIAS}, got {value!r}")


def qkv_bias_add(tokens: int, out_features: int, elem_bytes: int) -> Kernel:
    """The unfused bias add after the QKV GEMM (module doc): reads and writes the
    ``[tokens, out_features]`` output, ``2 * tokens * out_features * elem_bytes`` bytes.

    Example (the SC'21 1.7B model: 16 x 2048 tokens, ``3h = 6912`` columns, fp16):
        >>> qkv_bias_add(32768, 6912, 2).bytes
        905969664.0

    Raises:
        ValueError: a non-positive size.
    """
    if min(tokens, out_features, elem_bytes) < 1:
        raise ValueError(
            f"tokens, out_features and elem_bytes must be >= 1, got {tokens}, {out_features}, "
            f"{elem_bytes}"
        )
    return mem("qkv_bias_add", 2.0 * tokens * out_features * elem_bytes)
