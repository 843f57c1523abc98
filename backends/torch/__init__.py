"""The torch backend: real models, per-layer profiling, calibration and pipeline replays.

Importing this package imports nothing heavy; every name below is loaded on first use
(``from backends.torch import replay`` imports torch then). Inside the package ``import torch``
always means the top-level torch (absolute imports only).

Entry points for the CLI (``sim profile``, ``sim calibrate``, ``sim validate``):

``profile_model(spec, *, microbatch_size, device="cpu", dtype="fp32", warmup=2, reps=5,
split_backward=False, threads=None, seed=0, path=None) -> sim.trace.schema.Trace``
    Per-layer forward/backward time (median; CUDA events on GPUs), saved-for-backward bytes,
    output and parameter bytes, forward FLOPs of ``embedding, block.0.., head``; writes
    ``path.csv`` + ``path.yaml`` with ``sim.trace.native.write_trace`` when ``path`` is given.
    On CPU pass ``threads = cores // nproc`` to match a replay rank. (:mod:`.profile`)

``calibrate(*, nproc=2, device="cpu", sizes=DEFAULT_SIZES, reps=5, all_pairs=False,
matmul_n=None, name=None, path=None, timeout_s=300, threads=None) -> Calibration``
    Measures matmul FLOP/s, copy bandwidth, rank-to-rank latency/bandwidth (ping-pong fit) and,
    on GPUs, host<->device copies, with the replay's process layout; ``Calibration.hardware`` is
    a hardware YAML dict (``sim.hardware.spec.HardwareSpec``), written to ``path``; it loads
    with ``sim.hardware.loader.load_hardware(path)``. (:mod:`.calibrate`)

``replay(job: ReplayJob) -> ReplayResult``
    Runs ``job.stages`` ranks (gloo on CPU, NCCL on CUDA) executing the simulator's per-rank
    action lists (``backend="ours"``: gpipe, 1f1b, pipedream_2bw, pipedream, pipemare) or
    torch's ``ScheduleGPipe`` / ``Schedule1F1B`` (``backend="torch"``, optionally
    ``torch_csv=True`` to load our CSV into ``_PipelineScheduleRuntime``, which also runs the
    multi-stage schedules). Returns the median
    iteration time, per-rank peak memory (with a breakdown), executed vs expected action
    counts, losses and notes. Raises ``ReplayError`` naming the failing rank and its error, or
    the hung ranks' stacks after ``job.timeout_s``; no process is left behind. (:mod:`.launch`,
    :mod:`.job`, :mod:`.runtime`, :mod:`.torch_schedules`)

``ReplayJob.from_dict(d)`` / ``ReplayJob.to_dict()``, ``ReplayResult.to_dict()``
    JSON/YAML round trips for the CLI and the winner file.

``ModelSpec``, ``as_spec(obj)``, ``build_layers(spec, seed)``, ``build_stage(spec, boundaries,
stage, seed)``, ``make_batch(spec, microbatch_size, seed)``
    The models (:mod:`.models`): GPT/BERT chains of ``layers + 2`` modules with the analytic
    generator's sizes; ``as_spec`` also accepts ``sim.trace.generator.MODEL_PRESETS`` names.
    ``boundaries`` are start layers per stage, as ``sim.parallel.partition.Partition.boundaries``; the
    default split is ``sim.parallel.partition.uniform_partition`` (the simulator's own).

Your own model (``sim profile --model FILE.py:FUNC``): :mod:`.user_model` (load and check
``FUNC``), :mod:`.layer_chain` (top-level children or ``--layers`` fqns), :mod:`.user_profile`
(measure), :mod:`.fake_profile` (``--for-gpu``: fake tensors + roofline), :mod:`.hf` (Hugging
Face ``config.json``), :mod:`.user_stage` (the model on a replay rank; ``ReplayJob.model`` is
then a :class:`.user_spec.UserModelSpec` dict), :mod:`.shared_params` (parameters several layers
hold: found, named once, counted once).

Every runtime asks the model through :class:`.replay_model.ReplayModel` (GPT/BERT or a user's;
:func:`.job_model.load_model`); :mod:`.ties` all-reduces shared parameters across ranks;
:mod:`.dumps` and :mod:`.reference` are the numerics check (the same model in one process).

Other modules: :mod:`.memory` (saved-tensor counting, memory policies), :mod:`.cpu_memory`
(the resident peak of a CPU rank), :mod:`.flops` (FLOPs with CPU attention), :mod:`.versions`
(weight versions per schedule), :mod:`.worker` (one rank process).
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "profile_model": "profile",
    "calibrate": "calibrate",
    "Calibration": "calibrate",
    "replay": "launch",
    "run_ranks": "launch",
    "ReplayError": "launch",
    "ReplayJob": "job",
    "ReplayResult": "job",
    "ModelSpec": "models",
    "as_spec": "models",
    "build_layers": "models",
    "build_stage": "models",
    "make_batch": "models",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"backends.torch.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'backends.torch' has no attribute {name!r}")
