"""The cuDNN frontend and Transformer Engine each Megatron-Bridge release's container ships, for
the Bridge rows.

The NeMo container of a release installs the Python packages of Megatron-Bridge's ``uv.lock``
at its tag; ``nvidia-cudnn-frontend`` there (NVIDIA-NeMo/Megatron-Bridge, ``uv.lock``; the
releases' tags by ``docs/versions1.json`` @067f987df0: "0.5.1 · 26.06.01", "0.6.0 · 26.08",
...) is the frontend whose CuTe-DSL kernels Transformer Engine's fused grouped MLP runs
(:mod:`sim.compute.moe`). The backend (``docs/releases/software-versions.md``: cuDNN 9.21.1 in
26.06) is another library. The version reaches a row as the pseudo-flag
:data:`FLAG` (:func:`sim.runs.bridge_recipes.recipe_for`), which :mod:`sim.runs.megatron_args`
reads (:mod:`sim.compute.dglu_regression`: v1.24 and v1.25 slow the dGLU kernel of biased
experts). ``transformer-engine`` there likewise reaches a row as :data:`TE_FLAG`
(``training.precision_options.te_version``: :func:`sim.compute.quantize.per_expert_casts`).
"""

from __future__ import annotations

from sim.compute.dglu_regression import SOURCE, regressed
from sim.runs.megatron_reading import Reading
from sim.runs.record import ArgNote

FLAG = "cudnn-frontend-version"
"""The pseudo-flag that carries a row's cuDNN frontend version (not a Megatron flag)."""
TE_FLAG = "te-version"
"""The pseudo-flag that carries a row's Transformer Engine version (not a Megatron flag), read
into ``training.precision_options.te_version`` (:mod:`sim.runs.precision_flags`)."""

CONTAINER = {
    "26.02": ("1.18.0", "2.12.0+5671fd36"),  # v0.3.0
    "26.02.01": ("1.20.0", "2.12.0+5671fd36"),  # v0.3.1
    "26.04": ("1.22.1", "2.14.0+71bbefbf"),  # v0.4.0
    "26.04.01": ("1.23.0", "2.14.1+366798ef"),  # v0.4.2
    "26.06": ("1.23.0", "2.16.0+4220403e"),  # v0.5.0
    # v0.5.1 (ca4d0ffdb "bump ... nvidia-cudnn-frontend to 1.24.0")
    "26.06.01": ("1.24.0", "2.16.0+b9d690e0"),
    "26.08": ("1.26.0", "2.17.1+4329ff84"),  # v0.6.0
}
"""``(nvidia-cudnn-frontend, transformer-engine)`` of each release's ``uv.lock``
(NVIDIA-NeMo/Megatron-Bridge at the tag in the comment; module doc)."""


def release_flags(release: str) -> dict[str, str]:
    """The pseudo-flags of release ``release`` (``"26.06.01"``): :data:`FLAG` and
    :data:`TE_FLAG` with its container's versions (:data:`CONTAINER`); {} where it does not
    say."""
    versions = CONTAINER.get(release.strip())
    return dict(zip((FLAG, TE_FLAG), versions, strict=True)) if versions else {}


def cudnn_frontend(release: str) -> str | None:
    """The cuDNN frontend version release ``release`` ships, None where :data:`CONTAINER`
    does not say."""
    return release_flags(release).get(FLAG)


def transformer_engine(release: str) -> str | None:
    """The Transformer Engine version release ``release`` ships, None where :data:`CONTAINER`
    does not say."""
    return release_flags(release).get(TE_FLAG)


def dglu_feature(r: Reading, fused: bool, bias: bool) -> list[str]:
    """``["moe_dglu=regressed"]`` where the run's experts are the fused grouped MLP with
    biases and its cuDNN frontend (:data:`FLAG`) has the slow dGLU dbias kernel
    (:func:`sim.compute.dglu_regression.regressed`; noted as approximated, with its source),
    else none (the flag mapped: the frontend changes nothing pipesim times)."""
    version = r.text(FLAG)
    if version is None:
        return []
    if fused and bias and regressed(version):
        r.notes.append(ArgNote(FLAG, version, "approximated", SOURCE.format(version=version)))
        return ["moe_dglu=regressed"]
    r.mapped(FLAG, "the container's cuDNN frontend (sim.runs.bridge_software)")
    return []
