"""MXFP8 parameters all-gathered through the gradient buffer (Megatron-Core's
``reuse_grad_buf_for_mxfp8_param_ag``, :mod:`sim.memory.precision`), against per-tensor FP8,
which gathers its FP8 bytes."""

import pytest

from sim.compute.precision import get_recipe
from sim.compute.precision_rules import LowPrecision
from sim.hardware.loader import load_hardware
from sim.memory.plan import StagePlan
from sim.memory.precision import precision_plan
from sim.runs.megatron_args import read_megatron

B200 = load_hardware("dgx-b200").gpus[0].compute


def _plan(name: str) -> StagePlan:
    recipe = get_recipe(name)
    assert recipe is not None
    plan = StagePlan(0.0, 0.0, weight_bytes=2000.0, grad_bytes=2000.0, optimizer_s=1.0,
                     dp_sharded=True)  # fmt: skip
    return precision_plan(plan, 1000.0, LowPrecision(recipe, param_gather=True), B200, 4)


def test_mxfp8_gathers_bf16_through_the_gradient_buffer_and_quantizes_after():
    hbm = B200.hbm_rate_Bps()
    out = _plan("mxfp8")
    # 1,000 bf16 parameters of 2 B: the all-gather moves the bf16 buffer, not 1 + 1/32 B
    assert out.dp_gather_bytes == 2000.0
    # the fp32 shard's copy into the buffer (250 x (4 + 2) B) replaces the copy to the bf16
    # parameters, already in the step (optimizer_s = 1.0): added, the quantize and the zeroing
    quantize = 1000 * (2 + 2 * (1 + 1 / 32))  # bf16 read, row- and column-wise MXFP8 written
    zero = 1000 * 2  # the buffer zeroed for the gradients
    assert quantize + zero == 6062.5
    assert out.optimizer_s == pytest.approx(1.0 + 6062.5 / hbm)
    assert out.weight_bytes == 2000.0 + 1000 * (2 * (1 + 1 / 32) - 2)  # copies replace bf16
    # per-tensor FP8 on Blackwell: 1 B gathered, one copy cast from the shard's bf16 copy
    # (read 2, write 1; sim.memory.param_cast)
    fp8 = _plan("fp8-delayed")
    assert fp8.dp_gather_bytes == 2000.0 - 1000 * (2 - 1)
    assert fp8.optimizer_s == pytest.approx(1.0 + 1000 / 4 * (2 + 1) / hbm)


def test_the_reuse_flag_is_read():
    flags = {"num-layers": 2, "hidden-size": 256, "num-attention-heads": 4, "seq-length": 512,
             "max-position-embeddings": 512, "micro-batch-size": 1, "global-batch-size": 8,
             "bf16": True, "fp8-format": "e4m3", "fp8-recipe": "mxfp8", "fp8-param-gather": True,
             "use-distributed-optimizer": True, "reuse-grad-buf-for-mxfp8-param-ag": True,
             "vocab-size": 1024}  # fmt: skip
    run = read_megatron(flags, name="r", source="test", gpu="B200", num_gpus=8)
    notes = {n.name.lstrip("-"): n.status for n in run.args}
    assert notes["reuse-grad-buf-for-mxfp8-param-ag"] == "mapped" and run.param_gather
