#!/usr/bin/env bash
# Set up a virtual environment (torch 2.13.0 CPU build first, so nothing resolves a newer torch),
# install pipesim with its test extras, lint (ruff check, ruff format --check), type-check (mypy,
# zero errors), check the import layers (lint-imports: the contracts in pyproject.toml), build the
# docs site (mkdocs build --strict, offline: a broken link or reference fails it), and run the
# test suite (all of it, the slow multi-process tests included;
# `bash scripts/test.sh -m "not slow"` runs the fast tier) on two worker processes
# (pytest-xdist, work stealing: an idle worker takes tests from the busy one, and the longest
# tests start first, tests/conftest.py; `-n 0` runs them in this process).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
python -m pip install -q torch==2.13.0
python -m pip install -q -e '.[torch,test,hf,docs]' -c scripts/constraints.txt
ruff check .
ruff format --check .
mypy sim backends
lint-imports
NO_MKDOCS_2_WARNING=1 mkdocs build --strict --quiet --site-dir "$(mktemp -d)"
# Byte-compile pipesim once: where PYTHONDONTWRITEBYTECODE is set (as on this project's machines)
# every process the tests start (torch rank processes, CLI runs, sweep workers) would otherwise
# compile sim/ and backends/ from source again (about 0.3 CPU s each, several hundred starts).
env -u PYTHONDONTWRITEBYTECODE python -m compileall -q sim backends
python -m pytest -n 2 --dist worksteal "$@"
