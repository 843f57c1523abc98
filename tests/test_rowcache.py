"""The row cache (sim.plan.rowcache, a diskcache.Cache): several processes write one cache at
once and every entry is whole; entries of the earlier one-file-per-row format are removed; a
point's key is the hash of its documented fields."""

from __future__ import annotations

import json
import multiprocessing as mp
from dataclasses import asdict
from pathlib import Path

import pytest

from sim.config import config_hash, load_experiment
from sim.plan.point_row import model_code_hash, point_cache_key
from sim.plan.rowcache import open_cache
from sim.plan.sweep import expand
from sim.point.experiment import prepare
from sim.point.rows import ROW_FORMAT

ROOT = Path(__file__).resolve().parents[1]

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


def test_a_points_cache_key_hashes_its_fields_as_documented():
    # point_row.point_cache_key makes the JSON text of a model's other fields once; the key is
    # still config_hash of all of them (a row cached before is found again)
    exp = load_experiment(ROOT / "experiments" / "dgx1.yaml")
    prep = prepare(exp, "dgx1.yaml")
    points = expand(prep)[0]
    for point in points[:3] + points[-3:]:
        trace = prep.traces[point.model]
        fields = {
            "model_code": model_code_hash(),
            "row_format": ROW_FORMAT,
            "point": point.model_dump(),
            "trace": [asdict(layer) for layer in trace.layers],
            "mb": trace.microbatch_size,
            "hardware": repr(prep.topology.gpus)
            + repr(prep.topology.links)
            + repr(prep.topology.hosts),
            "training": exp.training.model_dump(),
            "memory": exp.memory.model_dump(),
            "options": exp.options.model_dump(),
        }
        assert point_cache_key(prep, point) == config_hash(fields)


def test_a_points_cache_key_changes_with_the_experiments_memory_settings():
    # the memory: section (allocator, workspaces, optimizer dtypes) changes a row's peak: a row
    # cached with other memory settings is not reused
    exp = load_experiment(ROOT / "experiments" / "dgx1.yaml")
    other = exp.model_copy(
        update={"memory": exp.memory.model_copy(update={"expandable_segments": True})}
    )
    a, b = prepare(exp, "dgx1.yaml"), prepare(other, "dgx1.yaml")
    point = expand(a)[0][0]
    assert point_cache_key(a, point) != point_cache_key(b, point)
