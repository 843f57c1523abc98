"""DeepSpeed's bf16 pipelines as the BF16_Optimizer runs them (sim.framework.deepspeed_bf16,
microsoft/DeepSpeed@f5dde36 deepspeed/runtime/bf16_optimizer.py): one hand-computed case per
mechanism, each against fp16's FP16_Optimizer where the two differ."""

from __future__ import annotations

from dataclasses import replace

import pytest
from helpers import chain_topology, uniform_input

from sim.config import parse_experiment
from sim.engine import simulate
from sim.engine.inputs import PipelineRuntime
from sim.engine.stage_cost import StageCost
from sim.framework import get_framework
from sim.hardware.gpu_compute import ComputeSpec
from sim.hardware.loader import load_hardware
from sim.memory.plan import StagePlan
from sim.memory.states import StateBytes
from sim.plan.bounds import BoundModel
from sim.plan.sweep import expand
from sim.point.experiment import prepare
from sim.point.simulate import evaluate, resolve
from sim.trace.generator import transformer_trace
from sim.trace.schema import LayerProfile

P = 1e9  # parameters of one stage
DGX = load_hardware("dgx-a100-40gb")


def _plan(state: StateBytes) -> StagePlan:
    """A stage of P parameters whose fused update the policy timed at 1e10 B/s."""
    fused = state.grad + 2 * state.optimizer + state.weight
    return StagePlan(
        act_bytes=0.0, resident_act_bytes=0.0, weight_bytes=P * state.weight,
        grad_bytes=P * state.grad, optimizer_bytes=P * state.optimizer,
        optimizer_s=P * fused / 1e10,
    )  # fmt: skip


@pytest.mark.parametrize("name", ["deepspeed", "megatron-deepspeed"])
def test_bf16_keeps_fp32_gradients_beside_the_bf16_ones(name):
    """bf16 Adam: 2 (weight) + 2 (bf16 .grad) + 4 (fp32_groups_gradients_flat) + 12 bytes per
    parameter, +4P of gradients over fp16's 2 + 2 + 12 (bf16_optimizer.py l.123-124)."""
    fw = get_framework(name)
    bf16 = fw.memory("bf16", "A100").state("bf16", "adam")
    fp16 = fw.memory("fp16", "A100").state("fp16", "adam")
    assert (bf16.weight, bf16.grad, bf16.optimizer) == (2, 6, 12)
    assert (fp16.weight, fp16.grad, fp16.optimizer) == (2, 2, 12)
    assert P * bf16.grad - P * fp16.grad == 4 * P
    # the flat fp32 group is its own reduction bucket: no copy of the gradients into buckets
    assert not fw.memory("bf16", "A100").bucket_copy and fw.memory("fp16", "A100").bucket_copy


def test_bf16_all_reduces_two_bytes_per_parameter_and_partitions_the_state():
    """w = 4: the all-reduce moves the bf16 cast of the fp32 buffer, 2P (engine.py l.783-794,
    l.2215-2238; fp16: its 2-byte .grad, 2P too); the master and moments are the replica's
    partition, 12P/4 (bf16_optimizer.py l.109-118, l.153), then the parameters are
    all-gathered. Step: (4 + 24 + 2 + 4) / 4 per parameter for the partition's update and copy,
    8 (norm, zero) + 12 + 4 (casts, 1/w) over the whole buffer: 32.5 B at 1e10 B/s."""
    fw = get_framework("deepspeed")
    mem = fw.memory("bf16", "A100")
    sb = mem.state("bf16", "adam")
    (q,) = fw.plans([_plan(sb)], 4, sb, mem)
    assert q.dp_grad_bytes == 2 * P and q.step_gather and not q.dp_sharded
    assert q.grad_bytes == 6 * P and q.optimizer_bytes == 3 * P
    assert q.optimizer_s == pytest.approx(P * 32.5 / 1e10)
    m16 = fw.memory("fp16", "A100")
    s16 = m16.state("fp16", "adam")
    (r,) = fw.plans([_plan(s16)], 4, s16, m16)
    assert r.dp_grad_bytes is None and r.grad_bytes == 2 * P and r.optimizer_bytes == 12 * P
    assert not r.step_gather


def test_engine_all_reduces_then_all_gathers_after_the_step():
    """w = 2 on a 1 GB/s chain, a plan of 6 GB of gradients reducing 2 GB: the all-reduce
    2(w-1)/w x 2 GB / 1 GB/s = 2 s before the 1 s step, the all-gather (w-1)/w x 2 GB = 1 s
    after it; no all-gather without step_gather."""
    plan = StagePlan(act_bytes=0.0, resident_act_bytes=0.0, grad_bytes=6e9, dp_grad_bytes=2e9,
                     optimizer_bytes=1.0, optimizer_s=1.0, step_gather=True)  # fmt: skip
    topo = chain_topology(2, bandwidth_Bps=1e9)
    inp = uniform_input("gpipe", 1, 1, w=2, topology=topo, plan=plan)
    log = simulate(replace(inp, dp_bucket_bytes=0.0, runtime=PipelineRuntime()))
    mine = [e for e in log.events if e.replica == 0]
    (ar,) = [e for e in mine if e.kind == "allreduce"]
    (step,) = [e for e in mine if e.kind == "optimizer"]
    (ag,) = [e for e in mine if e.kind == "all_gather"]
    assert ar.duration_s == pytest.approx(2.0) and ag.duration_s == pytest.approx(1.0)
    assert ar.end_s <= step.start_s + 1e-9 and ag.start_s >= step.end_s - 1e-9
    off = uniform_input("gpipe", 1, 1, w=2, topology=topo, plan=replace(plan, step_gather=False))
    assert not [e for e in simulate(replace(off, dp_bucket_bytes=0.0)).events
                if e.kind == "all_gather"]  # fmt: skip


def test_hp_grad_update_after_every_backward():
    """update_hp_grads (bf16_optimizer.py l.273-290): per tensor a cast (2 + 4 B) and an add
    (4 + 4 + 4 B), 18 B per parameter. A stage of 3 tensors and 1 MB of bf16 parameters
    (5e5 of them) on 1 GB/s with 10 us per kernel: 6 x 10 us + 9 MB / 1 GB/s = 9.06 ms on every
    backward, its 6 ops on the first layer; fp16 (megatron-deepspeed) charges its AccumulateGrad
    add only after the first micro-batch instead (bwd_accumulate), bf16 none."""
    spec = ComputeSpec("x", 1e12, 1e12, 1e9, 100, 0.8, 0.6, hbm_efficiency=1.0,
                       kernel_overhead_s=1e-5)  # fmt: skip
    layer = LayerProfile("block.0", 1.0, 2.0, 1e6, 0.0, 0.0)
    cost = StageCost(1.0, 2.0, 0.0, 0.0, bwd_layers=((2.0, 10.0, 0.0),), param_tensors=(1, 2))
    trace = transformer_trace(
        "gpt", name="g", layers=1, hidden=64, heads=4, seq_len=32, vocab=128,
        microbatch_size=1, gpu=DGX.gpus[0].compute,
    )  # fmt: skip
    for name in ("deepspeed", "megatron-deepspeed"):
        fw = get_framework(name)
        got = fw.stage_device_work(cost, ["block"], (layer,), replace(trace, dtype="bf16"), 1, spec)
        assert got.bwd_s == pytest.approx(2.0 + 9.06e-3)
        assert got.bwd_layers[0][1] == 16.0 and got.bwd_accumulate == ()
    fp16 = get_framework("megatron-deepspeed").stage_device_work(
        cost, ["block"], (layer,), replace(trace, dtype="fp16"), 1, spec
    )
    assert fp16.bwd_s == 2.0 and sum(fp16.bwd_accumulate) > 0


def test_bf16_step_runs_no_fp16_overflow_check_but_a_norm_read_per_tensor():
    """bf16: get_global_norm_of_tensors' norm and .item() per tensor (utils.py l.875): 1 op and
    a read, no flat fp32 copy at the step, the reduction one bucket (the flat group buffer);
    fp16: FP16_Optimizer's 2-op overflow check, its 4 B per gradient byte and 5e8 x 2 B
    buckets."""
    trace = transformer_trace(
        "gpt", name="g", layers=1, hidden=64, heads=4, seq_len=32, vocab=128,
        microbatch_size=1, gpu=DGX.gpus[0].compute,
    )  # fmt: skip
    fw = get_framework("deepspeed")
    bf = fw.runtime(DGX, replace(trace, dtype="bf16"), memory=fw.memory("bf16", "A100"))
    fp = fw.runtime(DGX, replace(trace, dtype="fp16"), memory=fw.memory("fp16", "A100"))
    assert (bf.overflow_check_ops, bf.step_transient, bf.dp_serial_bucket_bytes) == (1, 0.0, 0.0)
    assert (fp.overflow_check_ops, fp.step_transient, fp.dp_serial_bucket_bytes) == (2, 4.0, 1e9)


def test_planner_memory_bound_holds_with_the_partitioned_state():
    """The planner's memory lower bound takes the BF16_Optimizer's state 1/w (sim.plan.bounds)
    and stays under the simulated peak; without that the whole 12 B/param state of p = 2, w = 4
    (GPT-2 1.5B, 0.8e9 parameters per stage: 9.8 GB where the replica keeps 2.5 GB) would be
    counted."""
    exp = parse_experiment({
        "name": "ds-bf16", "hardware": "dgx-a100-80gb", "framework": "deepspeed",
        "models": [{"name": "gpt", "trace": "gpt2-1.5b", "global_batch": 16}],
        "training": {"optimizer": "adam", "dtype": "bf16"},
        "sweep": {"schedule": ["1f1b"], "stages": [2], "dp_width": [1, 4],
                  "microbatch_size": [1], "memory_policy": ["none"]},
    }, file="<test>")  # fmt: skip
    prep = prepare(exp, "<test>")
    for point in expand(prep)[0]:
        bound = BoundModel(prep).bounds(point).memory_bytes
        met, _ = evaluate(resolve(prep.exp, point, prep.topology, prep.traces[point.model]))
        peak = max(v for k, v in met.peak_by_device.items() if k.startswith("gpu"))
        assert bound <= peak * (1 + 1e-12), (point.dp_width, bound, peak)
