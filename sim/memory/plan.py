"""What a memory policy decides for one stage: a :class:`StagePlan` the engine executes.

The engine knows nothing about policies; it only executes plans: bytes kept per micro-batch,
bytes swapped out after a forward and back in before the backward (over real links),
recompute time placed before the backward, static model-state bytes on the GPU and on the
host, and transfers done at the optimizer step.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Transfer:
    """A copy done at a fixed point of the program: ``nbytes`` from node ``src`` to ``dst``."""

    src: str
    dst: str
    nbytes: float
    label: str = ""


@dataclass(frozen=True)
class StagePlan:
    """A stage's memory plan, per micro-batch and per optimizer step.

    Attributes:
        act_bytes: activation bytes one micro-batch would stash with no policy.
        resident_act_bytes: bytes of the stash that stay on the GPU between F and B.
        swap_bytes: bytes copied to ``swap_target`` after F and back before B.
        swap_target: node that holds swapped bytes (``cpu0`` or ``gpu5``); None if no swap.
        recompute_s: seconds of recompute placed on the compute stream before each B.
        weight_bytes: GPU bytes of weights (all versions).
        grad_bytes: GPU bytes of gradient buffers.
        optimizer_bytes: GPU bytes of optimizer state.
        host_bytes: bytes of model state parked in host DRAM for this stage.
        optimizer_s: seconds of the optimizer step on the GPU compute stream.
        host_optimizer_s: seconds of the optimizer step on the host CPU.
        step_transfers_before: copies done at the step before the host optimizer runs.
        step_transfers_after: copies done at the step after it.
        fetch_bytes: bytes fetched to the GPU before each F and each B (chunks on demand).
        fetch_source: node fetched from.
        notes: what the policy chose and why (shown to the user).
    """

    act_bytes: float
    resident_act_bytes: float
    swap_bytes: float = 0.0
    swap_target: str | None = None
    recompute_s: float = 0.0
    weight_bytes: float = 0.0
    grad_bytes: float = 0.0
    optimizer_bytes: float = 0.0
    host_bytes: float = 0.0
    optimizer_s: float = 0.0
    host_optimizer_s: float = 0.0
    step_transfers_before: tuple[Transfer, ...] = ()
    step_transfers_after: tuple[Transfer, ...] = ()
    fetch_bytes: float = 0.0
    fetch_source: str | None = None
    notes: dict = field(default_factory=dict)

    @property
    def recompute_bytes(self) -> float:
        """Bytes dropped after F and rebuilt by recompute before B."""
        return max(0.0, self.act_bytes - self.resident_act_bytes - self.swap_bytes)

    @property
    def static_gpu_bytes(self) -> float:
        return self.weight_bytes + self.grad_bytes + self.optimizer_bytes
