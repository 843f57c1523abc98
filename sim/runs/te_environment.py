"""The attention core a Megatron-LM run kept activations for, given the Transformer Engine it ran.

Megatron-LM's default ``--attention-backend auto`` leaves the choice to Transformer Engine
(:func:`sim.memory.te_attention.te_attention_backend`), whose rule depends on its version,
flash-attn's, the GPU and ``--deterministic-mode``; ``unfused`` and ``local`` (Megatron's own
``DotProductAttention``) and ``--transformer-impl local`` keep the s^2 scores. The functional
tests' golden values were generated in dated images (:func:`golden_environment`): the
``[lts_...]`` values written before :data:`LTS_BUMP` ran NGC PyTorch 24.01, where TE 1.2 falls
back to its unfused attention on A100 under determinism.
"""

from __future__ import annotations

from typing import Any

from sim.hardware.gpu_spec import COMPUTE_CAPABILITY
from sim.memory.te_attention import TeEnvironment, memory_attention, te_attention_backend
from sim.runs.argv import switch_on

LTS_2401 = TeEnvironment(
    te=(1, 2),
    flash_attn=(2, 0, 4),
    label="Megatron-LM's LTS image on nvcr.io/nvidia/pytorch:24.01-py3 (.gitlab/stages/"
    "01.build.yml until @23a1dcaf74, 2025-11-06; the lts extra of pyproject.toml installs no "
    "TE, so the container's: TE 1.2 and flash-attn 2.0.4 by NGC's 24.01 release notes, an "
    "assumption not checked here)",
)
LATER = TeEnvironment(
    te=(2, 8),
    flash_attn=(2, 4, 1),
    label="the dev images and the LTS image from 2025-11-06 on (NGC PyTorch 25.09 or later, "
    "TE >= 2.8 from pyproject.toml); flash-attn >= 2.4.1 inferred from the measured peaks "
    "(an assumption)",
)
LTS_BUMP = "2025-11-06"
"""NVIDIA/Megatron-LM@23a1dcaf74 "Bump LTS container": LTS golden values generated before it
ran in the 24.01 image (:data:`LTS_2401`)."""


def golden_environment(case: str, generated: str) -> TeEnvironment:
    """The TE environment of a functional test's golden values: the 24.01 LTS image for
    ``[lts_...]`` values generated (``benchmarks/accuracy/golden_generation.csv``, a
    ``YYYY-MM-DD`` date) before :data:`LTS_BUMP`, else :data:`LATER`."""
    if "[lts" in case and generated and generated < LTS_BUMP:
        return LTS_2401
    return LATER


def compute_capability(gpu: str) -> tuple[int, int] | None:
    """The compute capability ``(major, minor)`` of a GPU as a source names it: the first
    model of :data:`sim.hardware.gpu_spec.COMPUTE_CAPABILITY` (NVIDIA's CUDA GPUs table) that
    is a part of its name, in any case; None: unknown.

    >>> compute_capability("A100-SXM-80GB"), compute_capability("B300"), compute_capability("x")
    ((8, 0), (10, 3), None)
    """
    name = gpu.upper()
    cc = next((cc for part, cc in COMPUTE_CAPABILITY.items() if part in name), None)
    return None if cc is None else (int(cc), round(cc * 10) % 10)


def run_attention(flags: dict[str, Any], gpu: str, env: TeEnvironment = LATER) -> str:
    """``"math"`` or ``"flash"``: the attention a Megatron-LM run with ``flags`` (spelled
    without ``--``) kept activations for on ``gpu`` under ``env`` (module doc); ``flash`` on a
    GPU whose compute capability is not known."""
    backend = str(flags.get("attention-backend", "auto"))
    if backend in ("unfused", "local"):  # local: Megatron's own DotProductAttention
        return "math"
    local = flags.get("transformer-impl") == "local" and not flags.get("use-flash-attn")
    if local and "attention-backend" not in flags:
        return "math"
    if backend != "auto":
        return "flash"
    cc = compute_capability(gpu)
    if cc is None:
        return "flash"
    det = switch_on(flags.get("deterministic-mode"))
    return memory_attention(te_attention_backend(env, cc, det))
