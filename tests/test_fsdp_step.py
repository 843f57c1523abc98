"""The optimizer step's bytes under Megatron-FSDP (sim.memory.fsdp_step): a hand-computed case.

1,000 parameters (one block, bf16 trace: 2,000 bytes) sharded over 4 ranks, Adam, GPUs whose
memory-bound kernels run at 1e9 B/s (no compute model: the peak). Each rank steps 250 shard
parameters. The fused update moves ``g + 2 x 12 + 2`` bytes each; Megatron-FSDP also casts the
bf16 gradient shard to fp32 (2 + 4), lets Adam read that 4-byte gradient (+2), reads it for
the norm (4), reads the fp32 main weight for the copy into the bf16 weight shard (4) and
zeroes the bf16 shard twice (2 x 2): 20 bytes more. torchtitan's FSDP2 adds nothing.
"""

from __future__ import annotations

import pytest
from helpers import chain_topology

from sim.config import parse_experiment
from sim.memory.fsdp_step import FsdpStepWork
from sim.point.config import PointConfig
from sim.point.simulate import resolve
from sim.trace.schema import LayerProfile, Trace

HBM_BPS = 1e9


def _plan(framework: str, memory: dict | None = None):
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
        model="t", schedule="1f1b", stages=1, dp_width=4, dp_shard=4, microbatch_size=1,
        microbatches=1, memory_policy="none", global_batch=4, framework=framework,
    )  # fmt: skip
    topo = chain_topology(4, memory_bytes=1e12, hbm_Bps=HBM_BPS)
    trace = Trace("t", (LayerProfile("block.0", 1.0, 2.0, 2000.0, 0.0, 0.0),), 1, "bf16", "test")
    return resolve(exp, point, topo, trace).sim_input.plans[0][0]


def test_megatron_fsdp_step_bytes_per_shard_parameter():
    # bf16 gradients (grad_reduce_in_bf16): 250 x (2 + 24 + 2 + 20) = 12,000 B at 1e9 B/s.
    plan = _plan("megatron-lm", {"grad_reduce_in_bf16": True})
    assert plan.grad_bytes == pytest.approx(250 * 2)
    assert plan.optimizer_s == pytest.approx(250 * (28 + 20) / HBM_BPS)
    # fp32 gradients: no cast; norm 4, master 4, zeroing 2 x 4: 250 x (4 + 24 + 2 + 16).
    plan = _plan("megatron-lm")
    assert plan.optimizer_s == pytest.approx(250 * (30 + 16) / HBM_BPS)


def test_torchtitan_fsdp2_step_is_the_fused_update():
    # fp32 shards (4, 4, 8): 250 x (4 + 2 x 8 + 4) = 6,000 B, unchanged.
    assert _plan("torchtitan").optimizer_s == pytest.approx(250 * 24 / HBM_BPS)


def test_step_work_counts():
    w = FsdpStepWork(grad_cast=True, norm_reads=1, master_reads=1, zero_passes=2)
    assert w.bytes_per_param(2) == 6 + 2 + 4 + 4 + 4
    assert FsdpStepWork().bytes_per_param(2) == 0
    with pytest.raises(ValueError):
        FsdpStepWork(zero_passes=-1)
