"""The README documents every experiment key: its table is the schema's (``sim/config.py``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _generator():
    spec = importlib.util.spec_from_file_location(
        "readme_keys", ROOT / "scripts" / "readme_keys.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_experiment_key_is_in_the_readme_as_the_schema_describes_it():
    gen = _generator()
    readme = (ROOT / "README.md").read_text()
    keys = [k for k, *_ in gen.rows()]
    assert {"sweep.virtual_stages", "models[].trace", "options.boundaries"} <= set(keys)
    missing = [k for k in keys if f"| `{k}` |" not in readme]
    assert not missing, f"keys not in README.md: {missing}; run python scripts/readme_keys.py"
    assert gen.table() in readme, "README.md's key table is stale: python scripts/readme_keys.py"
