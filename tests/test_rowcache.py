"""The row cache (sim.plan.rowcache, a diskcache.Cache): several processes write one cache at
once and every entry is whole; entries of the earlier one-file-per-row format are removed."""

from __future__ import annotations

import json
import multiprocessing as mp

import pytest

from sim.plan.rowcache import open_cache

WRITERS, ENTRIES = 3, 40


def _write(args: tuple[str, int]) -> int:
    folder, writer = args
    with open_cache(folder) as cache:
        for i in range(ENTRIES):
            cache.set(f"k{i}", json.dumps({"writer": writer, "i": i, "pad": "x" * 2000}))
    return writer


@pytest.mark.timeout(120)
def test_several_processes_write_one_cache_and_every_entry_is_whole(tmp_path):
    with mp.get_context("fork").Pool(WRITERS) as pool:  # every writer writes the same keys
        assert sorted(pool.map(_write, [(str(tmp_path), w) for w in range(WRITERS)])) == [0, 1, 2]
    with open_cache(tmp_path) as cache:
        assert len(cache) == ENTRIES
        for i in range(ENTRIES):
            entry = json.loads(cache[f"k{i}"])  # one writer's whole entry, never a mix
            assert entry["i"] == i and entry["writer"] in range(WRITERS)
            assert entry["pad"] == "x" * 2000


def test_entries_of_the_earlier_format_are_removed(tmp_path):
    (tmp_path / ("0" * 64 + ".json")).write_text("{}")
    with open_cache(tmp_path) as cache:
        assert len(cache) == 0
    assert not list(tmp_path.glob("*.json"))
