"""The ``Example:`` sections of docstrings run as tests (doctest), module by module.

Every module of ``sim`` is collected; the torch backend's modules too when torch is installed.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import sim


def _modules(package) -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + "."))


SIM_MODULES = _modules(sim)
TORCH_MODULES = [
    "backends.torch.replay.memory",
    "backends.torch.profile.saved_bytes",
    "backends.torch.replay.runtime",
    "backends.torch.replay.replayer",
    "backends.torch.devices",
    "backends.torch.profile.user_cli",
    "backends.torch.models.user_spec",
]


def _run(name: str) -> int:
    """Run ``name``'s docstring examples; fail with doctest's report. Returns examples run."""
    module = importlib.import_module(name)
    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    out: list[str] = []
    for test in finder.find(module, name):
        runner.run(test, out=out.append)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, "".join(out)
    return result.attempted


@pytest.mark.parametrize("name", SIM_MODULES)
def test_sim_docstring_examples(name: str) -> None:
    _run(name)


@pytest.mark.parametrize("name", TORCH_MODULES)
def test_backend_docstring_examples(name: str) -> None:
    pytest.importorskip("torch")
    assert _run(name) > 0


def test_examples_exist_where_promised() -> None:
    """The public classes below carry a runnable example (a regression guard, not a count)."""
    for name in (
        "sim.parallel.partition",
        "sim.memory.replay",
        "sim.plugins",
        "sim.memory.registry",
        "sim.schedules.analysis",
        "sim.schedules.action",
        "sim.schedules.base",
    ):
        module = importlib.import_module(name)
        examples = sum(len(t.examples) for t in doctest.DocTestFinder().find(module, name))
        assert examples > 0, name
