"""Memory: model-state accounting, per-stage plans and the memory-saving policies.

A policy (one per file, registered in :mod:`sim.memory.registry`) turns each stage's
:class:`~sim.memory.base.StageContext` into a :class:`~sim.memory.plan.StagePlan`, which the
engine executes: ``none``, ``recompute`` (full / selective / N layers), ``cpu_swap``,
``d2d_swap`` (MPress), ``chunked`` (PatrickStar), ``zero_offload`` and ``auto`` (the planner);
``a|b|...`` gives each stage its own. Planning estimates are in :mod:`sim.memory.estimate`.
"""
