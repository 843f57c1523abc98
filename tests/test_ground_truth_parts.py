"""CPU analogues of the GPU ground-truth measurements: runtime memory, attention kernels."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from backends.torch.calibrate.runtime_reserve import measure  # noqa: E402
from backends.torch.models.attention import attention_kernel  # noqa: E402
from backends.torch.profile.layers import profile_model  # noqa: E402

TINY = {"layers": 1, "hidden": 32, "heads": 2, "seq_len": 32, "vocab": 64}


def test_runtime_memory_on_cpu_is_the_resident_set():
    got = measure("cpu")
    assert got["context_bytes"] > 50 * 2**20  # torch alone holds more than 50 MiB resident
    assert got["cublas_workspace_bytes"] == 0.0
    alloc = got["allocator"]
    assert alloc["rounding_ratio"] == alloc["reserved_ratio"] == 1.0
    assert alloc["requested_bytes"] > 0


def test_math_attention_saves_the_score_matrix():
    """math keeps softmax(QK^T) for backward: 2 heads x 32 x 32 fp32 per sample, and more;
    flash keeps none of it, so the block's saved bytes differ by at least that."""
    b = 2
    flash = profile_model(TINY, microbatch_size=b, attention="flash", reps=1, warmup=0)
    math_ = profile_model(TINY, microbatch_size=b, attention="math", reps=1, warmup=0)
    diff = math_.layers[1].act_bytes - flash.layers[1].act_bytes
    assert diff >= b * 2 * 32 * 32 * 4
    assert math_.provenance["attention_kernel"] == "math"
    assert math_.provenance["model_shape"]["attention"] == "math"


def test_unknown_attention_kernel_is_refused():
    with pytest.raises(ValueError, match="flash, math"):
        with attention_kernel("fast"):
            pass
