"""``sim profile --model ...``: the user-model branch of the CLI, kept out of ``sim/cli.py``.

``--model`` is ``FILE.py:FUNC``, ``package.module:FUNC`` or a Hugging Face ``config.json``
(random weights, nothing downloaded; :mod:`backends.torch.models.hf`). With ``--for-gpu`` the model
is analysed under fake tensors for that GPU (:mod:`backends.torch.profile.fake`) instead of run on
``--device``.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from sim.compute.decoder import layer_names
from sim.errors import InputError
from sim.trace.decoder import decoder_trace
from sim.trace.hf_config import is_supported, read_config
from sim.trace.native import write_trace
from sim.trace.schema import Trace


def parse_fqns(text: str | None) -> tuple[str, ...] | None:
    """``--layers``: ``"a, b.0 ,c"`` -> ``("a", "b.0", "c")``; ``None`` or empty -> ``None``.

    Example:
        >>> parse_fqns("a, b.0 ,c")
        ('a', 'b.0', 'c')
    """
    if not text:
        return None
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    return names or None


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Bound the user's code run in this process: after ``seconds`` an ``InputError`` naming
    ``--timeout`` is raised wherever it is (``SIGALRM``; Python code, sleeps and blocking
    reads are interrupted, a C call when it returns). The copies of ``--concurrent`` have
    their own limit."""

    def expired(signum: int, frame: Any) -> None:
        raise InputError(
            f"the model's code did not finish within {seconds:g} s (a function that never "
            "returns?); raise --timeout for a model that needs longer",
            field="--timeout",
        )

    if not hasattr(signal, "setitimer"):  # not POSIX: unbounded
        yield
        return
    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def model_source(model: str, seq_len: int) -> tuple[str, dict[str, Any], str | None]:
    """``(source, kwargs, default loss)`` for ``--model``: a function reference, or for a
    ``*.json`` path the Hugging Face builder with ``config`` (absolute path) and ``seq_len``
    and its token cross-entropy loss.

    Raises:
        InputError: a ``.json`` path that does not exist.
    """
    if model.endswith(".json"):
        path = Path(model)
        if not path.is_file():
            raise InputError("Hugging Face config not found", file=model, field="--model")
        return (
            "backends.torch.models.hf:build",
            {"config": str(path.resolve()), "seq_len": seq_len},
            "backends.torch.models.hf:loss",
        )
    return model, {}, None


def profile_user(
    *,
    out_path: Path,
    model: str,
    layers: str | None,
    loss: str | None,
    for_gpu: str | None,
    name: str | None,
    microbatch_size: list[int] | None,
    device: str,
    dtype: str | None,
    threads: int | None,
    reps: int,
    split_backward: bool,
    seq_len: int,
    concurrent: int = 1,
    timeout_s: float = 600.0,
) -> Trace:
    """Profile (or, with ``for_gpu``, analyse) a user's model at each micro-batch size and
    write one trace (the first size's layers, the others as its ``profiles``), within
    ``timeout_s`` (:func:`time_limit`).

    Raises:
        InputError: bad model, layers, loss, sample, GPU or dtype (see the modules used); the
            model's code outlived ``timeout_s``.
    """
    source, kwargs, default_loss = model_source(model, seq_len)
    common: dict[str, Any] = dict(
        layers=parse_fqns(layers),
        loss=loss or default_loss,
        name=name or out_path.name,
        kwargs=kwargs,
    )
    out_path.parent.mkdir(parents=True, exist_ok=True)
    sizes: list[int | None] = list(dict.fromkeys(microbatch_size or []).keys()) or [None]
    shape = decoder_config(model, seq_len)
    if for_gpu and shape is not None and (shape.moe is not None or shape.mamba is not None):
        return analytic_moe(shape, model, for_gpu, out_path, name, sizes[0], dtype)
    with time_limit(timeout_s):
        traces = [
            _one_size(
                common,
                source,
                b,
                for_gpu,
                device,
                dtype,
                threads,
                reps,
                split_backward,
                concurrent,
                timeout_s,
            )  # fmt: skip
            for b in sizes
        ]
    trace = replace(traces[0], profiles={t.microbatch_size: t.layers for t in traces[1:]})
    write_trace(trace, out_path)
    return with_shape(trace, shape, out_path)


def _one_size(
    common: dict[str, Any],
    source: str,
    b: int | None,
    for_gpu: str | None,
    device: str,
    dtype: str | None,
    threads: int | None,
    reps: int,
    split_backward: bool,
    concurrent: int,
    timeout_s: float,
) -> Trace:
    """The trace of one micro-batch size (``None``: the sample's); torch is imported here,
    not when the command line starts."""
    from backends.torch.profile.fake import fake_profile_user_model
    from backends.torch.profile.user_concurrent import profile_user_concurrent

    if for_gpu:
        return fake_profile_user_model(
            source, gpu_name=for_gpu, dtype=dtype or "bf16", microbatch_size=b, **common
        )
    return profile_user_concurrent(
        copies=concurrent,
        source=source,
        device=device,
        dtype=dtype or "fp32",
        reps=reps,
        split_backward=split_backward,
        threads=threads,
        microbatch_size=b,
        timeout_s=timeout_s,
        **common,
    )


def decoder_config(model: str, seq_len: int):
    """The :class:`~sim.compute.decoder.DecoderShape` of a Hugging Face config ``model`` that
    :mod:`sim.trace.hf_config` reads (:data:`~sim.trace.hf_config.SUPPORTED`), else None (a
    function reference, or another architecture)."""
    if not model.endswith(".json") or not is_supported(model):
        return None
    return read_config(model, seq_len)


def with_shape(trace: Trace, shape, out_path: Path) -> Trace:
    """``trace`` with ``provenance.model_shape`` = the decoder shape and ``layer_kinds`` (so
    tensor, expert and context parallelism can split it, :mod:`sim.parallel.decoder_shard`),
    rewritten; unchanged without a shape or when the chain is not the Hugging Face one
    (``embed``, ``layer<i>``, ``norm``, ``lm_head``: :mod:`backends.torch.models.hf`)."""
    if shape is None:
        return trace
    blocks = [k for _, k in layer_names(shape)][1:-1]
    want = ["embed", *(f"layer{i}" for i in range(len(blocks))), "norm", "lm_head"]
    if [x.name for x in trace.layers] != want:
        return trace  # a chain cut differently (--layers): left unsplittable
    kinds = ["embedding", *blocks, "head", "head"]
    prov = {**trace.provenance, "model_shape": shape.to_dict(), "layer_kinds": kinds}
    out = replace(trace, provenance=prov)
    write_trace(out, out_path)
    return out


def analytic_moe(shape, model: str, for_gpu: str, out_path: Path, name, b, dtype) -> Trace:
    """A MoE or hybrid Mamba-2 ``config.json`` with ``--for-gpu``: the analytic decoder trace
    (:mod:`sim.trace.decoder`: grouped expert GEMMs at their balanced rows, the SSD scan's
    kernels, the kernel model of the GPU) instead of fake tensors, whose token counts per expert
    are data-dependent and whose Mamba kernels are custom."""
    from backends.torch.profile.fake import resolve_gpu  # imports torch: only when needed

    preset, gpu = resolve_gpu(for_gpu)
    if gpu.compute is None:
        raise InputError(f"{for_gpu} has no compute model", field="--for-gpu")
    trace = decoder_trace(
        shape,
        name=name or out_path.name,
        microbatch_size=b or 1,
        gpu=gpu.compute,
        dtype=dtype or "bf16",
    )
    prov = {**trace.provenance, "config": model, "preset": preset}
    trace = replace(trace, provenance=prov)
    write_trace(trace, out_path)
    return trace
