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

Offload memory as the implementations allocate it: :mod:`sim.hardware.host_memory` (host DRAM as the OS
reports it; torch's pinned-memory blocks), :mod:`sim.memory.memtracer` (PatrickStar's chunk
budgets and chunk-size search), :mod:`sim.memory.deepspeed` (ZeRO-Offload's and ZeRO-3's
buffers) and :mod:`sim.memory.tensors` (a layer's parameter tensors, grouped by module).
"""
