"""Profile a user's own model layer by layer (``sim profile --model FILE.py:FUNC``).

The same measurements as the GPT/BERT path (:func:`backends.torch.profile.layers.profile_model`,
whose per-layer routine this reuses): for every layer of the chain
(:mod:`backends.torch.models.layer_chain`), on its real input (the previous layer's output for the
micro-batch ``FUNC`` returned), the median forward and backward time, the bytes saved for backward
(``saved_tensors_hooks``), output and parameter bytes and forward FLOPs (``FlopCounterMode``). The
last layer includes the loss (``--loss``, or the stand-in
:func:`backends.torch.models.user.default_loss`); its output crosses no boundary, so its
``out_bytes`` is 0.

The trace's ``provenance.model`` is the :class:`~backends.torch.models.user_spec.UserModelSpec`
(source, layer fqns, loss, seed), from which ``sim validate`` rebuilds the model on every rank.
"""

from __future__ import annotations

import datetime
import platform
import sys
from pathlib import Path
from typing import Any

import torch

from backends.torch.models.layer_chain import (
    call_order,
    chain_layers,
    forward_note,
    never_called,
    run_chain,
    traced_layers,
    uncovered_parameters,
)
from backends.torch.models.shared_params import counted_once
from backends.torch.models.user import UserModel, build_user_model, compute_loss, load_loss
from backends.torch.models.user_spec import UserModelSpec
from backends.torch.profile.layers import cpu_model_name, device_model_name, profile_layer
from sim.errors import InputError
from sim.trace.native import write_trace
from sim.trace.schema import Trace


def prepare(
    source: str,
    *,
    layers: tuple[str, ...] | None,
    loss: str | None,
    microbatch_size: int | None,
    dtype: str,
    seed: int = 0,
    name: str = "model",
    kwargs: dict[str, Any] | None = None,
) -> tuple[UserModelSpec, UserModel, list, list]:
    """Load and check a user's model: spec, the built model, its chain and the chain outputs.

    The loss is called once on the last output, so a broken loss fails here, before timing.

    Raises:
        InputError: anything :func:`~backends.torch.models.user.build_user_model`,
            :func:`~backends.torch.models.layer_chain.chain_layers` or ``run_chain`` reject.
    """
    draft = UserModelSpec.draft(source, loss=loss, seed=seed, kwargs=kwargs, name=name)
    um = build_user_model(draft, microbatch_size=microbatch_size, dtype=dtype)
    order = call_order(um.model, um.sample)
    traced = traced_layers(um.model, order) if order else None
    chain = chain_layers(um.model, layers, traced=traced)
    idle = never_called(chain, order)
    if idle:
        raise InputError(
            f"the model's forward never calls {', '.join(idle[:4])}; the layers it runs, in "
            f"order: --layers '{','.join(traced or [])}'",
            field="--layers",
        )
    outs = run_chain(chain, um.sample)
    with torch.no_grad():
        compute_loss(load_loss(draft), outs[-1], um.target, loss)
    spec = draft.with_chain(
        tuple(n for n, _ in chain), um.takes_microbatch_size, um.microbatch_size
    )
    return spec, um, chain, outs


def profile_user_model(
    source: str,
    *,
    layers: tuple[str, ...] | None = None,
    loss: str | None = None,
    microbatch_size: int | None = None,
    device: str = "cpu",
    dtype: str = "fp32",
    warmup: int = 2,
    reps: int = 5,
    split_backward: bool = False,
    threads: int | None = None,
    seed: int = 0,
    name: str = "model",
    kwargs: dict[str, Any] | None = None,
    path: str | Path | None = None,
) -> Trace:
    """Profile every layer of a user's model for one micro-batch; optionally write the trace.

    Args:
        source: ``FILE.py:FUNC`` or ``package.module:FUNC`` (see :mod:`backends.torch.models.user`).
        layers: module names forming the chain; ``None``: the top-level children.
        loss: ``FILE.py:FUNC`` for the loss, or ``None`` for the stand-in loss.
        microbatch_size: samples per micro-batch (``None``: what ``FUNC`` returns).
        device, dtype, warmup, reps, split_backward, threads: as
            :func:`backends.torch.profile.layers.profile_model`.
        seed: ``torch.manual_seed`` before ``FUNC`` (weights and sample).
        name: the trace's model name.
        kwargs: extra keyword arguments for ``FUNC``.
        path: write ``path.csv`` + ``path.yaml`` there.

    Returns:
        The trace; ``provenance.model`` holds the spec ``sim validate`` replays.

    Raises:
        InputError: a bad function, return value, layer name, sample or loss.
    """
    spec, um, chain, _ = prepare(
        source,
        layers=layers,
        loss=loss,
        dtype=dtype,
        seed=seed,
        microbatch_size=microbatch_size,
        name=name,
        kwargs=kwargs,
    )
    note = forward_note(um.model, chain, um.sample)
    uncovered = uncovered_parameters(um.model, chain)
    dev = torch.device(device)
    old_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        out = _profile_chain(spec, um, chain, dev, split_backward, warmup, reps)
    finally:
        torch.set_num_threads(old_threads)
    layers_once, shared = counted_once(out, [m for _, m in chain])
    notes, warnings = _notes(bool(loss), len(shared), note, uncovered)
    prov = {
        "source": "backends.torch.profile.user.profile_user_model",
        "command": " ".join(sys.argv),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "torch": str(torch.__version__),
        "device_detail": torch.cuda.get_device_name(dev)
        if dev.type == "cuda"
        else cpu_model_name(),
        "host": platform.node(),
        "microbatch_size": um.microbatch_size,
        "dtype": dtype,
        "warmup": warmup,
        "reps": reps,
        "threads": threads or torch.get_num_threads(),
        "model": spec.to_dict(),
        "seed": seed,
        "notes": "; ".join(notes + warnings),
    }
    if warnings:
        prov["warnings"] = warnings
    trace = Trace(
        name=name,
        layers=layers_once,
        shared=shared,
        microbatch_size=um.microbatch_size,
        dtype=dtype,
        device=device_model_name(dev),
        provenance=prov,
    )
    if path is not None:
        write_trace(trace, path)
    return trace


def _profile_chain(
    spec: UserModelSpec,
    um: UserModel,
    chain: list,
    dev: torch.device,
    split_backward: bool,
    warmup: int,
    reps: int,
) -> list:
    loss_fn = load_loss(spec)
    target = None if um.target is None else um.target.to(dev)
    sample = tuple(t.to(dev) for t in um.sample)
    x: torch.Tensor = sample[0]
    rest = sample[1:]
    out = []
    for i, (name, layer) in enumerate(chain):
        layer = layer.to(dev)
        shapes: set[tuple[int, ...]] = set()

        def fn(h: torch.Tensor, layer=layer, i=i, shapes=shapes) -> torch.Tensor:
            y = layer(h, *rest) if i == 0 else layer(h)
            shapes.add(tuple(y.shape))
            return compute_loss(loss_fn, y, target, spec.loss) if i == len(chain) - 1 else y

        params = list(layer.parameters())
        out.append(profile_layer(name, fn, params, x, dev, split_backward, warmup, reps))
        with torch.no_grad():
            x = layer(x, *rest) if i == 0 else layer(x)
        shapes.add(tuple(x.shape))
        if len(shapes) > 1:
            raise InputError(
                f"layer {i} ({name!r}) returned outputs of different shapes on the same input "
                f"({', '.join(str(list(s)) for s in sorted(shapes))}); a pipeline stage sends "
                "the same shape for every micro-batch",
                field="--layers" if i else "--model",
            )
    return out


def _notes(
    own_loss: bool, shared_groups: int, note: str | None, uncovered: list[str]
) -> tuple[list[str], list[str]]:
    """The profile's notes (how it was measured; the ``shared_groups`` of parameters counted
    once) and warnings (``note`` on the model's forward, :func:`forward_note`; parameters outside the chain,
    the first 8 of ``uncovered``)."""
    notes = [
        "per-layer median wall time; act_bytes from saved_tensors_hooks (per storage, "
        "parameters excluded); the last layer includes the loss"
        + ("" if own_loss else " (stand-in loss mean(output^2), an assumption)")
    ]
    if shared_groups:
        notes.append(
            f"{shared_groups} group(s) of parameters shared by several layers, counted once "
            "(trace.shared); kept tied across stages by an all-reduce"
        )
    warnings = [note] if note else []
    if uncovered:
        warnings.append(
            f"parameters outside the layer chain (not profiled, not replayed): {uncovered[:8]}"
        )
    return notes, warnings
