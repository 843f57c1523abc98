"""torchtitan's AsyncTP switch (``enable_async_tensor_parallel``) as options of the torchtitan
profile (:mod:`sim.framework.torchtitan`, issue 26 item 2).

torchtitan turns on Inductor's micro-pipeline TP pass (``torch._inductor.config.
_micro_pipeline_tp = True``, with symmetric memory on the TP group) when the switch is on and
the model is compiled (torchtitan@238fa9953e ``torchtitan/distributed/tensor_parallel.py``
l.16-25; ``torchtitan/distributed/compile.py::_maybe_enable_async_tp`` since 737594746). The
pass rewrites each all-gather -> matmul and matmul -> reduce-scatter of the compiled block into
torch's ``fused_all_gather_matmul`` / ``fused_matmul_reduce_scatter``
(``torch/distributed/_symmetric_memory/__init__.py``: ``_pipelined_all_gather_and_consume``
copies each peer's shard out of symmetric memory with ``copy_`` on alternating streams while
the previous shard's matmul runs; ``_pipelined_produce_and_all2all`` likewise for the
reduce-scatter's chunks), which pipesim already models as
:data:`sim.parallel.tp_overlap.ASYNC_TP`.
"""

from __future__ import annotations

from typing import Any

from sim.parallel.layout import ParallelLayout
from sim.runs.record import ArgNote

ASYNC_TP_KEYS = ("parallelism.enable_async_tensor_parallel", "compile.enable_async_tensor_parallel")
"""Where torchtitan keeps the switch: ``[parallelism]`` at 238fa9953e (``job_config.py`` l.357),
``[compile]`` since #4045 (737594746, ``config/configs.py``)."""

ASYNC_TP_APPROXIMATION = (
    "AsyncTP: torch's micro-pipelined TP (torch/_inductor/fx_passes/micro_pipeline_tp.py; "
    "torch/distributed/_symmetric_memory fused_all_gather_matmul / "
    "fused_matmul_reduce_scatter) simulated as the torchtitan profile's enable_async_tensor_"
    "parallel: each sequence-parallel all-gather / reduce-scatter a ring of t chunks beside "
    "its matmul's chunks (sim.parallel.tp_overlap.ASYNC_TP); assumption: the peer copies run "
    "on the copy engines (no SMs taken from the matmul) at the NCCL ring's bandwidth, and the "
    "reduce-scatter's local sum of the t partial chunks is not modelled"
)
"""What a run with AsyncTP is simulated as."""

ASYNC_TP_NEEDS_COMPILE = (
    "AsyncTP without compile.enable (and 'model' in compile.components): torchtitan refuses "
    "it ('Async TP requires ...', torchtitan@238fa9953e distributed/tensor_parallel.py "
    "l.16-25; config/configs.py CompileConfig.__post_init__ since 737594746)"
)


def async_tp_options(c: dict[str, Any], lay: ParallelLayout, notes: list,
                     used: dict) -> tuple[tuple[str, str], ...]:  # fmt: skip
    """The torchtitan profile's options for AsyncTP (flattened config ``c``): ``compile`` and
    ``enable_async_tensor_parallel`` when a key of :data:`ASYNC_TP_KEYS` is on at ``tp > 1``
    under ``compile.enable`` with ``model`` compiled, noted ``approximated``; without compile
    noted ``unmapped`` (torchtitan refuses it: :data:`ASYNC_TP_NEEDS_COMPILE`); else ()."""
    key = next((k for k in ASYNC_TP_KEYS if c.get(k)), None)
    for k in ASYNC_TP_KEYS:
        if k in c:
            used.setdefault(k, "option")
    if key is None or lay.tp < 2:
        return ()
    if not (c.get("compile.enable") and "model" in c.get("compile.components", ["model"])):
        notes.append(ArgNote(key, str(c[key]), "unmapped", ASYNC_TP_NEEDS_COMPILE))
        return ()
    notes.append(ArgNote(key, str(c[key]), "approximated", ASYNC_TP_APPROXIMATION))
    return (("compile", "true"), ("enable_async_tensor_parallel", "true"))


__all__ = ["ASYNC_TP_KEYS", "async_tp_options"]
