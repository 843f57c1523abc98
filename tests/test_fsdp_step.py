"""The optimizer step's bytes under Megatron-FSDP (sim.memory.fsdp_step): a hand-computed case.

1,000 parameters (one block, bf16 trace: 2,000 bytes) sharded over 4 ranks, Adam, GPUs whose
memory-bound kernels run at 1e9 B/s (no compute model: the peak). Each rank steps 250 shard
parameters. The fused update moves ``g + 2 x 12 + 2`` bytes each; Megatron-FSDP also casts the
bf16 gradient shard to fp32 (2 + 4), lets Adam read that 4-byte gradient (+2), reads it for
the norm (4), reads the fp32 main weight for the copy into the bf16 weight shard (4) and
zeroes the bf16 shard twice (2 x 2): 20 bytes more. torchtitan's FSDP2 keeps fp32 shards
(4, 4, 8: the fused update's 4 + 2 x 8 + 4 = 24 B) and adds its gradient clipping (foreach
norm: read 4; foreach multiply: read 4, write 4) and fused AdamW's read of the fp32 weight (4):
16 bytes more, 250 x 40 = 10,000 B per rank. With dp_shard 1 (fully_shard over one rank, or
DDP) each rank steps all 1,000 parameters: the same fused AdamW (28 B, pipesim's bf16 layout
2 + 2 x 12 + 2, or FSDP's fp32 24 + the weight's read 4) and clipping (12 B): 40,000 B. With torchtitan's ``implementation = "foreach"`` AdamW runs eight passes
(mul_ p 8, lerp_ m g 12, mul_ v 8, addcmul_ v g 12, sqrt 8, div_ 8, add_ 8, addcdiv_ p m d 16:
80 B instead of 28).

Megatron-FSDP's gradient shard is in the parameters' dtype (bf16: 250 x 2 B) unless
``megatron_fsdp_main_grads_dtype fp32`` (250 x 4 B), whatever ``grad_reduce_in_fp32``; the
bf16 shard's fp32 copy for the optimizer (250 x 4 B) is held over the step; the
reduce-scatter moves the shard's dtype unless ``megatron_fsdp_grad_comm_dtype``.
"""

from __future__ import annotations

import pytest
from helpers import chain_topology

from sim.config import parse_experiment
from sim.framework.torch_adamw import adamw_extra_bytes
from sim.memory.fsdp_step import FsdpStepWork
from sim.memory.step_moment import step_transient_bytes
from sim.point.config import PointConfig
from sim.point.simulate import resolve
from sim.trace.schema import LayerProfile, Trace

HBM_BPS = 1e9


def _plan(framework: str, memory: dict | None = None, shard: int = 4, options: dict | None = None):
    if options:  # the framework[option=value] form (sim.framework.options)
        framework += "[" + ",".join(f"{k}={v}" for k, v in options.items()) + "]"
    exp = parse_experiment(
        {
            "name": "x",
            "hardware": "dgx1-v100-16gb",
            "models": [{"name": "t", "trace": "t"}],
            "training": {"global_batch": 4, "optimizer_step": True},
            "options": {"partition": "uniform"},
            "memory": memory or {},
            "framework": framework,
        }
    )
    point = PointConfig(
        model="t", schedule="1f1b", stages=1, dp_width=4, dp_shard=shard, microbatch_size=1,
        microbatches=1, memory_policy="none", global_batch=4, framework=framework,
    )  # fmt: skip
    topo = chain_topology(4, memory_bytes=1e12, hbm_Bps=HBM_BPS)
    trace = Trace("t", (LayerProfile("block.0", 1.0, 2.0, 2000.0, 0.0, 0.0),), 1, "bf16", "test")
    inp = resolve(exp, point, topo, trace).sim_input
    return inp.plans[0][0], inp.runtime.step_transient


FP32_GRADS = "megatron-lm[megatron_fsdp_main_grads_dtype=fp32]"


def test_megatron_fsdp_step_bytes_per_shard_parameter():
    # bf16 gradients (the default): 250 x (2 + 24 + 2 + 20) = 12,000 B at 1e9 B/s.
    plan = _plan("megatron-lm")[0]
    assert plan.grad_bytes == pytest.approx(250 * 2)
    assert plan.optimizer_s == pytest.approx(250 * (28 + 20) / HBM_BPS)
    # fp32 gradients: no cast; norm 4, master 4, zeroing 2 x 4: 250 x (4 + 24 + 2 + 16).
    plan = _plan(FP32_GRADS)[0]
    assert plan.optimizer_s == pytest.approx(250 * (30 + 16) / HBM_BPS)


def test_megatron_fsdp_gradient_dtype_is_its_own():
    # --bf16 alone: a 250 x 2 B shard, its 250 x 4 B fp32 copy held over the step, the
    # reduce-scatter in bf16 (2 B per element); grad_reduce_in_bf16 changes nothing.
    for memory in (None, {"grad_reduce_in_bf16": True}):
        plan, step_transient = _plan("megatron-lm", memory)
        assert plan.grad_bytes == pytest.approx(250 * 2)
        assert step_transient_bytes(step_transient, plan) == pytest.approx(250 * 4)
        assert plan.fsdp is not None and plan.fsdp.reduce_bytes == 2
    # megatron_fsdp_main_grads_dtype fp32: a 250 x 4 B shard, no copy, reduced in fp32.
    plan, step_transient = _plan(FP32_GRADS)
    assert plan.grad_bytes == pytest.approx(250 * 4)
    assert step_transient_bytes(step_transient, plan) == 0
    assert plan.fsdp is not None and plan.fsdp.reduce_bytes == 4
    # megatron_fsdp_grad_comm_dtype fp32 reduces a bf16 shard in fp32.
    plan, _ = _plan("megatron-lm[megatron_fsdp_grad_comm_dtype=fp32]")
    assert plan.grad_bytes == pytest.approx(250 * 2) and plan.fsdp.reduce_bytes == 4


def test_torchtitan_fsdp2_step_bytes_per_shard_parameter():
    # fused AdamW: read p, g, m, v (4 x 4) and write p, m, v (3 x 4) = 28; clip: norm read 4,
    # multiply read + write 8: 40 B x 250 shard parameters = 10,000 B at 1e9 B/s = 10 us.
    plan = _plan("torchtitan")[0]
    assert plan.grad_bytes == pytest.approx(250 * 4)
    assert plan.optimizer_s == pytest.approx(10_000 / HBM_BPS)


def test_torchtitan_unsharded_step_bytes_per_parameter():
    ddp = _plan("torchtitan", shard=1, options={"data_parallel": "ddp"})[0]
    assert not ddp.dp_sharded and ddp.fsdp is None
    assert ddp.optimizer_s == pytest.approx(1000 * (28 + 12) / HBM_BPS)
    plan = _plan("torchtitan", shard=1)[0]  # fully_shard over one rank: 24 + 16 B
    assert plan.fsdp is not None and plan.optimizer_s == pytest.approx(ddp.optimizer_s)


def test_torchtitan_foreach_adamw_passes():
    opts = {"optimizer_implementation": "foreach"}
    foreach = 8 + 12 + 8 + 12 + 8 + 8 + 8 + 16
    plan = _plan("torchtitan", options=opts)[0]  # FSDP: the update and the clipping's 12
    assert plan.optimizer_s == pytest.approx(250 * (foreach + 12) / HBM_BPS)
    plan = _plan("torchtitan", shard=1, options=opts)[0]
    assert plan.optimizer_s == pytest.approx(1000 * (foreach + 12) / HBM_BPS)


def test_step_work_counts():
    w = FsdpStepWork(grad_cast=True, norm_reads=1, master_reads=1, zero_passes=2)
    assert w.bytes_per_param(2) == 6 + 2 + 4 + 4 + 4
    assert FsdpStepWork().bytes_per_param(2) == 0
    assert FsdpStepWork(clip_passes=1).bytes_per_param(4) == 2 * 4
    with pytest.raises(ValueError):
        FsdpStepWork(zero_passes=-1)


def test_adamw_implementations():
    # foreach and for-loop run the same eight passes: 80 - 28 = 52 B beyond the fused kernel.
    assert adamw_extra_bytes("for-loop") == adamw_extra_bytes("foreach") == 52
    with pytest.raises(ValueError, match="fused"):
        adamw_extra_bytes("apex")
