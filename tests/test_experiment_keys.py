"""The docs list every experiment key as the schema describes it: ``docs/hooks.py`` puts the
table of ``scripts/experiment_keys.py`` (from the pydantic models of ``sim/config/``) and the JSON
schema into ``docs/reference/experiment.md`` when the site is built."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from sim.config import ExperimentConfig

ROOT = Path(__file__).resolve().parents[1]


def _module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_experiment_page_gets_every_key_and_the_json_schema():
    gen = _module("experiment_keys", ROOT / "scripts" / "experiment_keys.py")
    hooks = _module("docs_hooks", ROOT / "docs" / "hooks.py")
    keys = [k for k, *_ in gen.rows()]
    assert {"sweep.virtual_stages", "models[].trace", "options.boundaries"} <= set(keys)
    page = (ROOT / "docs" / "reference" / "experiment.md").read_text()
    rendered = hooks.on_page_markdown(page)
    missing = [k for k in keys if f"| `{k}` |" not in rendered]
    assert not missing, missing
    schema = ExperimentConfig.model_json_schema()
    assert json.dumps(schema, indent=1).splitlines()[1] in rendered
