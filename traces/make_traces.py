"""Regenerate the shipped traces in this directory: ``python traces/make_traces.py``.

Run from the repository root (or anywhere: paths are relative to this file). Writes
``<name>.csv`` + ``<name>.yaml`` for gnmt16, vgg16, gpt2-1.5b, bert-large and gpt-5b; see
:mod:`sim.trace.shipped` for what each one is and ``README.md`` here for sources and licences.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from sim.trace.shipped import build_shipped  # noqa: E402


def main() -> None:
    for path in build_shipped(HERE, pipedream_dir=HERE / "pipedream"):
        print(path.relative_to(HERE.parent))


if __name__ == "__main__":
    main()
