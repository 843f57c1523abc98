"""One MTP layer's weights for every depth (Megatron-Core ``mtp_use_repeated_layer``) and the
expert capacity of Megatron-Bridge's Nemotron 3 Super H100 recipe, read through to the trace
(hand counts; NVIDIA/Megatron-LM@d98e8a64 ``megatron/core/transformer/
multi_token_prediction.py`` lines 1183-1214 and 1958-2049, ``moe/token_dispatcher.py`` lines
1112-1124; NVIDIA-NeMo/Megatron-Bridge v0.6.0 ``recipes/nemotronh/h100/nemotron_3_super.py``
lines 98-102 and 197-204)."""

from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd

from sim.compute.decoder import DecoderShape
from sim.compute.moe_shape import PROB_BYTES, MoEShape
from sim.compute.routing import Routing, expert_rows
from sim.hardware.loader import load_hardware
from sim.parallel.expert import expert_plan
from sim.runs.bridge_hopper import hopper_entry
from sim.runs.express import Expressed, express
from sim.runs.measured_csv import row_run
from sim.trace.decoder import decoder_trace
from tests.bridge_rows import SUPER_H100_26_08

H100 = load_hardware("dgx-h100").gpus[0].compute


def test_repeated_mtp_layer_holds_its_weights_once_and_runs_every_depth():
    # h 8, 2 heads, ffn 16 (gated), bf16. One MTP depth: eh_proj 2h x h = 128, enorm, hnorm
    # and final norm 3h = 24, its block: attention 4 h^2 = 256, two norms 16, MLP 3 h ffn = 384
    one_depth = 128 + 24 + 256 + 16 + 384
    apart, shared = (decoder_trace(DecoderShape(1, 8, 2, 4, 16, 16, mtp_layers=2, mtp_shared=s),
                                   name="t", microbatch_size=1, gpu=H100)
                     for s in (False, True))  # fmt: skip
    a, s = ([x for x in t.layers if x.name.startswith("mtp.")] for t in (apart, shared))
    assert [x.param_bytes for x in a] == [2.0 * one_depth] * 2
    assert [x.param_bytes for x in s] == [2.0 * one_depth, 0.0]
    assert [x.fwd_s for x in s] == [x.fwd_s for x in a]
    counted = (apart.provenance["parameters"]["total"], shared.provenance["parameters"]["total"])
    assert counted[0] - counted[1] == one_depth


SUPER = SUPER_H100_26_08


def test_super_h100_recipe_runs_two_shared_mtp_depths_and_padded_capacity():
    flags = hopper_entry(SUPER, "26.08").flags
    assert flags["mtp-num-layers"] == "2" and flags["mtp-use-repeated-layer"] is True
    assert float(flags["moe-expert-capacity-factor"]) == 1.1
    assert flags["moe-pad-expert-input-to-capacity"] is True
    ex = express(row_run(pd.Series(SUPER), source="t"))
    assert isinstance(ex, Expressed)
    m = ex.shape
    assert (m.mtp_layers, m.mtp_shared) == (2, True)
    assert (m.moe.capacity_factor, m.moe.pad_to_capacity) == (1.1, True)
    # 4096 tokens a rank, top-22 of 512 experts: a balanced 176 a source and expert (the
    # recipe's "5,632-token mean" over the 32 EP ranks); capacity ceil(176 x 1.1) = 194, padded
    loads = (1 / 512,) * 512
    balanced = expert_rows(4096, 32, 512, 22, loads)
    padded = expert_rows(4096, 32, 512, 22, loads, m.moe.capacity_factor, m.moe.pad_to_capacity)
    assert balanced[0] == 32 * 176 == 5632
    assert padded[0] == 32 * math.ceil(176 * 1.1) == 6208
    # without padding the balanced load fits under the capacity: nothing dropped
    assert expert_rows(4096, 32, 512, 22, loads, 1.1, False)[0] == 5632


def test_hybridep_pads_after_its_dispatch_the_alltoall_before():
    # 8 tokens a rank, top-2 of 8 experts on 2 EP ranks, capacity factor 1.5, padded: a balanced
    # 2 rows a source and expert, capacity ceil(2 x 1.5) = 3. Every expert computes 2 sources x 3
    # = 6 rows either way; the alltoall dispatcher sends the padded 4 x 3 = 12 rows to the other
    # rank (it pads in its permute), HybridEP the routed 4 x 2 = 8 (it pads after the dispatch,
    # token_dispatcher.py lines 1112-1124) and, nothing cut, keeps the dedup of routed copies
    h, d = 16, 2
    moe = MoEShape(h, 8, 2, 32, capacity_factor=1.5, pad_to_capacity=True)
    a2a = expert_plan(moe, Routing(), 8, 2, 1, d)
    hep = expert_plan(replace(moe, hybridep=True), Routing(), 8, 2, 1, d)
    assert a2a.rows == hep.rows == ((6.0,) * 4,) * 2
    assert a2a.dispatch[0][1] == 12 * (h * d + PROB_BYTES)
    assert hep.dispatch[0][1] == 8 * (h * d + PROB_BYTES)
    assert (a2a.routed, hep.routed) == (None, (8, 2))


def test_super_without_an_h100_recipe_entry_keeps_its_base_recipes_shared_mtp():
    # every Bridge recipe of Super sets two depths of one shared layer (bridge_fallback.SHARED_MTP)
    row = SUPER | {"table": "26.06 / Pre-Training Performance / Model: Nemotron_3_Super",
                   "precision": "FP8-CS", "tp": 2, "pp": 1, "ep": 64, "seq_len": 8192,
                   "gbs": 512}  # fmt: skip
    assert hopper_entry(row, "26.06") is None
    ex = express(row_run(pd.Series(row), source="t"))
    assert isinstance(ex, Expressed)
    assert (ex.shape.mtp_layers, ex.shape.mtp_shared) == (2, True)
