"""The optimizer step's memory passes as Megatron-Core runs them (sim.framework.step_work)."""

from __future__ import annotations

import pytest

from sim.framework.registry import get_framework
from sim.hardware.loader import load_hardware
from sim.memory.plan import StagePlan
from sim.memory.states import StateBytes

BF16_FP32_MAIN = StateBytes(weight=2, grad=4, optimizer=12)
"""bf16 weights, fp32 main gradients, Adam (fp32 master weights and two moments)."""


def _plan(params: float, owned: float, rate_Bps: float, sharded: bool) -> StagePlan:
    fused = 4 + 2 * 12 + 2  # the fused update: grad + 2 x optimizer + weight bytes
    return StagePlan(
        act_bytes=0.0, resident_act_bytes=0.0, weight_bytes=2 * params, grad_bytes=4 * params,
        optimizer_bytes=12 * owned, optimizer_s=fused * owned / rate_Bps, dp_sharded=sharded,
    )  # fmt: skip


@pytest.mark.parametrize("w", [1, 4])
def test_megatron_step_adds_the_gradient_buffer_passes_and_the_shard_extras(w):
    # 1e9 parameters on the rank, the distributed optimizer's shard 1e9 / w of them, 1e12 B/s.
    # Megatron-LM@23e00ed: zero_grad_buffer (write 4 B) and check_grads' norm (read 4 B) over
    # the whole fp32 buffer, with w > 1 its scaling by 1/w (4 + 4 B); on the shard the grad
    # norm (4 B) and the fp32 read of the copy to the bf16 weights (4 B) beside the fused 30 B.
    params, rate = 1e9, 1e12
    owned = params / w
    plan = _plan(params, owned, rate, sharded=w > 1)
    out = get_framework("megatron-lm").plans([plan], w, BF16_FP32_MAIN)[0]
    passes = 2 + (2 if w > 1 else 0)
    expected = (owned * (30 + 8) + passes * 4 * params) / rate
    assert out.optimizer_s == pytest.approx(expected)


def test_frameworks_without_the_passes_keep_their_step():
    plan = _plan(1e9, 2.5e8, 1e12, sharded=True)
    for name in ("pipesim", "megatron-deepspeed", "megatron-lm-torch-ddp"):
        out = get_framework(name).plans([plan], 4, BF16_FP32_MAIN)[0]
        assert out.optimizer_s == plan.optimizer_s


def test_the_step_runs_at_the_achieved_hbm_rate_of_memory_bound_kernels():
    # B200: 8 TB/s peak x hbm_efficiency 0.666 (the preset's memory-bound kernels' fraction)
    gpu = load_hardware("dgx-b200").gpus[0]
    assert gpu.memory_bound_Bps == pytest.approx(8e12 * 0.666)
    assert gpu.memory_bound_Bps == gpu.compute.hbm_rate_Bps()
