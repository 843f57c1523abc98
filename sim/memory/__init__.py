"""Memory: model-state accounting, per-stage plans and the memory-saving policies.

A policy (one per file, registered in :mod:`sim.memory.registry`) turns each stage's
:class:`~sim.memory.context.StageContext` into a :class:`~sim.memory.plan.StagePlan`, which the
engine executes: ``none``, ``recompute`` (full / selective / N layers), ``cpu_swap``,
``d2d_swap`` (MPress), ``chunked`` (PatrickStar), ``zero_offload`` and ``auto`` (the planner);
``a|b|...`` gives each stage its own. Planning estimates are in :mod:`sim.memory.estimate`.

Memory as a PyTorch process holds it: :mod:`sim.hardware.capacity` (the capacity CUDA reports,
the runtime reserve's sourced defaults), :mod:`sim.memory.reserve` (what each stage charges at
t = 0 besides model states: reserve, allocator margin, working memory),
:mod:`sim.memory.states` (bytes per parameter per schedule), :mod:`sim.memory.attention`
(flash vs math attention stash) and :mod:`sim.memory.peak` (the one peak computation behind
``results.csv`` and the reports).
"""
