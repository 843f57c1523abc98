"""Model-state bytes per parameter by training regime (memory.md §1).

Mixed precision (fp16/bf16) with Adam is ZeRO's accounting: 2 (16-bit weight) + 2 (16-bit
gradient) + 12 (fp32 master weight, Adam m, Adam v) = 16 bytes per parameter
(Rajbhandari et al., arXiv:1910.02054). fp32 Adam: 4 + 4 + 8 (m, v) = 16. SGD with momentum:
the fp32 master (for 16-bit training) plus one momentum buffer (``sgd_momentum``) or none
(``sgd``, plain SGD as the torch replay runs it).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.trace.schema import dtype_bytes


@dataclass(frozen=True)
class StateBytes:
    """Bytes per parameter of each model-state class.

    Attributes:
        weight: one copy of the training-dtype weights.
        grad: the gradient buffer.
        optimizer: optimizer state (master weights and moments).
    """

    weight: int
    grad: int
    optimizer: int

    @property
    def total(self) -> int:
        return self.weight + self.grad + self.optimizer


def state_bytes(dtype: str, optimizer: str) -> StateBytes:
    """Bytes per parameter for ``dtype`` (fp16, bf16, fp32) and ``optimizer`` (adam, sgd,
    sgd_momentum).

    Raises:
        ValueError: unknown dtype or optimizer.
    """
    w = dtype_bytes(dtype)
    master = 4 if w < 4 else 0
    if optimizer == "adam":
        return StateBytes(weight=w, grad=w, optimizer=master + 8)
    if optimizer == "sgd_momentum":
        return StateBytes(weight=w, grad=w, optimizer=master + 4)
    if optimizer == "sgd":
        return StateBytes(weight=w, grad=w, optimizer=master)
    raise ValueError(f"unknown optimizer {optimizer!r}; use adam, sgd or sgd_momentum")


def optimizer_step_s(params: float, hbm_bandwidth_Bps: float, sb: StateBytes) -> float:
    """Time of a memory-bound optimizer update of ``params`` parameters on a GPU, in seconds.

    The update reads the gradient and the optimizer state and writes the state and the weight:
    ``params * (grad + 2 * optimizer + weight) / hbm_bandwidth_Bps``. A fused Adam kernel is
    bandwidth-bound, so this is a lower bound that real kernels approach for large tensors.
    """
    return params * (sb.grad + 2 * sb.optimizer + sb.weight) / hbm_bandwidth_Bps
