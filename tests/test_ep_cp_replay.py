"""Expert- and context-parallel replays on CPU gloo against a single process.

The check is independent of the simulator: 2 ranks running a tiny Mixtral-layout model
(examples/hf/tiny-mixtral-config.json: 4 experts, top-2, GQA) give the same per-micro-batch
losses as one process on the same data, over several SGD steps, and the same gradients after
the first step's backward:

* EP 2 (backends/torch/parallel/expert.py): each rank keeps 2 experts, tokens go to them by
  ``all_to_all_single`` and come back the same way; dense gradients averaged over the ranks,
  expert gradients on their owner divided by 2;
* CP 2 (backends/torch/parallel/context.py): each rank holds half of every sequence
  (load-balanced chunks), attention all-gathers keys and values, or (``p2p``,
  backends/torch/parallel/ring_attention.py) passes them around the ring with online-softmax
  accumulation, or (``a2a``, Ulysses) exchanges heads for tokens by all-to-all; gradients
  averaged. CP 4 ring: every rank's blocks travel three hops.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from backends.torch.replay import cp as cp_replay  # noqa: E402
from backends.torch.replay import ep as ep_replay  # noqa: E402
from backends.torch.replay.launch import run_ranks  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PAYLOAD = dict(
    config=str(REPO / "examples/hf/tiny-mixtral-config.json"),
    seq_len=32,
    seed=0,
    b=2,
    m=2,
    iterations=2,
    warmup=1,
    lr=0.05,
    return_grads=True,
)
TOL = dict(rtol=1e-4, atol=1e-6)


def close(a, b) -> None:
    torch.testing.assert_close(torch.tensor(a), torch.tensor(b), **TOL)


# The expert-parallel replay and the three 2-rank context-parallel ones run one after another in
# one launch of two rank processes, once per session (each process starts Python and imports
# torch and transformers); each test checks its own replay's ranks against its own reference.
TWO_RANK_JOBS = [
    ("backends.torch.replay.ep:run_rank", PAYLOAD),
    *(
        ("backends.torch.replay.cp:run_rank", {**PAYLOAD, "comm": c})
        for c in ("all_gather", "p2p", "a2a")
    ),
]


def _make_two_rank_replays(folder: Path) -> None:
    import json

    jobs = [list(job) for job in TWO_RANK_JOBS]
    ranks = run_ranks("tests.helpers:run_jobs_in_turn", {"jobs": jobs}, nproc=2, timeout_s=600)
    (folder / "ranks.json").write_text(json.dumps(ranks))


def _ranks(session_once, target: str, payload: dict) -> list:
    """Every rank's result of ``target`` on ``payload`` (one of TWO_RANK_JOBS) from the shared
    launch."""
    import json

    folder = session_once("ep-cp-two-rank-replays", _make_two_rank_replays)
    i = TWO_RANK_JOBS.index((target, payload))
    return [rank[i] for rank in json.loads((folder / "ranks.json").read_text())]


@functools.cache
def _cp_reference() -> dict:
    """The one-process run every context-parallel replay is checked against (read only)."""
    return cp_replay.serial_run(PAYLOAD)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_expert_parallel_replay_equals_one_process(session_once):
    ranks = _ranks(session_once, "backends.torch.replay.ep:run_rank", PAYLOAD)
    ref = ep_replay.serial_run(PAYLOAD, 2)
    for r in range(2):
        close(ranks[r]["losses"], ref["losses"][r])
    for name, full in ref["grads"].items():
        if "experts" in name:  # rank r holds experts 2r, 2r+1: its slice of the full tensor
            got = ranks[0]["grads"][name] + ranks[1]["grads"][name]
        else:
            got = ranks[0]["grads"][name]
            close(ranks[1]["grads"][name], full)
        close(got, full)


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize(("comm", "cp"), [("all_gather", 2), ("p2p", 2), ("p2p", 4), ("a2a", 2)])
def test_context_parallel_replay_equals_one_process(comm, cp, session_once):
    payload = {**PAYLOAD, "comm": comm}
    if cp == 2:
        ranks = _ranks(session_once, "backends.torch.replay.cp:run_rank", payload)
    else:
        ranks = run_ranks("backends.torch.replay.cp:run_rank", payload, nproc=cp, timeout_s=360)
    ref = _cp_reference()
    mean = [sum(xs) / cp for xs in zip(*(r["losses"] for r in ranks), strict=True)]
    assert len(ranks) == cp
    close(mean, ref["losses"])
    for name, full in ref["grads"].items():
        for r in ranks:
            close(r["grads"][name], full)


def test_context_parallel_chunks_balance_the_causal_mask():
    from backends.torch.parallel.context import positions

    assert positions(16, 2, 0).tolist() == [0, 1, 2, 3, 12, 13, 14, 15]
    assert positions(16, 2, 1).tolist() == [4, 5, 6, 7, 8, 9, 10, 11]
    # each rank's queries see the same number of (query, key) pairs under the causal mask
    pairs = [int(sum(p + 1 for p in positions(64, 4, r).tolist())) for r in range(4)]
    assert len(set(pairs)) == 1
