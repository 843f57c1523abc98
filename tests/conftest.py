"""Shared test setup: hypothesis profiles and the ``slow`` tier.

``pytest -m "not slow"`` skips the multi-process torch replays and the end-to-end run (the
``slow`` marker is registered in pyproject.toml); CI runs everything. A failing property
test prints the blob that reproduces it (``@reproduce_failure``).
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("pipesim", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "pipesim"))
