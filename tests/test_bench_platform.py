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


def test_copied_golden_values_count_in_no_error():
    # The TP 1 and TP 2 lts golden files of hybrid_mr are byte-identical (memory_rows.COPIED_GOLDEN):
    # neither is a measurement of its own configuration, so neither error is counted.
    import pandas as pd

    from benchmarks.accuracy.bench_measured_data import errors

    names = [
        "hybrid_mr_mcore_te_tp2_pp1_cp1_dgx_a100_1N8G[lts_dgx_a100]",
        "hybrid_mr_mcore_te_tp2_pp1_cp1_dgx_a100_1N8G[dev_dgx_a100]",
    ]
    df = pd.DataFrame(
        {
            "model": names,
            "predicted_s": [2.0, 2.0],
            "measured_s": [1.0, 4.0],
            "predicted_bytes": [3.0, 3.0],
            "measured_bytes": [2.0, 4.0],
        }  # fmt: skip
    )
    out = errors(df)
    assert out.time_error.isna().tolist() == [True, False]
    assert out.memory_error.isna().tolist() == [True, False]
    assert out.time_error.iloc[1] == -0.5 and out.memory_error.iloc[1] == -0.25
