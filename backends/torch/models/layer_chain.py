"""The layer chain of a user's model: its top-level children in order, or the modules named.

pipesim cuts a model into stages between layers, so it needs the model as a chain
``y = layer_n(... layer_1(layer_0(*sample)))``: each layer takes the previous layer's output
(one tensor) and returns one tensor. By default the chain is the model's top-level children
(``model.named_children()``) in registration order, which is the forward order of
``nn.Sequential``-like models; ``--layers a,b.0,b.1,head`` names the modules instead (fully
qualified names, as ``model.get_submodule`` takes them).

The model's own ``forward`` is not used to run the chain; it is run once, with hooks, to learn
which modules it really calls and in which order (:func:`call_order`), so the ``--layers``
pipesim suggests (:func:`traced_layers`) lists what runs: a module registered but never called
(a probe, an unused head) is left out, children of a ``ModuleList`` appear in the order they
run. :func:`forward_note` compares the forward's output with the chain's, so a model whose
forward does more than chaining its layers (a residual around two of them, a reshape between
them) is reported instead of silently mis-profiled.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

import torch
from torch import nn

from sim.errors import InputError


def call_order(model: nn.Module, sample: tuple[torch.Tensor, ...]) -> list[str] | None:
    """The fqns of the modules ``model(*sample)`` calls, in the order of their first call
    (forward pre-hooks on every module; ``eval()`` and no autograd, the mode restored), or
    ``None`` when the forward raises (it is optional: the chain may still be named)."""
    order: dict[str, None] = {}
    hooks = [
        m.register_forward_pre_hook(lambda mod, args, name=name: order.setdefault(name, None))
        for name, m in model.named_modules()
        if name
    ]
    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(*sample)
    except Exception:
        return None
    finally:
        model.train(training)
        for h in hooks:
            h.remove()
    return list(order)


def traced_layers(model: nn.Module, order: Sequence[str]) -> list[str]:
    """The layer chain the forward runs, from :func:`call_order`: every called module none of
    whose enclosing modules is called (containers such as ``ModuleList`` are never called),
    in call order; the whole of a container's children, in their order, becomes ``name.*``.

    Example:
        >>> m = nn.Module(); m.embed = nn.Linear(2, 2); m.unused = nn.Linear(2, 2)
        >>> m.blocks = nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2)]); m.head = nn.Linear(2, 2)
        >>> traced_layers(m, ["embed", "blocks.0", "blocks.1", "head"])
        ['embed', 'blocks.*', 'head']
    """
    called = set(order)
    layers = [
        n
        for n in order
        if not any(".".join(n.split(".")[:k]) in called for k in range(1, n.count(".") + 1))
    ]
    out: list[str] = []
    i = 0
    while i < len(layers):
        parent = layers[i].rpartition(".")[0]
        kids = (
            [f"{parent}.{c}" for c, _ in model.get_submodule(parent).named_children()]
            if parent
            else []
        )
        if kids and layers[i : i + len(kids)] == kids and len(kids) > 1:
            out.append(f"{parent}.*")
            i += len(kids)
        else:
            out.append(layers[i])
            i += 1
    return out


def chain_layers(
    model: nn.Module,
    fqns: Sequence[str] | None = None,
    *,
    field: str = "--layers",
    traced: Sequence[str] | None = None,
) -> list[tuple[str, nn.Module]]:
    """The chain as ``(fqn, module)`` pairs, input side first.

    Args:
        model: the user's model.
        fqns: module names; ``None`` takes the top-level children in order; ``name.*``
            stands for the children of ``name`` in order.
        field: the option named in errors.
        traced: the chain the forward runs (:func:`traced_layers`), suggested when the
            top-level children are not it.

    Raises:
        InputError: a name is not a module of the model (with close matches), a name repeats,
            one named module contains another, the model has no children, or (no ``fqns``)
            its top-level children are not the layers its forward runs in order.
    """
    if not fqns:
        chain = list(model.named_children())
        if not chain:
            raise InputError(
                f"{type(model).__name__} has no child modules to use as layers; "
                "name the layers with --layers fqn1,fqn2,...",
                field=field,
            )
        lists = [n for n, m in chain if isinstance(m, (nn.ModuleList, nn.ModuleDict))]
        names = [n for n, _ in chain]
        if lists or (traced is not None and list(traced) != names):
            suggest = (
                ",".join(traced)
                if traced
                else ",".join(f"{n}.*" if n in lists else n for n in names)
            )
            why = (
                f"top-level {', '.join(repr(n) for n in lists)} of {type(model).__name__} is a "
                "container, not a layer"
                if lists
                else f"{type(model).__name__}'s forward does not call its top-level modules "
                f"({', '.join(names)}) once each in that order"
            )
            source = "its forward runs" if traced else "e.g."
            raise InputError(f"{why}; name the chain ({source}): --layers '{suggest}'", field=field)
        return chain
    known = [n for n, _ in model.named_modules() if n]
    out = []
    for fqn in expand_stars(model, fqns, field):
        try:
            out.append((fqn, model.get_submodule(fqn)))
        except AttributeError:
            close = difflib.get_close_matches(fqn, known, n=4)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            top = ", ".join(n for n, _ in model.named_children())
            raise InputError(
                f"layer {fqn!r} is not a module of {type(model).__name__}{hint} "
                f"(its top-level modules: {top})",
                field=field,
            ) from None
    _check_disjoint([n for n, _ in out], field)
    return out


def expand_stars(model: nn.Module, fqns: Sequence[str], field: str = "--layers") -> list[str]:
    """``"blocks.*"`` -> ``["blocks.0", "blocks.1", ...]``: the children of ``blocks`` in order.

    Raises:
        InputError: the part before ``.*`` is not a module with children.
    """
    out: list[str] = []
    for fqn in fqns:
        if not fqn.endswith(".*"):
            out.append(fqn)
            continue
        parent = fqn[:-2]
        try:
            children = [f"{parent}.{n}" for n, _ in model.get_submodule(parent).named_children()]
        except AttributeError:
            children = []
        if not children:
            raise InputError(
                f"{fqn!r}: {parent!r} is not a module with children in {type(model).__name__}",
                field=field,
            )
        out += children
    return out


def _check_disjoint(names: list[str], field: str) -> None:
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            if a == b:
                raise InputError(f"layer {a!r} is named twice", field=field)
            if b.startswith(a + ".") or a.startswith(b + "."):
                raise InputError(
                    f"layers {a!r} and {b!r} overlap (one contains the other)", field=field
                )


def never_called(chain: Sequence[tuple[str, nn.Module]], order: Sequence[str] | None) -> list[str]:
    """Layers of ``chain`` the model's forward never calls (empty when unknown)."""
    if order is None:
        return []
    called = set(order)
    return [n for n, _ in chain if n not in called]


def uncovered_parameters(model: nn.Module, chain: Sequence[tuple[str, nn.Module]]) -> list[str]:
    """Names of the model's parameters that no layer of the chain holds (never trained)."""
    held = {id(p) for _, m in chain for p in m.parameters()}
    return [n for n, p in model.named_parameters() if id(p) not in held]


def run_layer(
    index: int, name: str, layer: nn.Module, inputs: tuple[torch.Tensor, ...], option: str
) -> torch.Tensor:
    """``layer(*inputs)``, checked to return one tensor.

    Raises:
        InputError: the layer raised (wrong input shape, say) or returned something else than
            one tensor; the message names the layer, its index and the input shapes.
    """
    shapes = [list(t.shape) for t in inputs]
    what = "the sample" if index == 0 else f"layer {index - 1}'s output"
    try:
        out = layer(*inputs)
    except Exception as exc:
        raise InputError(
            f"layer {index} ({name!r}) failed on {what} of shape "
            f"{shapes[0] if len(shapes) == 1 else shapes}: {type(exc).__name__}: "
            f"{exc}",
            field=option,
        ) from None
    if not isinstance(out, torch.Tensor):
        raise InputError(
            f"layer {index} ({name!r}) returned a {type(out).__name__}; every layer "
            "of the chain must return one tensor (wrap it, or choose other "
            "--layers)",
            field="--layers",
        )
    return out


def run_chain(
    chain: Sequence[tuple[str, nn.Module]],
    sample: tuple[torch.Tensor, ...],
    option: str = "--model",
) -> list[torch.Tensor]:
    """Every layer's output for ``sample`` (no autograd), checked as in :func:`run_layer`."""
    outs: list[torch.Tensor] = []
    x: tuple[torch.Tensor, ...] = sample
    with torch.no_grad():
        for i, (name, layer) in enumerate(chain):
            y = run_layer(i, name, layer, x, option if i == 0 else "--layers")
            outs.append(y)
            x = (y,)
    return outs


def forward_note(
    model: nn.Module, chain: Sequence[tuple[str, nn.Module]], sample: tuple[torch.Tensor, ...]
) -> str | None:
    """A note when ``model(*sample)`` differs from the chain's output (``None`` when equal).

    Both run in ``eval()`` mode (dropout off, batch norm on running statistics) and without
    autograd; the model's training mode is restored afterwards. Tolerance: ``rtol=1e-3``,
    ``atol=1e-4`` (float32 summation-order differences).
    """
    training = model.training
    model.eval()
    try:
        out = run_chain(chain, sample)[-1]
        try:
            with torch.no_grad():
                ref = model(*sample)
        except Exception as exc:  # the model's own forward is optional
            return (
                f"model(*sample) raised {type(exc).__name__}: {exc}; the chain of layers "
                "was profiled"
            )
    finally:
        model.train(training)
    if not isinstance(ref, torch.Tensor):
        return None
    if ref.shape != out.shape:
        return (
            f"model(*sample) has shape {list(ref.shape)} but the chain of layers gives "
            f"{list(out.shape)}: the model's forward does more than chain its layers"
        )
    if not torch.allclose(ref.float(), out.float(), rtol=1e-3, atol=1e-4):
        diff = (ref.float() - out.float()).abs().max().item()
        return (
            f"model(*sample) differs from the chain of layers (max abs diff {diff:.3g}): "
            "the model's forward does more than chain its layers"
        )
    return None
