"""When each functional test's golden values were generated: ``golden_generation.csv``.

Megatron-LM's functional tests ran in CI images that changed over time (the LTS image was
built on ``nvcr.io/nvidia/pytorch:24.01-py3`` until NVIDIA/Megatron-LM@23a1dcaf74, 2025-11-06,
"Bump LTS container", then on 25.09: ``.gitlab/stages/01.build.yml``), and a golden-values file
keeps the figures of the run that last wrote them. This script walks a Megatron-LM clone's
history and, for every golden-values file a row of ``megatron_golden_a100_gb200.csv`` cites,
finds the oldest commit of the newest unbroken run of commits with the same
``mem-max-allocated-bytes`` values: the commit that generated them (later commits that left the
values as they were, e.g. "Remove leading NaN iteration times", are skipped). The rows' software
environment follows from the date (:mod:`memory_rows`). Metadata about the measured rows, not
measurements: nothing is fitted to it.

Run: ``python benchmarks/accuracy/golden_generation.py MEGATRON_GIT_DIR [--out CSV]`` (the git
directory of a Megatron-LM clone that has commit d98e8a64dd).
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "golden_generation.csv"
sys.path.insert(0, str(HERE.parents[1]))

from benchmarks.accuracy.memory_rows import MEASURED  # noqa: E402

HEAD = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"
TESTS = "tests/functional_tests/test_cases"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


def _history(repo: Path) -> dict[str, list[tuple[str, str]]]:
    """Every file under the test cases -> its commits ``(sha, date)``, newest first."""
    out: dict[str, list[tuple[str, str]]] = {}
    cur = ("", "")
    log = _git(repo, "log", "--format=@@%H %ad", "--date=short", "--name-only", HEAD, "--", TESTS)
    for line in log.splitlines():
        if line.startswith("@@"):
            sha, date = line[2:].split()
            cur = (sha, date)
        elif line.strip():
            out.setdefault(line.strip(), []).append(cur)
    return out


def _mem(repo: Path, sha: str, path: str) -> str | None:
    try:
        data = json.loads(_git(repo, "show", f"{sha}:{path}"))
    except (subprocess.CalledProcessError, json.JSONDecodeError):
        return None
    return json.dumps(data.get("mem-max-allocated-bytes"), sort_keys=True)


def generated(repo: Path, path: str, commits: list[tuple[str, str]]) -> tuple[str, str]:
    """``(sha, date)`` of the commit that generated ``path``'s memory values."""
    if not commits:
        return ("", "")
    values = _mem(repo, commits[0][0], path)
    gen = commits[0]
    for sha, date in commits[1:]:
        if _mem(repo, sha, path) != values:
            break
        gen = (sha, date)
    return gen


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("repo", type=Path, help="a Megatron-LM git directory")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    hist = _history(args.repo)
    paths: list[str] = []
    with open(MEASURED / "megatron_golden_a100_gb200.csv", newline="") as f:
        for row in csv.DictReader(f):
            if row["peak_mem_gib"] and row["source_ref"]:
                path = row["source_ref"].split(":", 1)[1]
                if path not in paths:
                    paths.append(path)
    with open(args.out, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["path", "generated_commit", "generated_date"])
        for path in sorted(paths):
            sha, date = generated(args.repo, path, hist.get(path, []))
            w.writerow([path, sha[:10], date])
    print(f"{len(paths)} golden-values files -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
