"""Shared test setup: hypothesis profiles and the ``slow`` tier.

``pytest -m "not slow"`` skips the multi-process torch replays and the end-to-end run (the
``slow`` marker is registered in pyproject.toml); CI runs everything. A failing property
test prints the blob that reproduces it (``@reproduce_failure``).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import NamedTuple

import pytest
from hypothesis import settings

settings.register_profile("pipesim", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "pipesim"))

ROOT = Path(__file__).resolve().parents[1]


class ShippedRun(NamedTuple):
    """What ``sim run experiments/<name> --out OUT --jobs 2 --no-plots`` gave: its exit code,
    its console output and OUT."""

    exit_code: int
    output: str
    out: Path


@pytest.fixture(scope="session")
def session_once(tmp_path_factory):
    """``session_once(name, make)``: the folder ``make(folder)`` filled, called once per test
    session by whichever test asks first (under xdist: on whichever worker; the others wait for
    it on a lock and read its files), so tests that check different things of one expensive run
    share it. ``make`` writes files only; a ``make`` that raised is not retried: the tests that
    ask after it fail with its error."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's folder, shared by its workers
    root = base / "session-once"
    root.mkdir(exist_ok=True)

    def once(name: str, make) -> Path:
        folder, done, error = root / name, root / f"{name}.done", root / f"{name}.error"
        with open(root / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            if not done.is_file() and not error.is_file():
                folder.mkdir()
                try:
                    make(folder)
                except BaseException as exc:
                    error.write_text(f"{type(exc).__name__}: {exc}")
                    raise
                done.touch()
        if error.is_file():
            pytest.fail(f"the shared run {name!r} failed: {error.read_text()}")
        return folder

    return once


@pytest.fixture(scope="session")
def shipped_run(session_once):
    """``shipped_run("dgx1.yaml")``: ``sim run experiments/dgx1.yaml --out OUT --jobs 2
    --no-plots`` run once per session (:func:`session_once`)."""

    def make(folder: Path, name: str) -> None:
        from typer.testing import CliRunner

        from sim.cli import app

        args = ["run", str(ROOT / "experiments" / name), "--out", str(folder / "out")]
        res = CliRunner().invoke(app, [*args, "--jobs", "2", "--no-plots"])
        (folder / "output").write_text(res.output)
        (folder / "code").write_text(str(res.exit_code))

    def run(name: str) -> ShippedRun:
        folder = session_once(f"run-{name}", lambda f: make(f, name))
        code, text = (folder / "code").read_text(), (folder / "output").read_text()
        return ShippedRun(int(code), text, folder / "out")

    return run


# -- the order the tests run in: the longest first -----------------------------------------------
# Under xdist's work stealing (scripts/test.sh: ``-n 2 --dist worksteal``) each worker starts on
# its half of the collection in order and an idle worker steals the tail of the busy one's queue,
# so with the long tests first the two workers end within about one short test of each other
# (the longest-first rule), instead of one of them starting a 100-CPU-second replay last while the
# other idles. Costs: CPU seconds of each test (self and children, and the CPU of the rank
# processes the forkserver of backends.torch.replay.start forked for it), measured at 72663e7
# (``python -m pytest -n 2 --dist worksteal`` with a per-test ``getrusage`` hook that adds the
# forkserver's ``/proc`` times); a prefix of a node id matches every test under it. Tests under
# 6 CPU s are left out (mixtral and megatron-scaling too, since test_cli.py runs them on a cut
# grid). The rest keep their order: the other ``slow`` tests next, then everything else, each in
# collection order, so module fixtures are set up once per module part.
LONGEST_FIRST_CPU_S = {
    "tests/test_numerics.py::test_the_tied_hf_config_replays_the_other_schedules_with_equal_numerics": 55,
    "tests/test_bands.py::test_shipped_bands_are_the_validation_residuals": 44,
    "tests/test_cli.py::test_every_shipped_experiment_runs[llama3-70b-overlap-64xh100.yaml]": 31,
    "tests/test_cli.py::test_every_shipped_experiment_runs[llama3-70b-fp8-64xh100.yaml]": 29,
    "tests/test_cli.py::test_every_shipped_experiment_runs[dgx1-memory.yaml]": 26,
    "tests/test_gpu_ground_truth.py::test_driver_and_checks_on_cpu": 20,
    "tests/test_cli.py::test_every_shipped_experiment_runs[deepseek-v3-8x-dgx-h100.yaml]": 18,
    "tests/test_cli.py::test_every_shipped_experiment_runs[llama3.1-8b-torchtitan-fsdp2-tp.yaml]": 18,
    "tests/test_cli.py::test_every_shipped_experiment_runs[mpress-dgx1.yaml]": 18,
    "tests/test_user_model.py::test_concurrent_profile_of_a_user_model": 17,
    "tests/test_user_model.py::test_profile_simulate_replay_user_model[llama]": 17,
    "tests/test_numerics.py::test_the_shared_weight_model_replays_every_schedule_family_with_equal_numerics": 15,
    "tests/test_validate_e2e.py::test_profile_simulate_replay_compare": 15,
    "tests/test_user_model.py::test_profile_simulate_replay_user_model[cnn]": 12,
    "tests/test_cli.py::test_every_shipped_experiment_runs[dgx1-schedules.yaml]": 11,
    "tests/test_group_validate.py::test_validate_replays_ep_and_cp_with_equal_losses": 11,
    "tests/test_planner.py::test_resolved_bound_only_prunes_what_does_not_fit": 11,
    "tests/test_validate_e2e.py::test_validate_replays_the_multi_stage_schedules": 11,
    "tests/test_numerics.py::test_the_tied_encoder_replays_with_the_references_arithmetic_to_the_bit[1f1b-ours]": 10,
    "tests/test_ep_cp_replay.py::test_context_parallel_replay_equals_one_process[p2p-2]": 9,
    "tests/test_shared_params.py::test_profiling_finds_the_shared_ffn_and_the_tied_head_and_counts_them_once": 9,
    "tests/test_cli.py::test_every_shipped_experiment_runs[llama3-70b-64xh100.yaml]": 8,
    "tests/test_ep_cp_replay.py::test_context_parallel_replay_equals_one_process[p2p-4]": 8,
    "tests/test_backend_torch.py::test_calibrate_writes_loadable_hardware": 7,
    "tests/test_user_model.py::test_fake_analysis_matches_real_saved_bytes_and_counts_attention": 6,
}


def _known_cpu_s(nodeid: str) -> float:
    """The measured cost of the longest prefix of ``nodeid`` in the table (0 if none)."""
    hits = [p for p in LONGEST_FIRST_CPU_S if nodeid.startswith(p)]
    return LONGEST_FIRST_CPU_S[max(hits, key=len)] if hits else 0.0


@pytest.hookimpl(trylast=True)  # after pytest's own grouping by fixture parameters
def pytest_collection_modifyitems(config, items):
    """Longest known tests first, then the other ``slow`` ones, then the rest (a stable sort)."""
    items.sort(key=lambda it: (-_known_cpu_s(it.nodeid), it.get_closest_marker("slow") is None))
