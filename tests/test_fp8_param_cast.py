"""FP8 / NVFP4 parameters kept in Megatron-Core's ``uint8`` parameter buffer
(``--fp8-param-gather``, ``--fp4-param-gather``; :mod:`sim.memory.param_cast`): the step's
HBM bytes beyond the 16-bit step's and the bytes all-gathered, by hand for 1,000 parameters
on one of 4 data-parallel replicas (250 in the rank's fp32 shard)."""

import pytest

from sim.compute.precision import get_recipe
from sim.compute.precision_rules import LowPrecision
from sim.hardware.loader import load_hardware
from sim.memory.plan import StagePlan
from sim.memory.precision import precision_plan
from sim.runs.megatron_args import read_megatron

B200 = load_hardware("dgx-b200").gpus[0].compute
H100 = load_hardware("dgx-h100").gpus[0].compute


def _plan(name: str, spec=B200) -> StagePlan:
    recipe = get_recipe(name)
    assert recipe is not None
    plan = StagePlan(0.0, 0.0, weight_bytes=2000.0, grad_bytes=2000.0, optimizer_s=1.0,
                     dp_sharded=True)  # fmt: skip
    return precision_plan(plan, 1000.0, LowPrecision(recipe, param_gather=True), spec, 4)


def _added_bytes(out: StagePlan, spec) -> float:
    return (out.optimizer_s - 1.0) * spec.hbm_rate_Bps()


def test_per_tensor_fp8_casts_the_bf16_shard_the_step_already_wrote():
    # the fp32 shard's .to(bf16) (read 4, write 2) is the 16-bit step's copy, already counted;
    # current scaling: amax read 2 + cast read 2 + FP8 write 1 per shard parameter
    current = _plan("fp8-tensorwise")
    assert _added_bytes(current, B200) == pytest.approx(250 * (2 + 2 + 1))  # 1250 B
    assert current.dp_gather_bytes == 2000.0 - 1000 * (2 - 1)  # 1 B per parameter, no scale
    # delayed scaling casts with the scale it has (no amax pass): 250 x (2 + 1)
    assert _added_bytes(_plan("fp8-delayed"), B200) == pytest.approx(750.0)
    # Hopper builds the transpose after the gather: + 1000 x (read 1 + write 1)
    assert _added_bytes(_plan("fp8-delayed", H100), H100) == pytest.approx(750.0 + 2000.0)


def test_blockwise_and_nvfp4_rebuild_scales_and_column_copies():
    # blockwise: 250 x 5, the 128x128 fp32 scale_inv of all 1000 (4/16384 B each), and the
    # column-wise copy after the gather (read + write 1 + 4/16384 B each)
    block = 1250 + 1000 * 4 / 16384 + 1000 * 2 * (1 + 4 / 16384)
    assert _added_bytes(_plan("fp8-blockwise"), B200) == pytest.approx(block)
    # NVFP4: 250 x (2 + 2 + 0.5), the E4M3 scale per 16 of all 1000, the 2D transpose of data
    # and scales after the gather; gathered: the packed half byte alone
    nvfp4 = _plan("nvfp4")
    assert _added_bytes(nvfp4, B200) == pytest.approx(1125 + 1000 / 16 + 1000 * 2 * (0.5 + 1 / 16))
    assert nvfp4.dp_gather_bytes == 2000.0 - 1000 * (2 - 0.5)
    assert nvfp4.weight_bytes == 2000.0 + 1000 * (2 * (0.5 + 1 / 16) - 2)


def test_nvfp4_parameters_come_with_fp4_param_gather_only():
    flags = {"num-layers": 2, "hidden-size": 256, "num-attention-heads": 4, "seq-length": 512,
             "max-position-embeddings": 512, "micro-batch-size": 1, "global-batch-size": 8,
             "bf16": True, "fp4-format": "e2m1", "fp4-recipe": "nvfp4", "fp4-param-gather": True,
             "use-distributed-optimizer": True, "vocab-size": 1024}  # fmt: skip
    run = read_megatron(flags, name="r", source="test", gpu="B200", num_gpus=8)
    assert run.precision == "nvfp4" and run.param_gather
    # Megatron's fp8_param needs FP8 mode: --fp8-param-gather keeps NVFP4 parameters in bf16
    del flags["fp4-param-gather"]
    run = read_megatron(flags | {"fp8-param-gather": True}, name="r", source="test", gpu="B200",
                        num_gpus=8)  # fmt: skip
    assert not run.param_gather
