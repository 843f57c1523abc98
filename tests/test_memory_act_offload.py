"""Megatron-Core's activation offloading (``--cpu-offloading``) as policy ``act_offload``
(issue 27): TE's synchronizer keeps ``(L - N)`` layers' activations on the GPU, by hand."""

from __future__ import annotations

import pytest

from sim.compute.decoder_shape import DecoderShape
from sim.config import parse_experiment
from sim.hardware.loader import load_hardware
from sim.memory.act_offload import ActOffloadPolicy
from sim.memory.registry import PolicyParameterError, parse_policy
from sim.point.config import PointConfig
from sim.point.experiment import Prepared
from sim.point.memory import point_memory
from sim.runs.express import policy
from sim.runs.megatron_args import read_megatron
from sim.trace.decoder import decoder_trace

SHAPE = DecoderShape(layers=8, hidden=256, heads=4, seq_len=512, vocab=1024, ffn_hidden=1024)


def _rank(pol: str, p: int = 1):
    topo = load_hardware("dgx-h100")
    trace = decoder_trace(SHAPE, name="m", microbatch_size=2, gpu=topo.gpus[0].compute)
    exp = parse_experiment(
        {
            "name": "t",
            "hardware": "dgx-h100",
            "models": [{"name": "m", "trace": "m"}],
            "training": {"global_batch": 8, "dtype": "bf16"},
            "options": {"partition": "uniform"},
            "framework": "megatron-lm",
        }
    )
    point = PointConfig(
        model="m", schedule="1f1b", stages=p, dp_width=1, microbatch_size=2, microbatches=4,
        memory_policy=pol, global_batch=8, framework="megatron-lm",
    )  # fmt: skip
    pm = point_memory(Prepared(exp, "<t>", topo, {"m": trace}), point)
    return trace, pm.ranks[0]


def test_half_of_the_layers_offloaded_halves_their_stash_and_keeps_embedding_and_head():
    """p = 1, one micro-batch in flight: activations drop by half of the 8 blocks' stash."""
    trace, none = _rank("none")
    _, half = _rank("act_offload:0.5")
    blocks = sum(x.act_bytes for x in trace.layers if x.name.startswith("block"))
    drop = none.by_category["activations"] - half.by_category["activations"]
    assert drop == pytest.approx(blocks / 2)


def test_with_pipeline_stages_each_micro_batch_in_flight_keeps_its_share():
    """p = 2, stage 0 holds 2 micro-batches in flight at its peak (1F1B warm-up p - s):
    each keeps half of its 4 blocks' stash."""
    trace, none = _rank("none", p=2)
    _, half = _rank("act_offload:0.5", p=2)
    stage0 = sum(x.act_bytes for x in trace.layers[1:5])
    drop = none.by_category["activations"] - half.by_category["activations"]
    assert drop == pytest.approx(2 * stage0 / 2)


def test_the_share_is_checked():
    assert parse_policy("act_offload:0.25").share == 0.25
    assert isinstance(parse_policy("act_offload:1"), ActOffloadPolicy)
    with pytest.raises(PolicyParameterError):
        parse_policy("act_offload")
    with pytest.raises(PolicyParameterError):
        parse_policy("act_offload:1.5")


GPT = {
    "num-layers": 80, "hidden-size": 512, "num-attention-heads": 8, "seq-length": 1024,
    "micro-batch-size": 1, "global-batch-size": 64, "bf16": True, "vocab-size": 50257,
}  # fmt: skip


def _run(**flags):
    return read_megatron(GPT | flags, name="t", source="<t>", num_gpus=8, gpu="GB200")


def test_megatrons_cpu_offloading_flags_become_the_policy():
    """--cpu-offloading-num-layers 40 of 80: act_offload:0.5, the flags approximated; no layers:
    nothing offloaded."""
    run = _run(**{"cpu-offloading": True, "cpu-offloading-num-layers": 40})
    assert run.activation_offload == 0.5
    assert policy(run)[0] == "act_offload:0.5"
    notes = {n.name: n.status for n in run.args}
    assert notes["cpu-offloading"] == notes["cpu-offloading-num-layers"] == "approximated"
    off = _run(**{"cpu-offloading": True})
    assert off.activation_offload == 0.0 and policy(off)[0] == "none"
    # with the distributed optimizer the offloaded activations stay counted on the GPU
    dist = _run(**{"cpu-offloading": True, "cpu-offloading-num-layers": 40,
                   "use-distributed-optimizer": True})  # fmt: skip
    assert policy(dist)[0] == "dist_opt"


def test_megatrons_workspace_flags_become_memory_fields():
    """--deterministic-mode: CUBLAS_WORKSPACE_CONFIG :4096:8 (Megatron's determinism.py);
    --moe-grouped-gemm with TE: TE's grouped-GEMM workspaces; --defer-embedding-wgrad-compute
    with --wgrad-deferral-limit 2: two micro-batches kept; none of them without the flags, and
    no TE workspaces under --transformer-impl local."""
    run = _run(**{"deterministic-mode": True, "moe-grouped-gemm": True,
                  "defer-embedding-wgrad-compute": True, "wgrad-deferral-limit": 2})  # fmt: skip
    assert dict(run.memory_options) == {
        "cublas_workspace_config": ":4096:8",
        "te_grouped_gemm": True,
        "defer_embedding_wgrad": 2,
    }
    assert dict(_run().memory_options) == {}
    local = _run(**{"moe-grouped-gemm": True, "transformer-impl": "local"})
    assert "te_grouped_gemm" not in dict(local.memory_options)


def test_te_default_offload_schedule_stalls_by_hand():
    """TE's DefaultOffloadSynchronizer (sim.memory.offload_schedule), by hand. L = 4, n = 2,
    forward 1 s per layer, copies 3 s: layer 0's copy runs 1..4 and layer 2 (= L - n + 0)
    waits for it (2 s); layer 1's copy queues 4..7 and layer 3 waits until 7 (2 s more).
    L = 4, n = 1, copies 2 s: the copy (1..3) ends before layer 3 starts (3): no stall.
    Backward with n = L - 1 (L = 3, n = 2, 2 s per layer, reloads 3 s): layer k's reload is
    started before its own backward (L - 1 - n + k = k), after the issued compute: layer 1
    waits 2..5, layer 0's reload runs 7..10: 3 + 3 s."""
    from sim.memory.offload_schedule import offload_stalls_s

    assert offload_stalls_s([1.0] * 4, [2.0] * 4, [3.0] * 2, [3.0] * 2, 2)[0] == 4.0
    assert offload_stalls_s([1.0] * 4, [2.0] * 4, [2.0], [2.0], 1) == (0.0, 0.0)
    assert offload_stalls_s([1.0] * 3, [2.0] * 3, [3.0] * 2, [3.0] * 2, 2)[1] == 6.0
