"""The torch backend: real models, per-layer profiling, calibration and pipeline replays.

Importing this package imports nothing heavy; the names below are loaded on first use
(``backends.torch.profile_model`` imports torch then). Inside the package ``import torch``
always means the top-level torch (absolute imports only).

Rooms (subpackages), top to bottom; a room imports only the rooms below it (the
``backends-torch-rooms`` contract in ``pyproject.toml``):

``calibrate/``
    Measuring this machine as the replay uses it (``sim calibrate``): per-rank matmuls, copies,
    links and collectives, the runtime's own costs and memory reserve, tensor-parallel
    dispatch overhead, and the GPU ground-truth steps of issue 8.
``replay/``
    A configuration on real devices (``sim validate``): the job and its result, the launcher
    and rank processes, our runtime and torch's pipelining runtime, weight versions, memory
    policies, one rank alone, tensor-, expert- and context-parallel replays, the numerics
    reference.
``profile/`` and ``parallel/`` (neither imports the other)
    Per-layer profiling into a trace (``sim profile``; saved-bytes counting, FLOPs, op counts,
    a user's model, fake tensors for another GPU, host overheads); splitting layers across
    ranks (tensor, context and expert parallelism, tied parameters across ranks).
``models/``
    GPT/BERT chains, Hugging Face decoders, a user's model, shared parameters and the
    :class:`~backends.torch.models.replay_model.ReplayModel` interface.
``devices.py``
    Checking a device name and that torch can use it, without importing torch first.

Entry points for the CLI (``sim profile``, ``sim calibrate``, ``sim validate``):

``profile_model(spec, *, microbatch_size, device="cpu", dtype="fp32", warmup=2, reps=5,
split_backward=False, threads=None, seed=0, path=None) -> sim.trace.schema.Trace``
    Per-layer forward/backward time (median; CUDA events on GPUs), saved-for-backward bytes,
    output and parameter bytes, forward FLOPs of ``embedding, block.0.., head``; writes
    ``path.csv`` + ``path.yaml`` with ``sim.trace.native.write_trace`` when ``path`` is given.
    On CPU pass ``threads = cores // nproc`` to match a replay rank.
    (:mod:`backends.torch.profile.layers`)

``backends.torch.calibrate.hardware.calibrate(*, nproc=2, device="cpu", sizes=DEFAULT_SIZES,
reps=5, all_pairs=False, matmul_n=None, name=None, path=None, timeout_s=300, threads=None)
-> Calibration``
    Measures matmul FLOP/s, copy bandwidth, rank-to-rank latency/bandwidth (ping-pong fit) and,
    on GPUs, host<->device copies, with the replay's process layout; ``Calibration.hardware`` is
    a hardware YAML dict (``sim.hardware.spec.HardwareSpec``), written to ``path``; it loads
    with ``sim.hardware.loader.load_hardware(path)``.

``backends.torch.replay.launch.replay(job: ReplayJob) -> ReplayResult``
    Runs ``job.stages`` ranks (gloo on CPU, NCCL on CUDA) executing the simulator's per-rank
    action lists (``backend="ours"``: gpipe, 1f1b, pipedream_2bw, pipedream, pipemare) or
    torch's ``ScheduleGPipe`` / ``Schedule1F1B`` (``backend="torch"``, optionally
    ``torch_csv=True`` to load our CSV into ``_PipelineScheduleRuntime``, which also runs the
    multi-stage schedules). Returns the median
    iteration time, per-rank peak memory (with a breakdown), executed vs expected action
    counts, losses and notes. Raises ``ReplayError`` naming the failing rank and its error, or
    the hung ranks' stacks after ``job.timeout_s``; no process is left behind.
    (:mod:`backends.torch.replay.job`, :mod:`backends.torch.replay.runtime`,
    :mod:`backends.torch.replay.torch_schedules`)

``ReplayJob.from_dict(d)`` / ``ReplayJob.to_dict()``, ``ReplayResult.to_dict()``
    JSON/YAML round trips for the CLI and the winner file.

``ModelSpec``, ``as_spec(obj)``, ``build_layers(spec, seed)``, ``build_stage(spec, boundaries,
stage, seed)``, ``make_batch(spec, microbatch_size, seed)``
    The models (:mod:`backends.torch.models.transformer`): GPT/BERT chains of ``layers + 2``
    modules with the analytic generator's sizes; ``as_spec`` also accepts
    ``sim.trace.model_presets.MODEL_PRESETS`` names. ``boundaries`` are start layers per stage, as
    ``sim.parallel.partition.Partition.boundaries``; the default split is
    ``sim.parallel.partition.uniform_partition`` (the simulator's own).

Your own model (``sim profile --model FILE.py:FUNC``): :mod:`backends.torch.models.user` (load
and check ``FUNC``), :mod:`backends.torch.models.layer_chain` (top-level children or
``--layers`` fqns), :mod:`backends.torch.profile.user` (measure),
:mod:`backends.torch.profile.fake` (``--for-gpu``: fake tensors + roofline),
:mod:`backends.torch.models.hf` (Hugging Face ``config.json``),
:mod:`backends.torch.models.user_stage` (the model on a replay rank; ``ReplayJob.model`` is
then a :class:`backends.torch.models.user_spec.UserModelSpec` dict),
:mod:`backends.torch.models.shared_params` (parameters several layers hold: found, named once,
counted once).

Every runtime asks the model through :class:`backends.torch.models.replay_model.ReplayModel`
(GPT/BERT or a user's; :func:`backends.torch.models.load.load_model`);
:mod:`backends.torch.parallel.ties` all-reduces shared parameters across ranks;
:mod:`backends.torch.replay.dumps` and :mod:`backends.torch.replay.reference` are the numerics
check (the same model in one process).

Other modules: :mod:`backends.torch.profile.saved_bytes` (saved-tensor counting),
:mod:`backends.torch.replay.memory` (memory policies), :mod:`backends.torch.replay.cpu_memory`
(the resident peak of a CPU rank), :mod:`backends.torch.profile.flops` (FLOPs with CPU
attention), :mod:`backends.torch.replay.versions` (weight versions, as each schedule's class
says), :mod:`backends.torch.replay.worker` (one rank process).
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "profile_model": "profile.layers",
    "Calibration": "calibrate.hardware",
    "run_ranks": "replay.launch",
    "ReplayError": "replay.launch",
    "ReplayJob": "replay.job",
    "ReplayResult": "replay.job",
    "ModelSpec": "models.transformer",
    "as_spec": "models.transformer",
    "build_layers": "models.transformer",
    "build_stage": "models.transformer",
    "make_batch": "models.transformer",
}
"""Name -> its module under ``backends.torch``. ``replay`` and ``calibrate`` are rooms
(subpackages), so their functions are imported from ``replay.launch`` and
``calibrate.hardware``."""

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"backends.torch.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'backends.torch' has no attribute {name!r}")
