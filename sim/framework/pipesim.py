"""The default profile: pipesim's own torch runtime, as ``sim validate`` replays it.

torch pipelining's schedules (``torch.distributed.pipelining``), asynchronous sends, DDP-style
25 MiB gradient buckets overlapped with the last backward, every layer counted once by the even
split. Every setting is :class:`~sim.framework.base.Framework`'s default, so an experiment
without ``framework:`` simulates exactly what it did before profiles existed.
"""

from __future__ import annotations

from typing import ClassVar

from sim.framework.base import Framework


class Pipesim(Framework):
    """pipesim's torch runtime (``backends/torch``; module doc)."""

    name: ClassVar[str] = "pipesim"
    description: ClassVar[str] = (
        "pipesim's own torch runtime as sim validate replays it (default): torch pipelining, "
        "asynchronous sends, 25 MiB DDP buckets overlapped with the backward"
    )
