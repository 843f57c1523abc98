"""Memory as each framework allocates it (issue 27): one test per mechanism, bytes by hand.

A tiny Llama-like decoder (2 layers, h = 64, 4 heads, 2 KV heads, FFN 128, vocabulary 256,
sequence 32, bf16) on one DGX H100, through :func:`sim.point.memory.point_memory` (the model
``sim memory`` and the planner's bound use) and the engine's ledger.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from sim.cli import app
from sim.compute.decoder import DecoderShape, layer_act_bytes
from sim.config import parse_experiment
from sim.errors import InputError
from sim.framework.registry import get_framework
from sim.hardware.loader import load_hardware
from sim.memory.allocator import (
    MIB,
    AllocatorConfig,
    CachingAllocator,
    replay,
    round_size,
    segment_size,
)
from sim.memory.framework_memory import dummy_wgrad_bytes
from sim.memory.layer_work import LayerWork, WorkOptions, loss_work, stash_tensors
from sim.memory.plan import StagePlan
from sim.memory.rank_memory import kept_peak
from sim.memory.tensor_program import tensor_program
from sim.point.config import PointConfig
from sim.point.experiment import Prepared
from sim.point.memory import point_memory
from sim.point.simulate import evaluate, resolve
from sim.schedules.registry import get_schedule
from sim.trace.decoder import decoder_trace

H, A, KV, F, V, S, L = 64, 4, 2, 128, 256, 32, 2
SHAPE = DecoderShape(layers=L, hidden=H, heads=A, seq_len=S, vocab=V, ffn_hidden=F, kv_heads=KV)
KVW = H // A * KV  # 32: key/value width
LAYER_PARAMS = H * (H + 2 * KVW) + H * H + 3 * H * F + 2 * H  # attention, MLP, two norms
EMBED, HEAD = V * H, V * H + H  # untied output layer and the final norm


def _prepared(framework: str = "megatron-lm", memory: dict | None = None, shape=SHAPE):
    topo = load_hardware("dgx-h100")
    trace = decoder_trace(shape, name="tiny", microbatch_size=1, gpu=topo.gpus[0].compute)
    exp = parse_experiment(
        {
            "name": "t",
            "hardware": "dgx-h100",
            "models": [{"name": "tiny", "trace": "tiny"}],
            "training": {"global_batch": 8, "dtype": "bf16"},
            "options": {"partition": "uniform"},
            "framework": framework,
            "memory": memory or {},
        }
    )
    return Prepared(exp, "<test>", topo, {"tiny": trace})


def _point(framework="megatron-lm", policy="dist_opt", p=1, w=4, m=2, **kw) -> PointConfig:
    return PointConfig(
        model="tiny",
        schedule=kw.pop("schedule", "1f1b"),
        stages=p,
        dp_width=w,
        microbatch_size=1,
        microbatches=m,
        memory_policy=policy,
        global_batch=m * w,
        framework=framework,
        **kw,
    )


def _states(rank) -> float:
    return sum(rank.by_category[c] for c in ("weights", "gradients", "optimizer"))


# ------------------------------------------------------------------ bytes per parameter


def test_megatron_distributed_optimizer_is_6_plus_12_over_d_per_parameter():
    """bf16 param buffer 2 B + fp32 main_grad 4 B + (fp32 master 4 + Adam 8) / d; no extra fp32
    gradient copy at the step (Megatron's dist_optimizer.md table: 6 + 12/d)."""
    params = 2 * LAYER_PARAMS + EMBED + HEAD
    for w in (1, 2, 4):
        pm = point_memory(_prepared(), _point(w=w))
        assert _states(pm.ranks[0]) == pytest.approx(params * (6 + 12 / w))


def test_megatron_without_distributed_optimizer_is_18_and_pipesim_16_per_parameter():
    params = 2 * LAYER_PARAMS + EMBED + HEAD
    pm = point_memory(_prepared(), _point(policy="none"))
    assert _states(pm.ranks[0]) == pytest.approx(18 * params)
    pm = point_memory(_prepared("pipesim"), _point("pipesim", policy="none"))
    assert _states(pm.ranks[0]) == pytest.approx(16 * params)


def test_grad_reduce_in_bf16_keeps_16_bit_gradients():
    params = 2 * LAYER_PARAMS + EMBED + HEAD
    prep = _prepared(memory={"grad_reduce_in_bf16": True})
    pm = point_memory(prep, _point(policy="none"))
    assert pm.ranks[0].by_category["gradients"] == pytest.approx(2 * params)


AWARE = {"precision_aware_optimizer": True, "main_grads_dtype": "bf16",
         "exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"}  # fmt: skip


def test_precision_aware_optimizer_is_4_plus_6_over_d_per_parameter():
    """Megatron's --use-precision-aware-optimizer with bf16 main grads and moments (Megatron-
    Bridge's DeepSeek-V3 recipe): bf16 param 2 B + bf16 grad 2 B + (master remainder 2 + m 2 +
    v 2) / d (TE FusedAdam store_param_remainders), where the default is 6 + 12/d."""
    params = 2 * LAYER_PARAMS + EMBED + HEAD
    for w in (1, 4):
        pm = point_memory(_prepared(memory=AWARE), _point(w=w))
        assert _states(pm.ranks[0]) == pytest.approx(params * (4 + 6 / w))
    fp32_moments = {"precision_aware_optimizer": True}  # remainder 2 + m 4 + v 4, fp32 grads
    pm = point_memory(_prepared(memory=fp32_moments), _point(w=2))
    assert _states(pm.ranks[0]) == pytest.approx(params * (6 + 10 / 2))


def test_precision_aware_optimizer_takes_the_gradient_without_an_fp32_copy():
    fw = get_framework("megatron-lm")
    trace = _prepared().traces["tiny"]
    plain = fw.memory("bf16", "H100", parse_experiment_memory({"grad_reduce_in_bf16": True}))
    aware = fw.memory("bf16", "H100", parse_experiment_memory(AWARE))
    assert fw.runtime(load_hardware("dgx-h100"), trace, memory=plain).step_transient > 0
    assert fw.runtime(load_hardware("dgx-h100"), trace, memory=aware).step_transient == 0
    assert aware.state("bf16", "adam").total == 2 + 2 + 6


def test_lower_optimizer_dtypes_need_the_precision_aware_optimizer():
    with pytest.raises(InputError, match="exp_avg_dtype bf16 needs precision_aware_optimizer"):
        _prepared(memory={"exp_avg_dtype": "bf16"})


def parse_experiment_memory(memory: dict):
    return _prepared(memory=memory).exp.memory


def test_the_data_parallel_bucket_is_megatrons_gradient_buffer_not_a_copy():
    """torch DDP (pipesim's runtime) copies the 2-byte gradients into its buckets with w > 1;
    Megatron reduces its contiguous buffer in place: no framework bytes for it."""
    params = 2 * LAYER_PARAMS + EMBED + HEAD
    ddp = point_memory(_prepared("pipesim"), _point("pipesim", policy="none", w=2)).ranks[0]
    one = point_memory(_prepared("pipesim"), _point("pipesim", policy="none", w=1)).ranks[0]
    assert ddp.by_category["framework"] - one.by_category["framework"] == pytest.approx(2 * params)
    lm2 = point_memory(_prepared(), _point(policy="none", w=2)).ranks[0]
    lm1 = point_memory(_prepared(), _point(policy="none", w=1)).ranks[0]
    assert lm2.by_category["framework"] == pytest.approx(lm1.by_category["framework"])


def test_untied_decoder_embeddings_stay_on_one_stage_too():
    """Megatron-LM ties by default, but Llama-like decoders untie: at p = 1 the rank keeps the
    embedding and the output layer, 2 V h parameters (with their states)."""
    pm = point_memory(_prepared(), _point(policy="none", w=1))
    assert pm.ranks[0].by_category["weights"] == pytest.approx(
        2 * (2 * LAYER_PARAMS + EMBED + HEAD)
    )


# ------------------------------------------------------------------ framework buffers


def test_te_dummy_weight_gradients_one_per_distinct_shape():
    """Two identical blocks share their four GEMM shapes, and the output layer's V x h =
    256 x 64 is fc1's 2F x h here, so it shares that buffer too (TE keys them by shape and
    dtype): (qkv 128x64 + proj 64x64 + fc1 256x64 + fc2 64x128) x 2 B."""
    shapes = [(H + 2 * KVW, H), (H, H), (2 * F, H), (H, F), (V, H)]
    expected = sum(r * c for r, c in shapes[:4]) * 2
    works = [LayerWork(weights=tuple(shapes[:4]))] * 2 + [LayerWork(weights=(shapes[4],))]
    assert dummy_wgrad_bytes(works, 2) == expected
    te = point_memory(_prepared(), _point(policy="none", w=1)).ranks[0]
    off = point_memory(
        _prepared(memory={"gradient_accumulation_fusion": False}), _point(policy="none", w=1)
    ).ranks[0]
    assert te.by_category["framework"] - off.by_category["framework"] == pytest.approx(expected)


def test_te_cross_entropy_keeps_16_bit_logits_instead_of_the_fp32_softmax():
    """Unfused loss: the head keeps 4 t V (fp32 softmax); TE's: 2 t V (bf16 logits)."""
    unfused = point_memory(_prepared(), _point(policy="none", w=1, m=1)).ranks[0]
    te_shape = replace(SHAPE, cross_entropy_fusion="te")
    te = point_memory(_prepared(shape=te_shape), _point(policy="none", w=1, m=1))
    diff = unfused.by_category["activations"] - te.ranks[0].by_category["activations"]
    assert diff == pytest.approx(2 * S * V)


# ------------------------------------------------------------------ activations


def test_unfused_attention_keeps_the_s_squared_probabilities():
    """a/tp x s x s x b x 2 bytes per layer more than flash attention (Megatron's
    attention_probs); with cp, s/cp queries over s keys."""
    math = replace(SHAPE, attention="math")
    flash = layer_act_bytes("block", SHAPE, 1, 2)
    assert layer_act_bytes("block", math, 1, 2) - flash == A * S * S * 2
    assert (
        layer_act_bytes("block", math, 1, 2, cp=2) - layer_act_bytes("block", SHAPE, 1, 2, cp=2)
        == A * (S // 2) * S * 2
    )


def test_all_to_all_context_parallelism_keeps_the_attention_output_twice():
    """TE's AttnFuncWithCPAndQKVOA2A saves out_part: t h / tp x 2 bytes more per layer."""
    p2p = layer_act_bytes("block", SHAPE, 1, 2, cp=2, cp_comm="p2p")
    a2a = layer_act_bytes("block", SHAPE, 1, 2, cp=2, cp_comm="a2a")
    assert a2a - p2p == (S // 2) * H * 2


def test_interleaved_rank_zero_holds_megatrons_one_plus_p_minus_1_over_pv():
    """Interleaved 1F1B, p = 4, v = 2, m = 8: rank 0 keeps 2(p-1) + (v-1)p + 1 = 11 chunk
    stashes at its peak (Megatron's get_pp_rank_microbatches), i.e. L (1 + (p-1)/(pv))
    layers' worth when every chunk holds L/(pv) layers."""
    sched = get_megatron("interleaved_1f1b", 4, 8, 2)
    program = sched.program(1)
    ops = [(a.stage, a.op) for a in program[0] if a.op != "STEP"]
    plans = {s: StagePlan(act_bytes=1.0, resident_act_bytes=1.0) for s in (0, 4)}
    assert kept_peak(ops, plans) == 11
    p, v = 4, 2
    assert 11 / (p * v) == pytest.approx(1 + (p - 1) / (p * v))


def get_megatron(name: str, p: int, m: int, v: int):
    return get_framework("megatron-lm").make_schedule(get_schedule(name), p, m, v)


# ------------------------------------------------------------------ the caching allocator


def test_allocator_rounds_to_512_bytes_and_picks_segments_by_pool():
    assert [round_size(n) for n in (1, 512, 513, 1_000_000)] == [512, 512, 1024, 1_000_448]
    assert round_size(1200, divisions=4) == 1536  # 1280 < 512 * 4: the 512 B rule applies
    assert round_size(5 * MIB + 1, divisions=4) == 6 * MIB  # steps of 1 MiB between 4 and 8
    sizes = (512, MIB, MIB + 512, 10 * MIB, 11 * MIB + 1)
    assert [segment_size(n) // MIB for n in sizes] == [2, 2, 20, 10, 12]


def test_allocator_counts_whole_blocks_and_keeps_segments():
    """A 1.5 MiB request takes a 20 MiB large segment and is split off it; a 19 MiB request
    that then leaves <= 1 MiB of a 20 MiB block takes the whole block (allocated 20 MiB)."""
    a = CachingAllocator()
    a.alloc("x", 1.5 * MIB)
    assert (a.allocated, a.reserved) == (int(1.5 * MIB), 20 * MIB)
    a.free("x")
    a.alloc("y", 19.5 * MIB)  # the cached 20 MiB block: 0.5 MiB rest, not split
    assert (a.allocated, a.reserved) == (20 * MIB, 20 * MIB)


def test_expandable_segments_merge_what_separate_segments_cannot():
    ops = [("alloc", "a", 16 * MIB), ("alloc", "b", 16 * MIB), ("free", "a", 0),
           ("free", "b", 0), ("alloc", "c", 32 * MIB)]  # fmt: skip
    assert replay(ops).reserved == 64 * MIB
    assert replay(ops, AllocatorConfig(expandable_segments=True)).reserved == 40 * MIB


def test_the_allocator_releases_cached_segments_rather_than_fail():
    """Near the GPU's capacity the cached 16 MiB segments go back to the driver before a new
    one is reserved (CUDACachingAllocator ``malloc``: ``release_cached_blocks`` and retry):
    64 MiB uncapped, 32 at a 40 MiB capacity; a free block inside a segment still in use stays
    (30 MiB freed beside a live 10 MiB block of its own segment is not released)."""
    ops = [("alloc", "a", 16 * MIB), ("alloc", "b", 16 * MIB), ("free", "a", 0),
           ("free", "b", 0), ("alloc", "c", 32 * MIB)]  # fmt: skip
    assert replay(ops, capacity_bytes=40 * MIB).reserved == 32 * MIB
    ops = [("alloc", "a", 30 * MIB), ("free", "a", 0), ("alloc", "x", 10 * MIB),
           ("alloc", "b", 40 * MIB)]  # fmt: skip
    assert replay(ops).reserved == 70 * MIB  # x split off a's cached 30 MiB segment
    assert replay(ops, capacity_bytes=60 * MIB).reserved == 70 * MIB  # nothing to release
    # expandable segments unmap the pages of a free block in the middle (unmap_block): 120 MiB
    # mapped, b's 40 freed, d's 60 mapped at the end: 180, or 140 with b's pages unmapped
    ops = [("alloc", "a", 40 * MIB), ("alloc", "b", 40 * MIB), ("alloc", "c", 40 * MIB),
           ("free", "b", 0), ("alloc", "d", 60 * MIB)]  # fmt: skip
    exp = AllocatorConfig(expandable_segments=True)
    assert replay(ops, exp).reserved == 180 * MIB
    assert replay(ops, exp, capacity_bytes=150 * MIB).reserved == 140 * MIB


def test_separate_tensors_fill_holes_a_merged_request_cannot():
    """Two cached 60 MiB segments (``get_free_block``, best fit per request): a stash of two
    50 MiB tensors takes one each (reserved stays 120 MiB); the same bytes as one 100 MiB
    request fit neither and reserve a third segment (220 MiB)."""
    holes = [("alloc", "a", 60 * MIB), ("alloc", "b", 60 * MIB), ("free", "a", 0),
             ("free", "b", 0)]  # fmt: skip
    apart = replay([*holes, ("alloc_all", "s", (50 * MIB, 50 * MIB))])
    merged = replay([*holes, ("alloc_all", "s", (100 * MIB,))])
    assert (apart.allocated, apart.reserved) == (120 * MIB, 120 * MIB)
    assert (merged.allocated, merged.reserved) == (120 * MIB, 220 * MIB)


def test_the_replay_allocates_each_stash_tensor_in_its_own_block(monkeypatch):
    """The tensor program's forward saves a layer's stash as the layer's own tensors
    (:func:`~sim.memory.layer_work.stash_tensors`), one block each: a dense decoder block's
    nine (two block inputs, QKV, attention output, softmax statistics, two MLP inputs, the
    gated MLP's up-projection output and its activation), not merged."""
    import sim.memory.compose as compose

    seen: list = []
    margin = compose.allocator_margin_bytes
    monkeypatch.setattr(compose, "allocator_margin_bytes", lambda p: seen.append(p) or margin(p))
    point_memory(_prepared(), _point(p=1, w=1, m=2))
    pairs = seen[-1]
    ctx = pairs[0][0]
    first = {k[1]: n for op, k, n in tensor_program(pairs) if op == "alloc_all" and k[0] == 1}
    for j, (layer, work) in enumerate(zip(ctx.layers, ctx.layer_work, strict=True)):
        assert first[j] == pytest.approx(stash_tensors(work, layer.act_bytes))
    assert [len(first[j]) for j in (1, 2)] == [9, 9]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 40 * MIB)), min_size=1, max_size=40))
def test_reserved_is_never_below_allocated(steps):
    ops, live = [], []
    for i, (free, size) in enumerate(steps):
        if free and live:
            ops.append(("free", live.pop(0), 0))
        else:
            ops.append(("alloc", i, size))
            live.append(i)
    for cfg in (AllocatorConfig(), AllocatorConfig(expandable_segments=True)):
        peaks = replay(ops, cfg)
        assert peaks.reserved >= peaks.allocated >= peaks.requested


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2),  # free the oldest, a transient, a tensor kept
            st.one_of(st.integers(1, 60 * MIB), st.integers(1, 80).map(lambda k: k * MIB // 2)),
        ),
        min_size=1,
        max_size=40,
    ),
    st.sampled_from([0, 4]),
    st.booleans(),
    st.sampled_from([None, 0.5, 0.9]),
)
def test_a_touch_is_an_alloc_and_its_free(steps, divisions, expandable, cap_share):
    """``touch`` (a transient the replay counts without changing the cache where a cached
    block fits) gives the peaks of ``alloc`` then ``free`` of the same tensor, under every
    option and near the GPU's capacity (the cached segments released)."""
    ops, live = [], []
    for i, (kind, size) in enumerate(steps):
        if kind == 0 and live:
            ops.append(("free", live.pop(0), 0))
        elif kind == 1:
            ops += [("alloc", i, size), ("free", i, 0)]
        else:
            ops.append(("alloc", i, size))
            live.append(i)
    touched = [("touch", key, nbytes) if op == "alloc" and ("free", key, 0) in ops[k + 1 : k + 2]
               else (op, key, nbytes) for k, (op, key, nbytes) in enumerate(ops)]  # fmt: skip
    touched = [op for k, op in enumerate(touched) if k == 0 or touched[k - 1][0] != "touch"]
    cfg = AllocatorConfig(expandable_segments=expandable, roundup_power2_divisions=divisions)
    full = replay(ops, cfg)
    cap = math.inf if cap_share is None else full.allocated + cap_share * full.fragmentation_bytes
    assert replay(touched, cfg, cap) == replay(ops, cfg, cap)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 30 * MIB), max_size=5), min_size=1, max_size=12),
    st.lists(st.booleans(), min_size=12, max_size=12),
    st.booleans(),
)
def test_tensors_allocated_together_replay_as_each_alone(groups, frees, expandable):
    """``alloc_all`` / ``free_all`` (a layer's stash) give the peaks of allocating each
    tensor in order and freeing them last first."""
    together, alone = [], []
    for k, sizes in enumerate(groups):
        together.append(("alloc_all", k, tuple(sizes)))
        alone += [("alloc", (k, i), n) for i, n in enumerate(sizes)]
        if frees[k] and k > 0:  # the group before, as a backward frees an older stash
            together.append(("free_all", k - 1, 0))
            alone += [("free", (k - 1, i), 0) for i in reversed(range(len(groups[k - 1])))]
    cfg = AllocatorConfig(expandable_segments=expandable)
    assert replay(together, cfg) == replay(alone, cfg)


def test_a_touch_counts_the_whole_block_it_would_take():
    """1.5 MiB kept splits a 20 MiB segment; an 18 MiB transient then takes the whole 18.5 MiB
    rest (0.5 MiB is not split off in the large pool): allocated peaks at 20 MiB, and the
    cache is as before (a 19 MiB tensor after it still fits without a new segment)."""
    a = CachingAllocator()
    a.alloc("x", 1.5 * MIB)
    a.touch(18 * MIB)
    assert (a.peak_allocated, a.reserved, a.allocated) == (20 * MIB, 20 * MIB, int(1.5 * MIB))
    a.alloc("y", 18.5 * MIB)
    assert a.reserved == 20 * MIB


# ------------------------------------------------------------------ one model, everywhere


def test_the_engine_ledger_peaks_where_the_rank_model_says():
    """1F1B, p = 2, Megatron with dist_opt: the engine's peak on each GPU equals the rank
    model's device bytes (the same charges at t = 0, the same stashes in flight)."""
    prep = _prepared()
    point = _point(p=2, w=1, m=4)
    pm = point_memory(prep, point)
    res = resolve(prep.exp, point, prep.topology, prep.traces["tiny"], shared=prep)
    metrics, _ = evaluate(res)
    assert max(r.device_bytes for r in pm.ranks) == pytest.approx(
        metrics.peak_memory_bytes, rel=0.02
    )


@pytest.mark.parametrize(
    "framework, kw",
    [
        ("megatron-lm", {"precision": "fp8-delayed"}),  # TE's FP8 weight copies
        ("torchtitan", {"dp_shard": 4, "policy": "none"}),  # FSDP's unsharded bytes
        ("torchtitan", {"dp_shard": 4, "policy": "none", "p": 2}),  # ... kept with PP
        ("torchtitan", {"dp_shard": 2, "policy": "none"}),  # HSDP
    ],
    ids=["fp8", "fsdp", "fsdp-pp", "hsdp"],
)
def test_sim_memory_plans_as_sim_run_does(framework, kw):
    """``sim memory`` plans through the same function as ``sim run`` (FSDP's states and
    unsharded bytes in flight, the framework's additions, the low-precision weight copies): the
    peaks agree, on a model whose states dominate the GPU (h 4096: the FP8 copies alone are
    0.7 GiB of about 9)."""
    big = replace(SHAPE, layers=4, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336)
    prep = _prepared(framework, shape=big)
    point = _point(framework, w=4, m=4, **kw)
    pm = point_memory(prep, point)
    res = resolve(prep.exp, point, prep.topology, prep.traces["tiny"], shared=prep)
    metrics, _ = evaluate(res)
    assert max(r.device_bytes for r in pm.ranks) == pytest.approx(
        metrics.peak_memory_bytes, rel=0.005
    )


def test_the_loss_is_the_shapes_and_memory_refuses_it():
    """One field: memory.cross_entropy is refused, naming the shape's cross_entropy_fusion;
    the memory model refuses an unknown loss."""
    with pytest.raises(InputError, match="cross_entropy_fusion"):
        _prepared(memory={"cross_entropy": "te"})
    with pytest.raises(ValueError, match="cross_entropy_fusion"):
        loss_work(4, 4, H, V, 2, WorkOptions(), stash=0.0, loss="fused")


# ------------------------------------------------------------------ sim memory


def _experiment(tmp_path, policy="none", hardware="dgx1-v100-16gb"):
    path = tmp_path / "e.yaml"
    path.write_text(
        f"""name: e
hardware: {hardware}
models: [{{name: gpt, trace: gpt2-1.5b, global_batch: 8}}]
framework: megatron-lm
training: {{dtype: fp16}}
options: {{partition: uniform}}
sweep: {{schedule: 1f1b, stages: 1, dp_width: 2, microbatch_size: 2, memory_policy: {policy}}}
"""
    )
    return path


def test_sim_memory_names_what_overflows_and_a_change_that_fits(tmp_path):
    """GPT-2 1.5B on one 16 GB V100 with Adam (18 B/param, 27 GB) does not fit: the optimizer
    state is the largest category; sharding it over 2 replicas is not enough, so the advice
    moves on to changes that fit, and the CSV has a row per pipeline rank."""
    res = CliRunner().invoke(
        app, ["memory", str(_experiment(tmp_path)), "--out", str(tmp_path / "o")]
    )
    assert res.exit_code == 1, res.output
    assert "over capacity" in res.output
    csv = (tmp_path / "o" / "memory.csv").read_text()
    assert "largest category: optimizer" in csv and "pipeline_rank" in csv
    assert (tmp_path / "o" / "memory_ranks.png").stat().st_size > 0


def test_sim_memory_bad_input_exits_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nhardware: nope\nmodels: [{name: a, trace: gpt2-1.5b}]\n")
    res = CliRunner().invoke(app, ["memory", str(bad)])
    assert res.exit_code == 2
    assert "hardware" in res.output and "Traceback" not in res.output


def test_sim_memory_refuses_an_output_that_is_a_file(tmp_path):
    out = tmp_path / "taken"
    out.write_text("x")
    res = CliRunner().invoke(app, ["memory", str(_experiment(tmp_path)), "--out", str(out)])
    assert res.exit_code == 2
    assert "--out" in res.output and "Traceback" not in res.output
