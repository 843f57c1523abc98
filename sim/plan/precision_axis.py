"""The sweep's precision axis: ``sweep.precision`` (or ``training.precision``), each value
checked once against the framework, the GPU and every model's trace (:mod:`sim.compute.precision`).

A value is a recipe name (``fp8-delayed``, ``mxfp8``...) or a 16-bit name, which means "no low
precision" and is stored as ``""`` on the point; a 16-bit name must be the training dtype (the
dtype of parameters and activations is ``training.dtype``, not the precision).
"""

from __future__ import annotations

from sim.compute.precision import HIGH_PRECISION
from sim.config import as_list
from sim.errors import InputError
from sim.framework.base import Framework
from sim.memory.base import MemoryPolicy
from sim.point.experiment import Prepared
from sim.trace.decoder import is_decoder


def precision_axis(prep: Prepared) -> list[str]:
    """The precisions of the grid (``[""]`` when neither field is set), in order, once each.

    Raises:
        InputError: an unknown recipe or one the framework's library does not run, a 16-bit
            name other than the training dtype, a format the GPU lacks, or a model whose trace
            is not a generated decoder trace (naming the field).
    """
    exp = prep.exp
    if exp.sweep.precision is not None:
        raw, field = exp.sweep.precision, "sweep.precision"
    elif exp.training.precision is not None:
        raw, field = exp.training.precision, "training.precision"
    else:
        return [""]
    out: list[str] = []
    for i, name in enumerate(as_list(raw)):
        where = f"{field}.{i}" if isinstance(raw, list) else field
        value = _check(prep, name, where)
        if value not in out:
            out.append(value)
    return out


def _check(prep: Prepared, name: str, field: str) -> str:
    """``name`` as a point stores it, after the checks of :func:`precision_axis`."""
    if name in HIGH_PRECISION:
        dtypes: set[str] = {prep.exp.training.dtype} if prep.exp.training.dtype else set()
        dtypes |= {t.dtype for t in prep.traces.values()}
        if dtypes != {name}:
            raise InputError(
                f"precision {name} is not the training dtype ({', '.join(sorted(dtypes))}): "
                "set training.dtype for parameters and activations, and a precision recipe "
                "(e.g. fp8-delayed) for the GEMMs",
                file=prep.file,
                field=field,
            )
        return ""
    try:
        low = prep.low_precision(name)
    except ValueError as exc:
        raise InputError(str(exc), file=prep.file, field=field) from None
    assert low is not None
    gpu = prep.topology.gpus[0].compute
    if gpu is None or not gpu.runs(low.recipe.format):
        model = gpu.model if gpu is not None else "this hardware's GPU"
        raise InputError(
            f"{name} runs {low.recipe.format} GEMMs, which {model} has no rate for "
            "(gpu.low_precision of the hardware: FP8 GEMMs need Hopper or Blackwell, MXFP8 "
            "and NVFP4 Blackwell)",
            file=prep.file,
            field=field,
        )
    for i, (model_name, trace) in enumerate(prep.traces.items()):
        inputs = trace.provenance.get("inputs") or {}
        if not is_decoder(trace) or "gpu" not in inputs or inputs.get("kind") != "decoder":
            raise InputError(
                f"precision {name} needs a generated decoder trace (sim.trace.decoder: every "
                f"linear layer's GEMMs known); model {model_name}'s trace {trace.name} is not one",
                file=prep.file,
                field=f"models.{i}.trace",
            )
    return name


def precision_invalid(
    prep: Prepared, precision: str, policy: MemoryPolicy, framework: Framework
) -> str:
    """Why ``precision`` cannot run with this memory policy under ``framework``, or ``""``:
    Megatron's ``--fp8-param-gather`` needs the distributed optimizer
    (``megatron/training/arguments.py:1095-1097``)."""
    opts = prep.exp.training.precision_options
    if not precision or opts is None or not opts.param_gather:
        return ""
    if framework.distributed_optimizer.value or policy.name in ("dist_opt", "zero3"):
        return ""
    return (
        "precision_options.param_gather needs the distributed optimizer (memory_policy "
        "dist_opt, or a framework that shards optimizer state)"
    )
