"""Megatron-LM's host work around the model (issue 26 item 7): its step's loops and reads
(sim.engine.step_host, sim.framework.megatron_host), the loss read after each last-stage
forward, its logging flags as options, and the Grace host of GB200. Hand-computed cases."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim.engine import simulate
from sim.engine.step_host import StepHost, shard_tensors, step_host_s
from sim.framework.megatron_host import (
    COUNT_ZEROS,
    GRAD_CHECK,
    LOSS_READS,
    OPTIMIZER_STEP,
    PARAMS_NORM,
    RERUN_CHECK,
    STEP_TAIL,
    TRAINING_LOG,
    megatron_step_host,
)
from sim.framework.registry import get_framework
from sim.hardware.host_ops import NO_HOST, HostOverhead
from sim.hardware.loader import load_hardware
from sim.runs.megatron_host_flags import read_host_options
from sim.trace.generator import transformer_trace
from tests.helpers import uniform_input

HOST = HostOverhead(op_s=0.25, backward_op_s=0.0625, nograd_op_s=0.125, read_s=0.0625)


def _one_stage(**runtime):
    # p = 1, m = 2, GPipe; F 1 s and B 2 s of device time, 8 ops each; optimizer kernel 0.5 s;
    # two vectors and one matrix. Without host work at the step the backward ends at 8.125 (the
    # forwards host-bound: 8 x 0.25 s) and the iteration at 8.625.
    inp = uniform_input("gpipe", 1, 2, optimizer_s=0.5)
    cost = replace(inp.costs[0], fwd_ops=8.0, bwd_ops=8.0, param_tensors=(2, 1))
    return replace(inp, costs=(cost,), host=HOST, runtime=replace(inp.runtime, **runtime))


def test_step_host_closed_form():
    # h = nograd_op_s = 0.125. Dense: 3 + 2 x 10 + 1 x 4 + 4 x 10 (per dense tensor) + 1
    # reduction = 68 ops; + 1 x 0.5 s all-reduce + 2 x 0.0625 reads. Sharded: the 3 per
    # sharded optimizer tensor replace the 4 per dense tensor: 3 + 20 + 4 + 12 + 1 = 40 ops.
    w = StepHost(ops=3, per_tensor=2, per_optimizer_tensor=1, per_sharded_tensor=3,
                 per_dense_tensor=4, reads=2, reductions=1)  # fmt: skip
    assert step_host_s(HOST, w, 10, 4.0, False, 0.5) == pytest.approx(0.125 * 68 + 0.5 + 0.125)
    assert step_host_s(HOST, w, 10, 4.0, True, 0.5) == pytest.approx(0.125 * 40 + 0.5 + 0.125)
    # no host model (the presets without one): nothing; nothing issued: nothing
    assert step_host_s(NO_HOST, w, 10, 4.0, True, 0.5) == 0.0
    assert step_host_s(HOST, StepHost(), 10, 4.0, True, 0.5) == 0.0
    with pytest.raises(ValueError, match="reads"):
        StepHost(reads=-1)


def test_a_sharded_optimizer_steps_its_shard_of_the_tensors():
    # Megatron's DistributedOptimizer: contiguous ranges of the flat buffer, one straddling
    # tensor per boundary: T / w + 1, at most T.
    assert shard_tensors(148, 8) == pytest.approx(19.5)
    assert shard_tensors(3, 8) == pytest.approx(1.375)
    assert shard_tensors(10, 1) == 10.0


def test_step_host_blocks_the_device_after_the_update():
    # 2 ops + 1 per optimizer tensor (3 tensors, not sharded) at 0.125 s and one read at
    # 0.0625 s: 5 x 0.125 + 0.0625 = 0.6875 s after the kernel [8.125, 8.625]; one GPU, so no
    # reduction time.
    log = simulate(_one_stage(step_host=StepHost(ops=2, per_optimizer_tensor=1, reads=1)))
    spans = [(e.kind, e.name, e.start_s, e.end_s) for e in log.events]
    assert ("optimizer", "0STEP0", 8.125, 8.625) in spans
    assert ("host_wait", "host step 0", 8.625, 9.3125) in spans
    assert log.iteration_ends_s == [9.3125]
    assert simulate(_one_stage()).iteration_ends_s == [8.625]


def test_loss_reads_block_the_host_after_each_last_stage_forward():
    # Each read: its op (0.125) and the copy (0.0625), after the host has waited for the
    # forward: 2 reads = 0.375 s. F0 ends 2.125 (host 2) -> host 2.5. F1: max(2.125 + 1,
    # 2.5 + 2.125) = 4.625 -> host 5.0. Backward K = max(0.5 + 0.25, 2 + 0.0625) = 2.0625:
    # B0 max(6.625, 5.0 + 2.0625) = 7.0625, B1 9.0625; step 9.5625 (without: 8.625).
    log = simulate(_one_stage(loss_reads=2))
    spans = [(e.kind, e.name, e.start_s, e.end_s) for e in log.events]
    assert ("compute", "0F1", 3.625, 4.625) in spans
    assert ("compute", "0B0", 5.0625, 7.0625) in spans
    assert log.iteration_ends_s == [9.5625]


def test_megatron_step_host_counts_from_its_code():
    # Default (bf16, clip on, log every 100 iterations): the step, its tail, a hundredth of a
    # log.
    d = megatron_step_host({}, fp16=False)
    assert d.ops == pytest.approx(OPTIMIZER_STEP.ops + STEP_TAIL.ops + TRAINING_LOG.ops / 100)
    assert (d.per_optimizer_tensor, d.per_sharded_tensor, d.per_dense_tensor) == (1, 6, 1)
    assert d.reads == pytest.approx(6 + 6 / 100) and d.reductions == pytest.approx(4 + 2 / 100)
    # The functional tests' flags: zeros counted (4 ops per optimizer tensor), the params'
    # norm, a log every iteration.
    t = megatron_step_host(
        {"log_interval": 1, "log_num_zeros_in_grad": True, "log_params_norm": True}, False
    )
    assert t.per_optimizer_tensor == 1 + 4
    # the norm reads each parameter's fp32 master, no copy per tensor (_get_param_data): the
    # one op per dense tensor is the optimizer's gradient copy alone
    assert t.per_dense_tensor == 1 and PARAMS_NORM.per_dense_tensor == 0
    assert t.reads == 6 + COUNT_ZEROS.reads + PARAMS_NORM.reads + TRAINING_LOG.reads == 19
    assert t.reductions == 3 + 1 + 2 + 6 + 2 == 14
    # fp16 adds the loss scaler's found-inf check
    assert megatron_step_host({}, fp16=True).reads == pytest.approx(d.reads + 1)
    with pytest.raises(ValueError, match="log_interval"):
        megatron_step_host({"log_interval": 0}, False)


def test_the_megatron_profile_sets_its_host_work():
    topo = load_hardware("dgx-a100-80gb")
    trace = transformer_trace("gpt", name="tiny", microbatch_size=1, layers=2, hidden=64,
                              heads=2, seq_len=32, vocab=128, dtype="bf16", gpu=topo.gpus[0].compute)  # fmt: skip
    rt = get_framework("megatron-lm[log_interval=1,log_params_norm]").runtime(topo, trace)
    assert rt.loss_reads == LOSS_READS == 2
    # + the re-run flag's two reads and one bucket's NaN and Inf reads (validate_results and
    # the NaN check are Megatron's defaults)
    assert rt.step_host.reads == 6 + PARAMS_NORM.reads + TRAINING_LOG.reads + 2 + 2
    off = get_framework("megatron-lm[check_for_nan_in_loss=false]").runtime(topo, trace)
    assert off.loss_reads == 0
    # the SC'21 profile (Megatron-LM 2021) had no NaN check of the loss
    assert get_framework("megatron-lm-torch-ddp").runtime(topo, trace).loss_reads == 0


def test_logging_flags_become_options():
    flags = {"log-interval": "1", "log-params-norm": True, "log-num-zeros-in-grad": True,
             "tensorboard-dir": "/tb", "no-check-for-nan-in-loss-and-grad": True}  # fmt: skip
    options, notes = read_host_options(flags)
    assert options == {"log_interval": "1", "log_params_norm": "true",
                       "log_num_zeros_in_grad": "true", "tensorboard": "true",
                       "check_for_nan_in_loss": "false"}  # fmt: skip
    assert {n[1] for n in notes} == {"mapped"}
    # Megatron's defaults write no option
    options, notes = read_host_options({"log-interval": 100})
    assert options == {} and notes[0][1] == "ignored"


def test_grace_host_scales_each_kind_by_its_own_published_ratio():
    # Python around the ops: pytorch/pytorch#187862, OpOverload.__call__'s Python overhead
    # 126.1 ns on GB200 against 111.1 ns on H100. C++ below Python: NVIDIA/TransformerEngine#2053,
    # torch.nn.Linear forward 37.08 us on GB200 against 13.48 us on an H100 DGX (Xeon 8480C),
    # less its 2 us module call (pytorch/pytorch#50431) at the Python ratio and less its one
    # GEMM launch, 3.0 us on both (meta-pytorch/tritonbench#1017, measured on GB200; the x86
    # presets assume it): (37.08 - 2.27 - 3.0) / (13.48 - 2.0 - 3.0) = 3.75.
    py = 126.1 / 111.1
    launch = 3.0e-6
    cxx = (37.08 - 2.0 * py - 3.0) / (13.48 - 2.0 - 3.0)
    assert cxx == pytest.approx(3.751, abs=1e-3)
    grace, x86 = _host("gb200-nvl72"), _host("dgx-h100")
    for name in ("module_s", "function_s", "function_backward_s"):
        assert getattr(grace, name) == pytest.approx(getattr(x86, name) * py, rel=0.01), name
    # each op's C++ work (the x86 figure less its launch) at the C++ ratio, its launch at
    # GB200's own 3.0 us, not 3.0 x 3.03 = 9.1 us as until 2026-11-30: op (9.8 - 3) x 3.751 + 3
    # = 28.5, nograd_op (8 - 3) x 3.751 + 3 = 21.8, backward_op (13.9 - 3) x 3.751 + 3 = 43.9
    for name, us in (("op_s", 28.5), ("nograd_op_s", 21.8), ("backward_op_s", 43.9)):
        scaled = (getattr(x86, name) - launch) * cxx + launch
        assert getattr(grace, name) == pytest.approx(scaled, rel=0.005), name
        assert getattr(grace, name) == pytest.approx(us * 1e-6, abs=0.05e-6), name
    # the preset gives back the Linear forward it is built from: a module call and one op whose
    # C++ work is the x86 host's (13.48 - 2 - 3 us) at the C++ ratio, plus its launch
    cxx_op = (grace.op_s - launch) / (x86.op_s - launch)
    linear = grace.module_s + (13.48e-6 - x86.module_s - launch) * cxx_op + launch
    assert linear == pytest.approx(37.08e-6, rel=0.01)
    # no Grace figure of their own: the whole Linear forward's ratio
    assert grace.checkpoint_s == pytest.approx(x86.checkpoint_s * 37.08 / 13.48, rel=0.01)
    assert grace.read_s == pytest.approx(10e-6 * 37.08 / 13.48, rel=0.01)
    assert _host("nvl72x2-gb200") == grace
    assert replace(_host("gb300-nvl72"), source=grace.source) == grace


def test_grace_kernel_launch_is_the_gb200_measurement_not_scaled():
    # meta-pytorch/tritonbench#1017 timed cuLaunchKernel (through ctypes, handles prepared) on
    # GB200 itself: 3.0 us with 0 arguments. A figure of the Grace host, so not multiplied by
    # the Grace/x86 C++ ratio (3.75, which would give 11.3 us); the x86 presets assume the same
    # 3.0 us as their launch share of the eager op (3 of dgx-h100's 9.8 us).
    for name in ("gb200-nvl72", "gb300-nvl72"):
        assert _host(name).kernel_launch_s == pytest.approx(3.0e-6), name
    assert _host("dgx-h100").kernel_launch_s == pytest.approx(3.0e-6)


def _host(name: str) -> HostOverhead:
    topo = load_hardware(name)
    return topo.host(topo.gpu(0).host).overhead


def test_result_validation_adds_its_reads_and_the_world_reduction():
    # Megatron-Core's re-run state machine (validate_results, the default): after each
    # forward-backward _reduce_any builds the flag on the GPU (a read), all-reduces it over the
    # world and reads it (.item()); _save_state reads two RNG states (2 ops). Each gradient
    # bucket's check_grads: norm, isnan, isinf (3 ops) and two reads; one bucket per chunk.
    assert (RERUN_CHECK.ops, RERUN_CHECK.reads, RERUN_CHECK.reductions) == (2, 2, 1)
    assert (GRAD_CHECK.ops, GRAD_CHECK.reads, GRAD_CHECK.reductions) == (3, 2, 0)
    # priced: h = 0.125 s per op (the reduction's call is one), a 0.5 s all-reduce, reads
    # 0.0625 s: 0.125 x 3 + 0.5 + 2 x 0.0625 = 1.0 s; the bucket check 0.125 x 3 + 0.125 = 0.5
    assert step_host_s(HOST, RERUN_CHECK, 10, 4.0, False, 0.5) == pytest.approx(1.0)
    assert step_host_s(HOST, GRAD_CHECK, 10, 4.0, False, 0.5) == pytest.approx(0.5)
    base = megatron_step_host({}, False)
    on = megatron_step_host({"rerun_mode": "validate_results", "check_for_nan_in_loss": True},
                            False, chunks=3)  # fmt: skip
    assert on.reads - base.reads == pytest.approx(2 + 3 * 2)
    assert on.ops - base.ops == pytest.approx(2 + 3 * 3)
    assert on.reductions - base.reductions == pytest.approx(1)
    off = megatron_step_host({"rerun_mode": "disabled", "check_for_nan_in_loss": True}, False)
    assert off.reads - base.reads == pytest.approx(2) and off.reductions == base.reductions
    # --rerun-mode disabled reaches the profile; validate_results is its default
    options, notes = read_host_options({"rerun-mode": "disabled"})
    assert options == {"rerun_mode": "disabled"} and notes[0][1] == "mapped"
    assert read_host_options({"rerun-mode": "validate_results"})[0] == {}
    topo = load_hardware("dgx-a100-80gb")
    trace = transformer_trace("gpt", name="tiny", microbatch_size=1, layers=2, hidden=64,
                              heads=2, seq_len=32, vocab=128, dtype="bf16", gpu=topo.gpus[0].compute)  # fmt: skip
    default = get_framework("megatron-lm").runtime(topo, trace)
    two_chunks = get_framework("megatron-lm").runtime(topo, trace, virtual_stages=2)
    disabled = get_framework("megatron-lm[rerun_mode=disabled]").runtime(topo, trace)
    assert two_chunks.step_host.reads - default.step_host.reads == pytest.approx(2)
    assert default.step_host.reductions - disabled.step_host.reductions == pytest.approx(1)
    with pytest.raises(KeyError, match="rerun_mode"):  # re-runs every step: not modelled
        get_framework("megatron-lm[rerun_mode=report_stats]")
