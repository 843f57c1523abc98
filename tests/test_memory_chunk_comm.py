"""PatrickStar's chunk traffic (sim.memory.chunk_comm): Hugging Face BERT's module groups, the
fetches a checkpointed backward adds, broadcasts against all-gathers, and the memsets; one
hand-computed case each."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sim.hardware.host_ops import NO_HOST, HostOverhead
from sim.memory.chunk_comm import chunk_blocks, fetches_per_iteration, memset_bytes, msc_factor
from sim.memory.chunk_hooks import (
    MEMORY_ALLOCATED_OPS,
    POST_HOOK_PYTHON_OPS,
    PRE_HOOK_PYTHON_OPS,
    hook_host_s,
    hooked_tensors,
    pre_hook_host_s,
)
from sim.memory.tensors import param_groups
from sim.trace.schema import LayerProfile
from tests.helpers import chain_topology
from tests.policy_helpers import run
from tests.test_memory_partitioned import tiny_gpt

H = 64
BLOCK = 12 * H * H + 13 * H  # 49,984 parameters, BERT's and GPT-2's alike


def bert_block(i: int) -> LayerProfile:
    """A Hugging Face BertLayer of hidden 64: 16 parameter tensors."""
    return LayerProfile(f"block.{i}", 1, 2, BLOCK * 2, 0, 0, param_tensors=16)


def test_bert_layer_registers_query_key_value_apart():
    """BertLayer's modules in __init__ order: query, key, value, attention-output dense (4160
    each), LayerNorm 128, intermediate 16,640, output 16,448, LayerNorm 128; a 12-tensor block
    keeps GPT-2's fused QKV (12,480) after its first LayerNorm."""
    assert param_groups(bert_block(0), 2) == (4160,) * 4 + (128, 16640, 16448, 128)
    gpt = LayerProfile("block.0", 1, 2, BLOCK * 2, 0, 0)
    assert param_groups(gpt, 2)[:2] == (128, 12480)


def test_recomputed_blocks_fetch_their_own_chunks_again():
    """An embedding of 1000 and two BERT blocks in chunks of 33,408: chunk 0 = embedding and
    block 0's attention (17,768; its intermediate does not fit), chunk 1 = block 0's
    intermediate, output and LayerNorm (33,216), chunk 2 = block 1's attention and intermediate
    (exactly 33,408), chunk 3 = block 1's output and LayerNorm (16,576). Chunks 1-3 lie within
    one block: with recompute 2 * 4 + 3 = 11 fetches per iteration, without 8."""
    emb = LayerProfile("embedding", 1, 2, 1000 * 2, 0, 0)
    assert chunk_blocks([emb, bert_block(0), bert_block(1)], 2, 33408) == (4, 3)
    assert fetches_per_iteration(4, 3, recompute=True) == 11
    assert fetches_per_iteration(4, 3, recompute=False) == 8


def test_broadcasts_and_memsets_by_hand():
    """w ring broadcasts of C over a ring all-gather of w*C: w / (w - 1) (8/7 on 8 GPUs).
    Memsets: 11 fetches on w = 4 give a replica 11 * 3/4 zeroed chunks, and its 2 owned
    chunks are averaged (read and write): (8.25 + 4) chunks of bytes; nothing on one GPU."""
    assert msc_factor(8) == pytest.approx(8 / 7) and msc_factor(1) == 1.0
    assert memset_bytes(11, 2, 4, 1.0) == pytest.approx(12.25)
    assert memset_bytes(11, 2, 1, 1.0) == 0.0


@pytest.mark.parametrize("w", [2, 4])
def test_msc_plan_times_every_fetch_as_a_broadcast(w):
    """The tiny GPT in one chunk of C = 2**20 with memory-saving communication: the chunk is
    fetched twice per iteration (GPT blocks in one chunk span several blocks: no third), so
    each action's gather is one chunk's 2C bytes times w/(w - 1), the reduce likewise, and the
    dummy chunks of the group are not sent (against w * 2C for the all-gather without msc)."""
    res, _, _ = run(tiny_gpt(), chain_topology(w), "chunked:1:recompute:msc", p=1, w=w, m=1)
    C = 2**20
    for (plan,) in res.sim_input.plans:
        assert plan.notes["chunk_fetches_per_iteration"] == 2
        assert plan.gather_bytes == pytest.approx(2 * C * w / (w - 1))
        assert plan.scatter_bytes == pytest.approx(2 * C * w / (w - 1))


def test_patrickstar_backward_hooks_by_hand() -> None:
    """One Hugging Face BertLayer (h = 64): 8 hooked modules, 6 weight matrices (large) and 10
    vectors (small). With a no-grad op 8 us (3 us of it the launch), read 10 us, a Python
    backward node 7.5 us: large 6 x (8 + 10); small 10 x (4 x 8 + 10 + (8 - 3)): the check's two
    ops, the read's, the copy, the read, the empty tensor; nodes 8 x 2 x 7.5:
    108 + 470 + 120 = 698 us; and release_dist's Python after each small tensor's read,
    POST_HOOK_PYTHON_OPS ops without a kernel (5 us) each."""
    h = 64
    block = LayerProfile("block.0", 1e-3, 2e-3, 2 * (12 * h * h + 13 * h), 0, 0, param_tensors=16.0)

    def ctx(overhead: HostOverhead) -> SimpleNamespace:
        host = SimpleNamespace(overhead=overhead)
        return SimpleNamespace(
            layers=(block,), dtype_bytes=2, param_tensors=16.0, host="cpu0",
            topology=SimpleNamespace(host=lambda name: host),
        )  # fmt: skip

    assert hooked_tensors(ctx(NO_HOST)) == (8, 6, 10)  # type: ignore[arg-type]
    assert hook_host_s(ctx(NO_HOST)) == 0.0  # type: ignore[arg-type]
    over = HostOverhead(op_s=9.8e-6, nograd_op_s=8e-6, read_s=10e-6, function_backward_s=7.5e-6)
    python = 10 * POST_HOOK_PYTHON_OPS * 5e-6
    assert hook_host_s(ctx(over)) == pytest.approx(698e-6 + python)  # type: ignore[arg-type]


def _bert_layer_ctx(overhead: HostOverhead) -> SimpleNamespace:
    block = LayerProfile("block.0", 1e-3, 2e-3, 2 * (12 * H * H + 13 * H), 0, 0, param_tensors=16.0)
    host = SimpleNamespace(overhead=overhead)
    return SimpleNamespace(
        layers=(block,), dtype_bytes=2, param_tensors=16.0, host="cpu0",
        topology=SimpleNamespace(host=lambda name: host),
    )  # fmt: skip


def test_patrickstar_pre_backward_hook_by_hand() -> None:
    """One BertLayer (h = 64; 8 modules, 6 matrices with their biases, 2 LayerNorms): a no-grad
    op 8 us (3 us the launch, so 5 us without a kernel). Per tensor ``a = (P + 2) x 5 + 8`` us
    (P: PRE_HOOK_PYTHON_OPS; two views; zeros_like), per module ``M x 5`` us (M:
    MEMORY_ALLOCATED_OPS). HBM so slow that every weight's zeros_like outlasts its bias's issue:
    the 6 biases hidden, 10 tensors exposed, ``10 a + 8 M 5``; so fast that none is hidden:
    ``16 a + 8 M 5``; at 8192 B/us each matrix group's zeros_like (2 bytes per element, under
    ``a``) hides that long of its bias: ``16 a - (4 x 8320 + 33280 + 32896) / 8192 us + 8 M 5``."""
    a = ((PRE_HOOK_PYTHON_OPS + 2) * 5 + 8) * 1e-6
    per_module = 8 * MEMORY_ALLOCATED_OPS * 5e-6
    over = HostOverhead(op_s=9.8e-6, nograd_op_s=8e-6)
    ctx = _bert_layer_ctx(over)
    assert pre_hook_host_s(_bert_layer_ctx(NO_HOST), 1e12) == 0.0  # type: ignore[arg-type]
    assert pre_hook_host_s(ctx, 1.0) == pytest.approx(10 * a + per_module)  # type: ignore[arg-type]
    assert pre_hook_host_s(ctx, 1e30) == pytest.approx(16 * a + per_module)  # type: ignore[arg-type]
    # the 4 (h^2 + h) matrices write 2 x 4160 B in 1.015625 us at 8192e6 B/s; the FFN's two
    # (4h^2 + 4h, 4h^2 + h) 33280 and 32896 B in 4.0625 and 4.015625 us
    hidden = (4 * 8320 + 33280 + 32896) / 8192e6
    got = pre_hook_host_s(ctx, 8192e6)  # type: ignore[arg-type]
    assert got == pytest.approx(16 * a - hidden + per_module)


def test_patrickstar_hook_python_is_the_measurement_s_median() -> None:
    """The hooks' Python constants are the medians measurements/host/patrickstar_hooks.py wrote."""
    from pathlib import Path

    import yaml

    path = Path(__file__).resolve().parents[1] / "measurements/host/patrickstar_hooks.yaml"
    median = yaml.safe_load(path.read_text())["median"]
    assert PRE_HOOK_PYTHON_OPS == pytest.approx(median["pre_hook_python_ops_per_tensor"], abs=0.01)
    assert POST_HOOK_PYTHON_OPS == pytest.approx(
        median["post_hook_python_ops_per_tensor"], abs=0.01
    )
    assert MEMORY_ALLOCATED_OPS == pytest.approx(median["memory_allocated_ops"], abs=0.01)
