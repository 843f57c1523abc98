"""Transformer Engine's per-tensor amax all-reduce under sequence parallelism
(sim.parallel.amax_reduce): hand-counted per layer from TE@d0067d0 ``module/linear.py:351-355,
809-824``, ``layernorm_linear.py:233-237, 732-741``, ``layernorm_mlp.py:406-410, 1154-1160``:
a column-parallel linear's input quantizer reduces in the forward, a row-parallel linear's
output-gradient quantizer in the backward, only with sequence parallelism, only for
Float8CurrentScaling (one fp32) and NVFP4 (two fp32, one coalesced call)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sim.compute.decoder import DecoderShape
from sim.compute.precision import get_recipe
from sim.compute.precision_rules import LayerRules, LowPrecision
from sim.engine.stage_cost import StageCost
from sim.hardware.loader import load_hardware
from sim.parallel.amax_reduce import amax_ops
from sim.parallel.decoder_shard import shard_decoder
from sim.parallel.layout import ParallelLayout
from sim.parallel.tp_overlap import TE_USERBUFFERS, partners, split_comm
from sim.point.stage_costs import with_recompute_comm
from sim.trace.decoder import decoder_trace

B200 = load_hardware("dgx-b200").gpus[0].compute
DENSE = DecoderShape(2, 256, 4, 32, 512, 1024)
AG, RS, AR = "all_gather", "reduce_scatter", "allreduce"


def _comm(recipe: str | None, tp: int = 2, sp: bool = True, rules=LayerRules()):
    low = None if recipe is None else LowPrecision(get_recipe(recipe), rules)
    one = decoder_trace(DENSE, name="d", microbatch_size=1, gpu=B200, precision=low)
    return shard_decoder(one, ParallelLayout(tp=tp, sp=sp), B200)


def _amax(ops) -> list[float]:
    """The amax all-reduces' bytes (a few bytes; the layers' own all-reduces carry ``b*s*h*d``)."""
    return [op.nbytes for op in ops if op.kind == AR and op.nbytes <= 8]


@pytest.mark.parametrize(
    ("recipe", "tp", "sp", "each"),
    [
        ("fp8-tensorwise", 2, True, [4.0, 4.0]),  # QKV's and FC1's input; proj's and FC2's dy
        ("nvfp4", 2, True, [8.0, 8.0]),  # row- and column-wise amax, one coalesced call
        ("mxfp8", 2, True, []),  # per-block scales: nothing to agree on
        ("fp8-blockwise", 2, True, []),
        ("fp8-delayed", 2, True, []),  # Float8Quantizer has no amax group
        ("fp8-tensorwise", 1, True, []),  # one rank
        ("fp8-tensorwise", 2, False, []),  # no sp: all-reduces only, the input is whole
        (None, 2, True, []),  # bf16
    ],
)
def test_a_dense_blocks_comm_gains_two_amax_all_reduces_each_way(recipe, tp, sp, each):
    """Each block of a dense decoder: exactly ``each`` amax all-reduces in the forward and in
    the backward, after its all-gathers and reduce-scatters, which are unchanged."""
    shard = _comm(recipe, tp, sp)
    plain = _comm(None, tp, sp)
    for name, c, p in zip(
        [x.name for x in shard.trace.layers], shard.comm, plain.comm, strict=True
    ):
        if not name.startswith("block"):
            assert c == p
            continue
        for mine, theirs in ((c.fwd, p.fwd), (c.bwd, p.bwd)):
            assert [op.kind for op in mine[: len(theirs)]] == [op.kind for op in theirs]
            extra = mine[len(theirs) :]
            assert [op.kind for op in extra] == [AR] * len(each)
            assert [op.nbytes for op in extra] == each


def test_bf16_blocks_and_linears_kept_out_of_the_recipe_reduce_nothing():
    """First/last blocks in bf16 (Megatron ``--first-last-layers-bf16``): none there; a
    config's ``mxfp8`` or ``bf16`` matchers drop the linear's own all-reduce only."""
    rules = LayerRules(bf16_start=1, bf16_end=0)
    shard = _comm("fp8-tensorwise", rules=rules)
    names = [x.name for x in shard.trace.layers]
    per_block = {n: len(_amax(c.fwd)) for n, c in zip(names, shard.comm, strict=True)}
    assert per_block["block.0"] == 0 and per_block["block.1"] == 2
    low = LowPrecision(get_recipe("nvfp4"), LayerRules(mxfp8=("out_proj",), keep16=("down",)))
    mamba = SimpleNamespace(moe=None, mla=None, mamba=object())
    fwd, bwd = amax_ops("mamba", mamba, 4, True, low)
    assert (len(fwd), len(bwd)) == (1, 0)  # in_proj's input; out_proj runs MXFP8
    fwd, bwd = amax_ops("block", DENSE, 4, True, low)
    assert (len(fwd), len(bwd)) == (2, 1)  # FC2 (down) in bf16: no grad-output reduction


def test_userbuffers_leave_the_amax_all_reduces_exposed():
    """Under ``tp_comm_overlap`` the all-gathers and reduce-scatters run beside their GEMMs,
    the amax all-reduces stay on the compute stream (TE quantizes the shard before
    ``fill_userbuffers_buffer_for_all_gather``)."""
    low = LowPrecision(get_recipe("fp8-tensorwise"), LayerRules())
    one = decoder_trace(DENSE, name="d", microbatch_size=1, gpu=B200, precision=low)
    shard = shard_decoder(one, ParallelLayout(tp=2, sp=True), B200)
    i = [x.name for x in shard.trace.layers].index("block.0")
    (f_exp, f_hid), (b_exp, b_hid) = split_comm(
        shard.comm[i], shard.partners[i], TE_USERBUFFERS, B200, "bf16", 2
    )
    assert [op.kind for op in f_exp] == [AR, AR] and len(f_hid) == 4
    assert [op.kind for op in b_exp] == [AR, AR] and len(b_hid) == 4
    assert partners(shard.comm[i], [], [], []).fwd == ((),) * 6


def test_a_full_recompute_runs_the_forwards_amax_all_reduces_again():
    """Megatron's full recompute re-runs the block's forward, quantizers included."""
    shard = _comm("fp8-tensorwise")
    cost = StageCost(fwd_s=1.0, bwd_s=2.0, out_bytes=0.0, in_bytes=0.0)
    n = len(shard.trace.layers)
    plan = SimpleNamespace(recompute_layers=(1, 2))  # both blocks (embedding is layer 0)
    (out,) = with_recompute_comm((cost,), shard, [0], [[plan]])
    assert (AR, 4.0, 4) in out.tp_recompute and n == 4
