"""Megatron-Core's MoE paged stash (sim/compute/paged_stash.py): the fused grouped MLP's saved
tensors copied into pages in the forward and out of them in the backward."""

from __future__ import annotations

import pytest

from sim.compute.moe import moe_bwd, moe_fwd
from sim.compute.moe_shape import MoEShape
from sim.runs.bridge_recipes import recipe_flags
from sim.runs.megatron_reading import Reading
from sim.runs.megatron_shape import shape_features


def test_paged_stash_copies_the_fused_mlps_saved_tensors_both_ways():
    """Hidden 64, expert width 32 (gated: first GEMM 64 wide), 4 local experts of 16 rows: per
    row 64 + 64/32 (fc1 input and scales) + 2*64 (BF16 first-GEMM output) + 4 (probability)
    + 32 + 32/32 (fc2 input and scales) = 231 bytes; each copy reads and writes them, so
    2 * 64 rows * 231 = 29568 bytes each way, in 6 copies; the forward adds 2 + 3*6 = 20
    bookkeeping launches (one chain kernel), the backward 6. Without the stash, or without
    the fused grouped MLP (the stash needs it), nothing of it."""
    shape = MoEShape(hidden=64, experts=4, top_k=1, expert_ffn=32, fused_grouped_mlp=True,
                     paged_stash=True)  # fmt: skip
    rows = (16.0,) * 4
    fwd = [k for k in moe_fwd(shape, 64, 64, rows, 2) if k.name.startswith("paged_stash")]
    dx, dw = moe_bwd(shape, 64, 64, rows, 2)
    bwd = [k for k in dx + dw if k.name.startswith("paged_reload")]
    for kernels, meta in ((fwd, 20), (bwd, 6)):
        copies = [k for k in kernels if not k.name.endswith("_meta")]
        (chain,) = [k for k in kernels if k.name.endswith("_meta")]
        assert len(copies) == 6 and chain.batch == meta and chain.bytes == 0.0
        assert sum(k.bytes for k in copies) == pytest.approx(2 * 64 * 231)
    for other in (MoEShape(64, 4, 1, 32, fused_grouped_mlp=True),
                  MoEShape(64, 4, 1, 32, paged_stash=True)):  # fmt: skip
        names = [k.name for k in moe_fwd(other, 64, 64, rows, 2)]
        names += [k.name for k in moe_bwd(other, 64, 64, rows, 2)[0]]
        assert not any(n.startswith(("paged_stash", "paged_reload")) for n in names)


def test_bridge_recipe_moe_paged_stash_reaches_the_shape_only_with_the_fused_mlp():
    """The recipe table's ``moe_other`` cell (``moe_paged_stash=True``) sets the flag; the
    shape takes it where the experts are the fused grouped MLP (op fuser with MXFP8)."""
    cell = "use_transformer_engine_op_fuser=True; moe_paged_stash=True; moe_expert_rank_capacity_factor=1.5"
    flags = recipe_flags({"moe_other": cell})
    assert flags["moe-paged-stash"] is True
    assert "moe-paged-stash" not in recipe_flags(
        {"moe_other": "use_transformer_engine_op_fuser=True"}
    )
    base = {"num-experts": 8, **flags}
    fused = shape_features(Reading({**base, "fp8-recipe": "mxfp8"}, strict=False), grouped=True)
    plain = shape_features(Reading(base, strict=False), grouped=True)
    assert "moe_stash=paged" in fused and "moe_stash=paged" not in plain


def test_stash_copy_runs_at_megatron_lm_6414s_measured_triton_speed():
    """Megatron-LM#6414 on a GB300 (8 TB/s): 896 MiB stashed in 468 us, 256 MiB in 156 us.
    A copy kernel's bytes are its reads and writes (twice the stashed bytes). At 896 MiB:
    468 us; 128 MiB at the 256 MiB rate (clamped): 78 us; on a GPU of half the HBM peak,
    twice; the bookkeeping chain and other kernels are not timed by it."""
    from dataclasses import replace

    from sim.compute.kernels import kernel_time_s, mem
    from sim.compute.stash_copy_speed import copy_time_s
    from sim.hardware.loader import load_hardware

    spec = replace(load_hardware("gb300-nvl72").gpus[0].compute, hbm_bandwidth_Bps=8e12)
    mib = 2**20
    assert copy_time_s("paged_stash_act_in", 2 * 896 * mib, spec) == pytest.approx(468e-6)
    assert copy_time_s("paged_reload_fc1_x", 2 * 128 * mib, spec) == pytest.approx(78e-6)
    half = replace(spec, hbm_bandwidth_Bps=4e12)
    assert copy_time_s("paged_stash_act_in", 2 * 896 * mib, half) == pytest.approx(936e-6)
    assert copy_time_s("paged_stash_meta", 0.0, spec) is None
    assert copy_time_s("expert_act[4]", 2 * 896 * mib, spec) is None
    k = mem("paged_stash_act_in", 2 * 896 * mib)
    assert kernel_time_s(k, spec, "bf16") == pytest.approx(spec.kernel_overhead_s + 468e-6)
