"""Profile a real model layer by layer into a :class:`sim.trace.schema.Trace`.

For each layer of the chain (:mod:`backends.torch.models.transformer`), on its real input (the
previous layers' output for one micro-batch):

* ``fwd_s``: the forward with autograd recording, median of ``reps`` after ``warmup`` runs.
* ``bwd_s``: ``torch.autograd.backward(y, g)`` for a fresh forward ``y`` and a random output
  gradient ``g`` (the head's output is the loss, its gradient 1). Parameter gradients
  accumulate as in training.
* ``bwd_input_s`` / ``bwd_weight_s`` (``split_backward=True``): ``torch.autograd.grad`` with
  respect to the input only and to the parameters only, timed separately (memory.md §7). Each
  runs the shared part of the backward, so their sum exceeds ``bwd_s`` somewhat.
* ``act_bytes``: bytes saved for backward by one forward, counted once per storage with
  ``saved_tensors_hooks``, parameters excluded
  (:class:`backends.torch.profile.saved_bytes.SavedBytes`). The layer's input counts (it is what the
  layer stashes); its output does not unless saved.
* ``out_bytes``: bytes of the output, 0 for the head (nothing leaves the last layer, as in
  ``sim.trace.generator``); ``param_bytes``: bytes of the parameters; ``flops``: forward FLOPs from
  ``torch.utils.flop_counter.FlopCounterMode`` with CPU attention
  (:mod:`backends.torch.profile.flops`).
* ``fwd_ops`` / ``bwd_ops``: the ops the host issues for the forward (autograd recording on)
  and the backward, counted by a ``TorchDispatchMode`` in an untimed run
  (:mod:`backends.torch.profile.op_count`): what the host model charges per op
  (:mod:`sim.hardware.host_ops`).
* ``fwd_modules`` / ``fwd_functions``: the forward's ``nn.Module`` calls and custom
  ``autograd.Function`` applies (:func:`backends.torch.profile.op_count.layer_calls`), which the
  host model charges per call.

Several micro-batch sizes (``sim profile -b 1 -b 2 -b 4``): :func:`merge_sizes` combines one
trace per size into one trace whose ``profiles`` hold the other sizes; the engine interpolates
between them (:meth:`sim.trace.schema.Trace.at_microbatch`). The provenance records
``model_shape`` (kind, sizes, ``attention: flash`` since ``nn.TransformerEncoderLayer`` calls
``scaled_dot_product_attention``, no dropout), which lets the compute model extrapolate outside
the measured sizes (:mod:`sim.trace.adapt`).

Timing is wall clock (``time.perf_counter``) on CPU and CUDA events on GPUs, with
``torch.cuda.synchronize`` around every measured call. On CPU the timed forwards (and the
forwards whose backward is timed) run under the counting ``saved_tensors_hooks`` that every CPU
replay runs a stage's forward under for its memory measurement
(:func:`backends.torch.profile.saved_bytes.saved_context`,
:class:`~backends.torch.profile.saved_bytes.SavedBytes`): a Python ``pack`` per saved tensor in the
forward, an ``unpack`` per use in the backward. Timed without them, the ViT example's stage 0 (97
saved tensors per micro-batch of 4) was profiled 0.2-0.4 ms per forward and 0.1-0.3 ms per backward
faster than it runs in the replay (measured with and without the hooks on the 2-core VM by a
one-off script, since removed; its figures are in the issue notes).
"""

from __future__ import annotations

import datetime
import platform
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from backends.torch.models.attention import attention_kernel
from backends.torch.models.transformer import (
    ModelSpec,
    as_spec,
    build_layers,
    layer_names,
    lm_loss,
    make_batch,
)
from backends.torch.profile.flops import flop_counter
from backends.torch.profile.op_count import layer_calls, layer_ops
from backends.torch.profile.saved_bytes import SavedBytes, saved_context, tensor_bytes
from sim.trace.native import write_trace
from sim.trace.schema import LayerProfile, Trace


def device_model_name(device: str | torch.device) -> str:
    """The device name traces and calibrated hardware files use.

    ``cpu-rank`` for CPU (one replay rank is one "device"), else ``torch.cuda.get_device_name``.
    """
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu-rank"


def cpu_model_name() -> str:
    """The host CPU model from ``/proc/cpuinfo`` (``platform.processor()`` elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown cpu"


def time_call(
    run: Callable[[], object],
    device: torch.device,
    *,
    setup: Callable[[], object] | None = None,
    warmup: int = 2,
    reps: int = 5,
) -> float:
    """Median seconds of ``run()`` over ``reps`` calls after ``warmup`` calls.

    Args:
        run: the measured call; it receives nothing, ``setup()``'s result is stored for it.
        device: CUDA devices are timed with events, others with ``time.perf_counter``.
        setup: untimed preparation before each call (e.g. a fresh forward before a backward).
        warmup: untimed calls first.
        reps: measured calls (>= 1).
    """
    times = []
    for i in range(warmup + max(1, reps)):
        if setup is not None:
            setup()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            torch.cuda.synchronize(device)
            elapsed = start.elapsed_time(end) / 1e3
        else:
            t0 = time.perf_counter()
            run()
            elapsed = time.perf_counter() - t0
        if i >= warmup:
            times.append(elapsed)
    return statistics.median(times)


def profile_layer(
    name: str,
    fn: Callable[[torch.Tensor], torch.Tensor],
    params: list[torch.Tensor],
    x: torch.Tensor,
    device: torch.device,
    split_backward: bool,
    warmup: int,
    reps: int,
) -> LayerProfile:
    """Measure one layer ``fn`` on input ``x``: the profile row of the module docstring.

    Args:
        name: the layer's name in the trace.
        fn: the layer's forward, ``[b, ...] -> [b, ...]`` (the last layer may return the loss).
        params: its parameters (never counted as saved bytes; their bytes are ``param_bytes``).
        x: its real input (detached here; it needs a gradient when floating point).
        device: where ``fn`` and ``x`` are; CUDA is timed with events.
        split_backward: also time the input-gradient and weight-gradient halves
            (``bwd_input_s``, ``bwd_weight_s``).
        warmup, reps: untimed and timed calls of each measurement (medians, seconds).

    Returns:
        The layer's :class:`sim.trace.schema.LayerProfile` (seconds and bytes).
    """
    # Long: timing then counting; the timed closures share state.
    needs_input_grad = x.is_floating_point()
    x = x.detach().requires_grad_(needs_input_grad)
    state: dict[str, torch.Tensor] = {}
    replay_hooks = SavedBytes(params) if device.type == "cpu" else None

    def forward() -> None:
        with saved_context(replay_hooks):  # as every CPU replay runs a stage (module docstring)
            y = fn(x)
        state["y"] = y
        state["g"] = torch.ones_like(y) if y.dim() == 0 else torch.randn_like(y)

    fwd_s = time_call(forward, device, warmup=warmup, reps=reps)
    bwd_s = time_call(
        lambda: torch.autograd.backward(state["y"], state["g"]),
        device,
        setup=forward,
        warmup=warmup,
        reps=reps,
    )
    bwd_input_s = bwd_weight_s = None
    if split_backward:
        bwd_input_s = 0.0
        if needs_input_grad:
            bwd_input_s = time_call(
                lambda: torch.autograd.grad(state["y"], x, state["g"]),
                device,
                setup=forward,
                warmup=warmup,
                reps=reps,
            )
        bwd_weight_s = time_call(
            lambda: torch.autograd.grad(state["y"], params, state["g"], allow_unused=True),
            device,
            setup=forward,
            warmup=warmup,
            reps=reps,
        )
    tracker = SavedBytes(params)
    with tracker.hooks():
        y = fn(x)
    act_bytes = tracker.live_bytes
    with flop_counter() as counter:
        fn(x)
    fwd_ops, bwd_ops = layer_ops(fn, x)
    modules, functions = layer_calls(fn, x)
    return LayerProfile(
        name=name,
        fwd_s=fwd_s,
        bwd_s=bwd_s,
        param_bytes=float(tensor_bytes(params)),
        act_bytes=float(act_bytes),
        out_bytes=0.0 if y.dim() == 0 else float(tensor_bytes([y])),
        bwd_input_s=bwd_input_s,
        bwd_weight_s=bwd_weight_s,
        flops=float(counter.get_total_flops()),
        fwd_ops=float(fwd_ops),
        bwd_ops=float(bwd_ops),
        fwd_modules=float(modules),
        fwd_functions=float(functions),
        param_tensors=float(len(params)),
    )


def _profile_layers(
    spec: ModelSpec,
    b: int,
    dev: torch.device,
    dtype: str,
    seed: int,
    split_backward: bool,
    warmup: int,
    reps: int,
) -> list[LayerProfile]:
    """Every layer of the chain, each on the previous layer's output (see profile_model)."""
    layers = [layer.to(dev) for layer in build_layers(spec, seed, dtype=dtype)]
    ids, targets = (t.to(dev) for t in make_batch(spec, b, seed))
    x: torch.Tensor = ids
    out = []
    for i, (name, layer) in enumerate(zip(layer_names(spec), layers, strict=True)):
        is_head = i == len(layers) - 1
        fn = (lambda h, layer=layer: lm_loss(layer(h), targets)) if is_head else layer
        params: list[torch.Tensor] = list(layer.parameters())
        out.append(profile_layer(name, fn, params, x, dev, split_backward, warmup, reps))
        with torch.no_grad():
            x = layer(x)
    return out


def profile_model(
    spec: ModelSpec | Mapping[str, Any],
    *,
    microbatch_size: int,
    device: str = "cpu",
    dtype: str = "fp32",
    warmup: int = 2,
    reps: int = 5,
    split_backward: bool = False,
    threads: int | None = None,
    seed: int = 0,
    path: str | Path | None = None,
    attention: str | None = None,
) -> Trace:
    """Profile every layer of ``spec`` for one micro-batch; optionally write the trace.

    Args:
        spec: the model (:class:`~backends.torch.models.transformer.ModelSpec` or a dict of its
            fields).
        microbatch_size: samples per micro-batch ``b``.
        device: ``cpu``, ``cuda`` or ``cuda:<i>``.
        dtype: ``fp32``, ``fp16`` or ``bf16`` (parameters and activations).
        warmup: untimed repetitions before measuring.
        reps: measured repetitions; the median is kept.
        split_backward: also measure ``bwd_input_s`` and ``bwd_weight_s``.
        threads: CPU threads (``torch.set_num_threads``) during profiling; to match a CPU
            replay use ``cores // nproc``. ``None`` leaves torch's setting.
        seed: model and batch seed.
        path: if given, write the trace there with ``sim.trace.native.write_trace``
            (``x`` -> ``x.csv`` + ``x.yaml``).
        attention: force the blocks' attention kernel, ``flash`` or ``math``
            (:func:`backends.torch.models.attention.attention_kernel`); ``None`` lets torch choose.
            Recorded as ``provenance.attention_kernel`` (and ``model_shape.attention``), so a
            replay of the trace runs the same kernel.

    Returns:
        The trace (``device`` from :func:`device_model_name`; provenance: source, command,
        date, torch version, device details, micro-batch, dtype, threads, model, seed).
    """
    spec = as_spec(spec)
    dev = torch.device(device)
    old_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        with attention_kernel(attention):
            out = _profile_layers(
                spec, microbatch_size, dev, dtype, seed, split_backward, warmup, reps
            )
    finally:
        torch.set_num_threads(old_threads)
    trace = Trace(
        name=spec.name,
        layers=tuple(out),
        microbatch_size=microbatch_size,
        dtype=dtype,
        device=device_model_name(dev),
        provenance=_provenance(spec, dev, microbatch_size, dtype, warmup, reps, threads, seed),
    )
    if attention is not None:
        shape = dict(trace.provenance["model_shape"], attention=attention)
        trace = replace(
            trace,
            provenance={**trace.provenance, "model_shape": shape, "attention_kernel": attention},
        )
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        write_trace(trace, path)
    return trace


def _provenance(
    spec: ModelSpec,
    dev: torch.device,
    b: int,
    dtype: str,
    warmup: int,
    reps: int,
    threads: int | None,
    seed: int,
) -> dict[str, Any]:
    detail = torch.cuda.get_device_name(dev) if dev.type == "cuda" else cpu_model_name()
    return {
        "source": "backends.torch.profile.layers.profile_model",
        "command": " ".join(sys.argv),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "torch": str(torch.__version__),
        "device_detail": detail,
        "host": platform.node(),
        "microbatch_size": b,
        "dtype": dtype,
        "warmup": warmup,
        "reps": reps,
        "threads": threads or torch.get_num_threads(),
        "model": spec.to_dict(),
        "model_shape": {
            "kind": spec.kind,
            "hidden": spec.hidden,
            "heads": spec.heads,
            "seq_len": spec.seq_len,
            "vocab": spec.vocab,
            "ffn_mult": spec.ffn_mult,
            "attention": "flash",
            "dropout": False,
        },
        "seed": seed,
        "notes": "per-layer median wall time; act_bytes from saved_tensors_hooks (per storage, "
        "parameters excluded); head includes the cross-entropy loss",
    }


def merge_sizes(traces: list[Trace]) -> Trace:
    """One trace from traces of the same model at different micro-batch sizes.

    The smallest size becomes ``layers``/``microbatch_size``; the others go to ``profiles``.
    Provenance: the smallest size's, with ``microbatch_sizes`` listing all of them.

    Raises:
        ValueError: no traces, a size twice, or different layer names.
    """
    if not traces:
        raise ValueError("no traces to merge")
    traces = sorted(traces, key=lambda t: t.microbatch_size)
    sizes = [t.microbatch_size for t in traces]
    if len(set(sizes)) != len(sizes):
        raise ValueError(f"micro-batch sizes must be distinct, got {sizes}")
    names = [x.name for x in traces[0].layers]
    if any([x.name for x in t.layers] != names for t in traces):
        raise ValueError("traces of different models (layer names differ)")
    first = traces[0]
    prov = dict(first.provenance, microbatch_sizes=sizes)
    prov.pop("microbatch_size", None)
    return replace(
        first, provenance=prov, profiles={t.microbatch_size: t.layers for t in traces[1:]}
    )
