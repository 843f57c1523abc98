"""Execution backends of pipesim. ``backends.torch`` profiles and replays on real devices.

Nothing here imports torch at package import time, so ``import backends`` works without it.
"""
