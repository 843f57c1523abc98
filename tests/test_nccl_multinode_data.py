"""measurements/nccl-tests/allreduce_multinode.csv: rows parse, carry provenance, and a measured
row's busbw is nccl-tests' own formula of its time."""

from __future__ import annotations

import pytest

from benchmarks.accuracy.accuracy_comm_multinode import read_rows


def test_multinode_nccl_tests_rows_parse_with_provenance():
    """measurements/nccl-tests/allreduce_multinode.csv: every row names its URL and its GPUs,
    and a measured row's busbw is nccl-tests' own, bytes / time * 2 (n - 1) / n
    (nccl-tests doc/PERFORMANCE.md), to the 0.1 % the printed figures carry."""
    rows = read_rows()
    assert {r["kind"] for r in rows} <= {"measured", "expected"}
    for r in rows:
        assert r["url"].startswith("https://github.com/") and r["gpu"] and r["preset"]
        if r["kind"] == "measured":
            n = int(r["servers"]) * int(r["gpus_per_server"])
            busbw = float(r["bytes"]) / float(r["time_us"]) / 1e3 * 2 * (n - 1) / n
            assert busbw == pytest.approx(float(r["busbw_GBps"]), rel=2e-3)
