"""A trace from a Hugging Face ``config.json`` without torch: :func:`config_trace`.

The config is read offline (:func:`sim.trace.hf_config.read_config`: plain JSON, no download,
no ``transformers``) into a :class:`~sim.compute.decoder.DecoderShape`, and
:func:`sim.trace.decoder.decoder_trace` times its layers with the kernel model of
:mod:`sim.compute` on a GPU preset's datasheet figures. Nothing is measured: the trace is an
estimate, and its provenance says so (``source: analytic``); ``sim run`` regenerates it at
every micro-batch size and on the experiment's GPU (:mod:`sim.trace.adapt`).

This is the path of ``sim trace from-config`` and of an experiment whose ``models[].trace`` is a
``config.json`` (with ``models[].seq_len``); ``sim profile --model config.json`` instead builds
the model in torch.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from sim.errors import InputError
from sim.hardware.gpu_compute import ComputeSpec
from sim.trace.decoder import decoder_trace
from sim.trace.hf_config import read_config
from sim.trace.schema import Trace

DTYPES = ("bf16", "fp16", "fp32")


def config_trace(
    path: str | Path,
    *,
    seq_len: int,
    gpu: ComputeSpec,
    microbatch_size: int = 1,
    dtype: str = "bf16",
    layers: int | None = None,
    name: str | None = None,
    field: str | None = None,
) -> Trace:
    """The analytic trace of the decoder LM a ``config.json`` describes.

    Args:
        path: the Hugging Face ``config.json`` (a model type of
            :data:`sim.trace.hf_config.SUPPORTED`).
        seq_len: tokens per sample ``s`` (the training length; the config's
            ``max_position_embeddings`` is only the model's limit).
        gpu: the GPU whose kernel model times the layers (seconds).
        microbatch_size: samples per micro-batch ``b``.
        dtype: ``bf16``, ``fp16`` or ``fp32``: parameters and activations.
        layers: keep the first ``layers`` layers (None: the config's ``num_hidden_layers``).
        name: the trace's name (default: the file's stem, ``-config`` dropped).
        field: where ``seq_len``, ``microbatch_size``, ``dtype`` and ``layers`` came from (an
            experiment's ``models.0``), named in errors about them; None: the options of
            ``sim trace from-config`` (``--seq-len``, ...).

    Returns:
        The :class:`Trace`: one layer per embedding, block and head; provenance ``config``
        (the path) and ``seq_len``.

    Raises:
        InputError: the file is unreadable, of an unsupported ``model_type``, or a field is
            missing or invalid (naming the file and the field); ``seq_len``,
            ``microbatch_size`` or ``layers`` below 1, ``layers`` above the config's, or an
            unknown ``dtype``.
    """

    def named(key: str) -> str:  # models.0.seq_len, or the option --seq-len
        return f"{field}.{key}" if field else "--" + key.replace("_", "-")

    for key, value in (("seq_len", seq_len), ("microbatch_size", microbatch_size)):
        if value < 1:
            raise InputError(f"must be >= 1, got {value}", field=named(key))
    if layers is not None and layers < 1:
        raise InputError(f"must be >= 1, got {layers}", field=named("layers"))
    if dtype not in DTYPES:
        raise InputError(f"{dtype!r}: use one of {', '.join(DTYPES)}", field=named("dtype"))
    shape = read_config(path, seq_len, layers=layers)
    n = json.loads(Path(path).read_text(encoding="utf-8"))["num_hidden_layers"]
    if layers is not None and layers > n:
        raise InputError(
            f"{layers} layers, but {path} has num_hidden_layers {n}: keep at most {n}",
            field=named("layers"),
        )
    stem = Path(path).stem.removesuffix("-config").removesuffix("_config") or "model"
    try:
        trace = decoder_trace(
            shape, name=name or stem, microbatch_size=microbatch_size, gpu=gpu, dtype=dtype
        )
    except ValueError as exc:
        raise InputError(str(exc), file=str(path)) from None
    prov = dict(trace.provenance, config=str(path), seq_len=seq_len)
    beyond = beyond_positions(path, seq_len)
    if beyond:
        prov["notes"] = f"{prov['notes']} {beyond}"
    return replace(trace, provenance=prov)


def beyond_positions(path: str | Path, seq_len: int) -> str:
    """A warning when ``seq_len`` exceeds the config's ``max_position_embeddings`` (the
    context the model was built for; a longer one needs RoPE scaling or is a typo), else ``""``.
    The file was read by :func:`config_trace` already."""
    limit = json.loads(Path(path).read_text(encoding="utf-8")).get("max_position_embeddings")
    if isinstance(limit, int) and not isinstance(limit, bool) and seq_len > limit:
        return (
            f"seq_len {seq_len} exceeds the config's max_position_embeddings {limit} (its "
            "context length): timed as asked, which needs RoPE scaling in training."
        )
    return ""
