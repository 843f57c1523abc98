"""HybridEP under Megatron's flex dispatcher with expert tensor parallelism: the routing map and
the probabilities have ``etp x E`` columns (NVIDIA/Megatron-LM@d98e8a64 ``token_dispatcher.py``
lines 1906-1917), the preprocessing reads its NVLink domain's share of them, the forward
dispatch carries them per destination, and the measured bandwidths count the benchmark's own
probabilities out (DeepEP@94a9f8f6 hybrid-ep; sim.compute.hybridep, sim.comm.ep_dispatch)."""

from __future__ import annotations

import pytest

from sim.compute.decoder import DecoderShape
from sim.compute.moe import moe_bwd, moe_fwd
from sim.compute.moe_shape import MoEShape
from sim.compute.routing import Routing
from sim.parallel.decoder_comm import group_ops
from sim.parallel.expert import expert_plan
from sim.parallel.layout import ParallelLayout


def _ops(etp: int, domains: int = 1):
    moe = MoEShape(512, 8, 2, 256, hybridep=True, hybridep_domains=domains)
    m = DecoderShape(2, 512, 8, 256, 1000, 1024, moe=moe)
    par = ParallelLayout(dp_replicate=2 * etp, ep=2, etp=etp)
    plan = expert_plan(moe, Routing(), 256, 2, etp, 2)
    return plan, group_ops("moe_block", m, 1, 2, par, (0.0, 0.0), plan)[0]


def test_routing_map_gathered_with_etp_times_e_columns():
    """256 tokens per rank, E = 8 experts, EP 2: etp 1 gathers 256 * 8 * 2 bytes; etp 2 gathers
    from 2 * 2 ranks maps of 2 * 8 columns, 256 * 16 * 4 = 16384."""
    gathers = [
        [op.nbytes for op in _ops(etp)[1] if op.kind == "all_gather" and op.group == "ep"]
        for etp in (1, 2)
    ]
    assert gathers == [[256 * 8 * 2], [16384]]


def test_preprocessing_reads_its_domains_columns_of_every_gathered_token():
    """E = 4 experts over EP 2 (2 local), expert TP 2, r = 3 tokens: 4 sources, 8 columns.
    One domain: 12 tokens * 8 = 96 bytes read + 12 * 2 * 5 metadata = 216; over 2 domains
    12 * 4 = 48 read, 168 in all."""

    def prep(domains):
        shape = MoEShape(4, 4, 2, 8, hybridep=True, hybridep_domains=domains)
        fwd = moe_fwd(shape, 3, 3, (1.5, 1.5), 2, etp=2)
        return [k.bytes for k in fwd if k.name == "hybridep_preprocess"]

    assert prep(1) == [216.0]
    assert prep(2) == [168.0]


def test_forward_dispatch_carries_the_domains_probabilities():
    """Rows of 512 bf16 (1024 bytes), E = 8: each pair of the routed copies counts 1024 + 4 bytes
    per copy; HybridEP sends 1024 + 4 * 8 per token and destination at etp 1, 1024 + 4 * 16 at
    etp 2 in one domain, 1024 + 4 * 8 over 2 domains. The combine is unchanged."""
    for etp, domains, cols in ((1, 1, 8), (2, 1, 16), (2, 2, 8)):
        plan, ops = _ops(etp, domains)
        dispatch, combine = [op for op in ops if op.kind == "alltoall" and op.group == "ep"]
        want = plan.dispatch[0][1] * (1024 + 4 * cols) / 1028
        assert dispatch.pairs[0][1] == pytest.approx(want)
        assert combine.pairs == plan.combine


def test_flex_dispatcher_replicates_map_and_probabilities_over_expert_tp():
    """r = 3 tokens, E = 4, etp 2: forward copy of bool + fp32 [3, 4] into [3, 8], read once and
    written twice: 12 * 5 + 24 * 5 = 180 bytes; backward sums the [3, 8] fp32 gradients into
    [3, 4]: 24 * 4 + 12 * 4 = 144. Nothing at etp 1."""

    def copies(etp):
        shape = MoEShape(4, 4, 2, 8, hybridep=True)
        fwd = moe_fwd(shape, 3, 3, (1.5, 1.5), 2, etp=etp)
        dx, _ = moe_bwd(shape, 3, 3, (1.5, 1.5), 2, etp=etp)
        return [k.bytes for k in fwd + dx if k.name.startswith("flex_replicate")]

    assert copies(2) == [180.0, 144.0]
    assert copies(1) == []
