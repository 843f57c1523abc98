"""``bench_measured_data.platform``: the functional tests' one-node GB200 runs are reported apart."""

from __future__ import annotations

from benchmarks.accuracy.bench_measured_data import DIMENSIONS, platform


def test_one_node_gb200_tests_are_a_platform_of_their_own():
    # Megatron-LM's gb200/*-1node.yaml recipes (nodes 1, gpus 4) name their cases ..._1node.
    assert platform("gpt3_mcore_te_tp2_pp1_1node[dev_dgx_gb200]", "GB200", "dev") == "GB200 1-node"
    assert platform("gpt3_mcore_te_tp2_pp1[dev_dgx_gb200]", "GB200", "dev") == "GB200"
    assert platform("bert_mcore_tp1_pp2[lts_dgx_a100]", "A100-SXM-80GB", "lts") == "A100-SXM-80GB"
    # Rows of other sources carry no framework version: no platform, so no repeated gpu grouping.
    assert platform("LLAMA3_70B", "GB200", "") == ""
    assert "platform" in DIMENSIONS
