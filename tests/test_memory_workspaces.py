"""Workspaces and backends the runtime picks (issue 27): bytes and choices by hand.

PyTorch's cuBLAS workspaces (two handles: the forward's thread and autograd's; each
``CUBLAS_WORKSPACE_CONFIG``'s size or the GPU's default) and Transformer Engine's, counted in
the allocated peak; TE's attention backend under determinism.
"""

from __future__ import annotations

import pytest

from benchmarks.accuracy.memory_rows import golden_attention
from sim.compute.decoder import DecoderShape
from sim.config import parse_experiment
from sim.errors import InputError
from sim.hardware.loader import load_hardware
from sim.memory.cublas_workspace import (
    TORCH_CUBLAS_HANDLES,
    parse_workspace_config,
    torch_cublas_bytes,
)
from sim.memory.te_attention import TeEnvironment, te_attention_backend
from sim.point.config import PointConfig
from sim.point.experiment import Prepared
from sim.point.memory import point_memory
from sim.runs.te_environment import LATER, LTS_2401, golden_environment
from sim.trace.decoder import decoder_trace

MIB = 2**20
SHAPE = DecoderShape(layers=2, hidden=64, heads=4, seq_len=32, vocab=256, ffn_hidden=128)


def _framework_bytes(preset: str, memory: dict) -> float:
    topo = load_hardware(preset)
    trace = decoder_trace(SHAPE, name="tiny", microbatch_size=1, gpu=topo.gpus[0].compute)
    exp = parse_experiment(
        {
            "name": "t",
            "hardware": preset,
            "models": [{"name": "tiny", "trace": "tiny"}],
            "training": {"global_batch": 1, "dtype": "bf16"},
            "options": {"partition": "uniform"},
            "framework": "megatron-lm",
            # no TE dummy weight gradients: the framework category is the workspaces alone
            "memory": {"gradient_accumulation_fusion": False, **memory},
        }
    )
    point = PointConfig(
        model="tiny", schedule="1f1b", stages=1, dp_width=1, microbatch_size=1,
        microbatches=1, memory_policy="none", global_batch=1, framework="megatron-lm",
    )  # fmt: skip
    pm = point_memory(Prepared(exp, "<test>", topo, {"tiny": trace}), point)
    return pm.ranks[0].by_category["framework"]


def test_workspace_config_is_parsed_as_pytorch_does():
    """``:SIZE:COUNT`` pairs, SIZE in KiB, summed (CublasHandlePool.cpp)."""
    assert parse_workspace_config(":4096:8") == 4096 * 1024 * 8
    assert parse_workspace_config(":4096:2:16:8") == 4096 * 1024 * 2 + 16 * 1024 * 8
    with pytest.raises(ValueError, match="SIZE:COUNT"):
        parse_workspace_config("4096")
    assert TORCH_CUBLAS_HANDLES == 2
    assert torch_cublas_bytes(1.0) == 2.0


def test_two_torch_workspaces_and_tes_on_hopper():
    """H100: TE's 32 MiB + 1 KiB and two of PyTorch's 32 MiB (its sm90 default)."""
    assert _framework_bytes("dgx-h100", {}) == 32 * MIB + 1024 + 2 * 32 * MIB


def test_two_torch_workspaces_and_tes_on_ampere_and_blackwell():
    """A100: TE's 4 MiB + 2 x 8.125 MiB; B200 (compute capability 10): TE's 32 MiB + 1 KiB but
    PyTorch's default stays 8.125 MiB (its 32 MiB is for 9.0 only)."""
    default = 4096 * 1024 * 2 + 16 * 1024 * 8
    assert _framework_bytes("dgx-a100-80gb", {}) == 4 * MIB + 2 * default
    assert _framework_bytes("dgx-b200", {}) == 32 * MIB + 1024 + 2 * default


def test_cublas_workspace_config_sets_each_torch_workspace():
    """``:4096:8`` (Megatron's deterministic mode): 2 x 32 MiB beside TE's 4 MiB on A100, the
    68 MiB the functional tests' steady allocation shows beyond the model states."""
    cfg = {"cublas_workspace_config": ":4096:8"}
    assert _framework_bytes("dgx-a100-80gb", cfg) == 4 * MIB + 2 * 32 * MIB == 68 * MIB
    assert _framework_bytes("dgx-h100", {"cublas_workspace_config": ":16:8"}) == (
        32 * MIB + 1024 + 2 * 16 * 1024 * 8
    )


def test_a_malformed_workspace_config_is_refused_naming_the_field():
    with pytest.raises(InputError, match="cublas_workspace_config"):
        parse_experiment(
            {
                "name": "t",
                "hardware": "dgx-h100",
                "models": [{"name": "m", "trace": "m"}],
                "memory": {"cublas_workspace_config": "4096x8"},
            }
        )


@pytest.mark.parametrize(
    ("env", "cc", "det", "expected"),
    [
        (TeEnvironment((1, 2), (2, 0, 4)), (8, 0), True, "unfused"),  # FA2 off, fused off
        (TeEnvironment((1, 2), (2, 0, 4)), (8, 0), False, "flash"),
        (TeEnvironment((1, 2), (2, 0, 4)), (9, 0), True, "fused"),  # workspace path on sm90
        (TeEnvironment((1, 2), (2, 0, 4)), (10, 0), True, "unfused"),  # TE 1.x: 9.0 only
        (TeEnvironment((1, 3), (2, 4, 1)), (8, 0), True, "flash"),
        (TeEnvironment((1, 3), (2, 4, 0)), (8, 0), True, "unfused"),
        (TeEnvironment((2, 8), None), (8, 0), True, "unfused"),
        (TeEnvironment((2, 8), None), (10, 0), True, "fused"),
    ],
)
def test_te_attention_backend_under_determinism(env, cc, det, expected):
    assert te_attention_backend(env, cc, det) == expected


def test_functional_tests_lts_values_before_the_image_bump_ran_unfused_attention():
    """``[lts_...]`` values generated before 2025-11-06 ran the 24.01 image: with
    ``--deterministic-mode`` on A100 the default backend is TE's unfused attention; the same
    arguments in a later image keep flash attention; an explicit backend is taken as given."""
    det = {"--deterministic-mode": True}
    assert golden_environment("x [lts_dgxa100_dracooci]", "2025-10-21") is LTS_2401
    assert golden_environment("x [lts_dgx_a100]", "2025-11-06") is LATER
    assert golden_environment("x [dev_dgx_a100]", "2025-10-21") is LATER
    assert golden_attention(det, "A100-SXM-80GB", LTS_2401) == "math"
    assert golden_attention(det, "A100-SXM-80GB", LATER) == "flash"
    assert golden_attention({}, "A100-SXM-80GB", LTS_2401) == "flash"
    assert golden_attention({**det, "--attention-backend": "flash"}, "A100-SXM-80GB", LTS_2401) == (
        "flash"
    )
    assert golden_attention({"--attention-backend": "unfused"}, "GB200", LATER) == "math"


def test_tes_grouped_gemm_adds_a_workspace_per_compute_stream():
    """--moe-grouped-gemm: TE's GroupedLinear allocates 4 more workspaces (one per compute
    stream): A100 4 x 4 MiB, H100 4 x (32 MiB + 1 KiB)."""
    for preset, te in (("dgx-a100-80gb", 4 * MIB), ("dgx-h100", 32 * MIB + 1024)):
        plain = _framework_bytes(preset, {})
        grouped = _framework_bytes(preset, {"te_grouped_gemm": True})
        assert grouped - plain == 4 * te
