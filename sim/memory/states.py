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

    @property
    def update_bytes(self) -> int:
        """Bytes per parameter a fused update moves (:func:`optimizer_step_s`): the gradient
        read, the optimizer state read and written, the weight written."""
        return self.grad + 2 * self.optimizer + self.weight


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
    bandwidth-bound: the memory policies pass the GPU's achieved rate of memory-bound kernels
    (:attr:`~sim.hardware.parts.GPU.memory_bound_Bps`, the preset's ``hbm_efficiency`` of
    the peak, as the kernel model times norms and element-wise kernels), not the datasheet peak.
    """
    return params * sb.update_bytes / hbm_bandwidth_Bps


def stretched_step_s(step_s: float, sb: StateBytes, extra_bytes: float) -> float:
    """Seconds of a fused update that took ``step_s`` (:func:`optimizer_step_s` of ``sb``)
    when the step also moves ``extra_bytes`` per parameter at the same rate:
    ``step_s x (update + extra) / update`` (what a framework's step moves besides the fused
    kernel: :func:`sim.framework.step_work.step_time_s`, :mod:`sim.memory.fsdp_step`).

    Example: a bf16 Adam update (28 B per parameter) of 1 ms that moves 14 B more: 1.5 ms.

    >>> stretched_step_s(1e-3, StateBytes(weight=2, grad=2, optimizer=12), 14.0)
    0.0015
    """
    return step_s * (sb.update_bytes + extra_bytes) / sb.update_bytes


def measured_step_s(
    tensors: float, param_bytes: float, per_tensor_s: float, bandwidth_Bps: float
) -> float:
    """Time of an optimizer update measured on the device by ``sim calibrate``
    (backends.torch.calibrate.runtime_costs.step_cost): ``tensors * per_tensor_s + param_bytes /
    bandwidth_Bps``, seconds. An optimizer that walks its parameters one by one (the replay's
    plain SGD, ``torch.optim`` on CPU) pays a fixed cost per tensor (the Python loop, each op's
    dispatch) beside the bytes it moves, which on a CPU rank dominates for small models.

    Example:
        >>> round(measured_step_s(50, 4e6, 5e-6, 4e9) * 1e6)  # 250 us + 1000 us
        1250
    """
    return tensors * per_tensor_s + param_bytes / bandwidth_Bps


def version_bytes_per_param(master_copies: bool, sb: StateBytes) -> float:
    """Bytes per parameter of each weight version beyond the first, as the reference
    implementation holds it: an fp32 master copy (4 bytes) where the schedule keeps master
    copies (``Schedule.master_copy_versions``: PipeDream-2BW, schedules.md §2.4), else a copy of
    the training-dtype weights (PipeDream's weight stashing keeps a deque of ``state_dict`` s of
    the model, msr-fiddle/pipedream ``runtime/optimizer.py``; schedules.md §2.2)."""
    return 4.0 if master_copies else float(sb.weight)


def weight_bytes_per_param(
    sb: StateBytes, versions: int, version_bytes: float | None = None
) -> float:
    """Bytes per parameter of all weight versions: ``weight + (versions - 1) * version_bytes``
    (``version_bytes`` defaults to ``sb.weight``).

    Examples (memory.md §1, schedules.md §2): fp16 + Adam under 1F1B: 2 (+ 2 grad + 12
    optimizer = 16 per parameter); PipeDream-2BW: 2 + 4 (+ 14 = 20); PipeDream at stage ``s``
    of ``p``: ``2 * (p - s)``.
    """
    extra = sb.weight if version_bytes is None else version_bytes
    return sb.weight + (versions - 1) * extra


def stage_state_bytes_per_param(
    sb: StateBytes, versions: int, version_bytes: float | None = None
) -> float:
    """Model-state bytes per parameter of a stage: weights (all versions) + gradient +
    optimizer state."""
    return weight_bytes_per_param(sb, versions, version_bytes) + sb.grad + sb.optimizer
