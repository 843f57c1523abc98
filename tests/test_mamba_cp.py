"""Context parallelism over a Mamba-2 layer as Megatron-Core runs it (sim.compute.mamba_cp;
NVIDIA/Megatron-LM@d98e8a64 megatron/core/ssm/mamba_context_parallel.py). Hand-computed on one
layer: 8 heads of 4 (d_i = 32), state 4, 2 groups, chunk 8, h = 16, b = 1, s = 16, bf16 (2 B),
tp = 1, cp = 2: a rank holds t = 8 tokens and runs the scan over all 16 for 4 heads, 1 group."""

from __future__ import annotations

import pytest

from sim.compute.decoder import DecoderShape
from sim.compute.mamba_cp import alltoall_bytes, copies_bwd, copies_fwd, cp_problem, rank_mixer
from sim.compute.ssm import MambaShape, mamba_act_bytes, mamba_bwd, mamba_fwd
from sim.hardware.loader import load_hardware
from sim.parallel.decoder_comm import group_ops
from sim.parallel.decoder_shard import shard_decoder
from sim.parallel.decoder_split import decoder_problem
from sim.parallel.layout import ParallelLayout
from sim.runs.express import Expressed, express
from sim.runs.megatron_args import read_megatron
from sim.trace.decoder import decoder_trace

M = MambaShape(8, 4, 4, 2, 4, 8)
H, S, B, D = 16, 16, 1, 2
H100 = load_hardware("dgx-h100").gpus[0].compute


def test_all_to_alls_move_z_x_b_c_dt_then_y():
    """pre_conv_ssm: z, x (d_i = 32 wide), B, C (G N = 8, no repeat: 2 groups over 2 ranks),
    dt (H = 8), each [t = 8, w] bf16 with half of it sent away; post_conv_ssm: y (32 wide)."""
    fwd, bwd = alltoall_bytes(M, 8, 1, 2, D)
    z, bc, dt = 8 * 32 * 2 / 2, 8 * 8 * 2 / 2, 8 * 8 * 2 / 2  # 256, 64, 64 bytes
    assert fwd == [("z", z), ("x", z), ("B", bc), ("C", bc), ("dt", dt), ("y", z)]
    assert bwd == fwd[-1:] + fwd[-2::-1]
    assert sum(b for _, b in fwd) == 960
    lay = ParallelLayout(cp=2)
    shape = DecoderShape(1, H, 2, S, 64, 64, pattern="M", mamba=M)
    f, b = group_ops("mamba", shape, B, D, lay, (0.0, 0.0), None)
    assert [(o.group, o.kind, o.nbytes) for o in f] == [("cp", "alltoall", x) for _, x in fwd]
    assert len(b) == 6 and sum(o.nbytes for o in b) == 960
    assert alltoall_bytes(M, 16, 1, 1, D) == ([], [])


def test_scan_runs_the_whole_sequence_for_half_the_heads():
    """The conv and the SSD scan (mamba_ssm ssd_combined.py) over s = 16 tokens for 4 heads and
    1 group cost half the cp = 1 layer's 8 heads and 2 groups: FLOPs and bytes of every kernel
    (T*H*(4PN + QP) + 2*T*G*Q*N is linear in T at fixed heads; Dao & Gu §6)."""
    assert rank_mixer(M, 1, 2) == MambaShape(4, 4, 4, 1, 4, 8)
    scan = lambda ks: [k for k in ks if k.name.startswith(("ssd", "conv1d"))]  # noqa: E731
    one, two = scan(mamba_fwd(M, H, S, B, D)), scan(mamba_fwd(M, H, S, B, D, cp=2))
    assert [k.name for k in one] == [k.name for k in two]
    for a, b in zip(one, two, strict=True):
        assert (b.flops, b.bytes) == (a.flops / 2, a.bytes / 2)
    one_b, two_b = scan(mamba_bwd(M, H, S, B, D)[0]), scan(mamba_bwd(M, H, S, B, D, cp=2)[0])
    assert sum(k.bytes for k in two_b) == sum(k.bytes for k in one_b) / 2
    # in_proj over t = 8 tokens: [8, 16] @ [16, 2*32 + 2*8 + 8 = 88]
    proj = next(k for k in mamba_fwd(M, H, S, B, D, cp=2) if k.name == "in_proj")
    assert (proj.m, proj.n, proj.k) == (8, 88, 16)


def test_copies_around_the_all_to_alls():
    """Forward: the cat in each all_to_all_sp2hp (2 x t x w x 2 B: 1024, 1024, 256, 256, 256),
    the cat of the five and the load-balance undo (2 x 8 x 88 x 2 = 2816 each); after the scan
    the redo and the cat in all_to_all_hp2sp (2 x 8 x 32 x 2 = 1024 each). Backward: those
    again, the contiguous() before each all-to-all, and the cat of zxBCdt's gradient (2816)."""
    before, after = copies_fwd(M, 8, 1, 2, D)
    assert sum(k.bytes for k in before) == 2816 + 2 * 2816
    assert [k.bytes for k in after] == [1024, 1024]
    y_grad, zx_grad = copies_bwd(M, 8, 1, 2, D)
    assert sum(k.bytes for k in y_grad) == 2048
    assert sum(k.bytes for k in zx_grad) == 2816 + 2816 + 2816 + 2816
    # 2 groups over 4 CP ranks: B and C repeated r = 2 times (read 8, write 16 wide)
    rep = [k for k in copies_fwd(M, 4, 1, 4, D)[0] if "repeat" in k.name]
    assert [k.bytes for k in rep] == [4 * 8 * 2 + 4 * 16 * 2] * 2
    assert copies_fwd(M, 16, 1, 1, D) == ([], [])


def test_activations_halve():
    """cp = 1: 2 r h d + t d (in_width + 3 d_i) + 4 t G = 1024 + 32 x 184 + 128 = 7040; cp = 2:
    the scan's zxBCdt and out_x over 16 tokens at half width (16 x 2 x 60), the norm's and
    out_proj's inputs over 8 tokens (8 x 2 x 64), rstd 4 x 8 x 2: 3520."""
    assert mamba_act_bytes(M, H, S, B, D) == 7040
    assert mamba_act_bytes(M, H, S, B, D, cp=2) == 512 + 1920 + 1024 + 64 == 3520


@pytest.mark.parametrize(
    ("heads", "groups", "tp", "cp", "field"),
    [(8, 2, 1, 3, "mamba.heads"), (12, 3, 1, 2, "mamba.groups"), (12, 3, 1, 4, "mamba.groups"),
     (8, 2, 2, 8, "mamba.heads")],
)  # fmt: skip
def test_megatron_refuses_what_does_not_divide(heads, groups, tp, cp, field):
    """MambaContextParallel.__init__: nheads/tp divisible by cp; groups/tp divisible by cp, or
    (when smaller) dividing it; 2 groups over 4 or 8 ranks are repeated and accepted."""
    why = cp_problem(MambaShape(heads, 4, 4, groups), tp, cp)
    assert field in why and f"context_parallel {cp}" in why
    assert cp_problem(M, 1, 4) == cp_problem(M, 1, 8) == cp_problem(M, 2, 2) == ""
    shape = DecoderShape(1, H, 2, S, 64, 64, pattern="M", mamba=MambaShape(heads, 4, 4, groups))
    assert field in decoder_problem(shape, ParallelLayout(cp=cp, tp=tp))


def test_express_takes_what_megatron_takes():
    """The golden hybrid test's layout (hidden 1024: 32 heads, 8 groups; tp 2, cp 4: 4 heads
    and 1 group per rank) is expressed; 6 groups over tp 2 x cp 2 (3 per tensor rank, not
    divisible by 2) is refused with Megatron's constraint."""
    flags = {"hybrid-layer-pattern": "M-M*", "num-layers": 4, "spec": "hybrid",
             "tensor-model-parallel-size": 2, "context-parallel-size": 4}  # fmt: skip
    gpt = {"num-layers": 4, "hidden-size": 1024, "num-attention-heads": 16, "seq-length": 1024,
           "micro-batch-size": 4, "global-batch-size": 32, "bf16": True, "vocab-size": 50257,
           "pipeline-model-parallel-size": 1}  # fmt: skip
    run = read_megatron(gpt | flags, name="t", source="<test>", num_gpus=8, gpu="A100-SXM-80GB")
    assert isinstance(express(run), Expressed)
    odd = gpt | flags | {"context-parallel-size": 2, "mamba-num-heads": 48, "mamba-num-groups": 6}
    ex = express(read_megatron(odd, name="t", source="<test>", num_gpus=4, gpu="A100-SXM-80GB"))
    assert not isinstance(ex, Expressed) and any("mamba.groups 6" in r for r in ex.reasons)


def test_host_ops_land_on_the_mamba_layer():
    """MambaContextParallel's ATen ops (mamba_cp.HOST_FWD / HOST_BWD): 1 split + 5 x 6 per
    sp2hp all-to-all + 8 for the two repeats + 3 cats + 9 after the scan + 13 parameter slices =
    64 forward; backward 69 + 10 cp = 89 at cp = 2. Only the Mamba layer gets them."""
    shape = DecoderShape(2, H, 2, S, 64, 64, pattern="M*", mamba=M)
    trace = decoder_trace(shape, name="m", microbatch_size=1, gpu=H100)
    one, two = (shard_decoder(trace, ParallelLayout(cp=cp), H100).trace.layers for cp in (1, 2))
    added = {
        a.name: (b.fwd_ops - a.fwd_ops, b.bwd_ops - a.bwd_ops)
        for a, b in zip(one, two, strict=True)
    }
    assert added["mamba.0"] == (64, 89)
    assert added["attention.1"] == (0, 0)
