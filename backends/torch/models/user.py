"""Load a user's model from ``FILE.py:FUNC`` or ``package.module:FUNC`` and check what it returns.

``FUNC`` builds the model and one micro-batch::

    def build(microbatch_size: int = 8):           # the parameter is optional
        model = MyNet()
        x = torch.randn(microbatch_size, 3, 32, 32)
        y = torch.randint(0, 10, (microbatch_size,))
        return model, x, y                         # or (model, x): no target

* ``model``: a ``torch.nn.Module``; its layer chain is taken by :mod:`.layer_chain`.
* ``sample``: one micro-batch, a tensor or a tuple of tensors with the batch in dim 0; the
  first layer of the chain is called as ``layer(*sample)``.
* ``target`` (optional): passed to the loss as ``loss(output, target)``.

If ``FUNC`` accepts ``microbatch_size``, pipesim passes the micro-batch size it needs;
otherwise another size is made from the sample itself, its samples repeated in order and cut
(:func:`resize_batch`), so a profile or a replay may use any micro-batch size either way.

Every problem (no such file / module / function, an import error, a wrong return value) is an
:class:`sim.errors.InputError` naming the file and the command-line option.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from backends.torch.models.transformer import DTYPES
from backends.torch.models.user_spec import UserModelSpec, file_of
from sim.errors import InputError


def _import_file(path: Path, option: str) -> Any:
    name = "pipesim_user_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise InputError("cannot be imported as a Python module", file=str(path), field=option)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))  # so the file can import its neighbours
    try:
        sys.modules[name] = module
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise InputError(
            f"importing it failed: {type(exc).__name__}: {exc}", file=str(path), field=option
        ) from None
    finally:
        sys.path.remove(str(path.parent))
    return module


def _import_module(name: str, option: str) -> Any:
    """Import ``name`` with the working directory on ``sys.path`` (as ``python -m`` has it)."""
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise InputError(
            f"module {name!r} cannot be imported (from {cwd}): {exc}", field=option
        ) from None
    finally:
        if added:
            sys.path.remove(cwd)


def resolve_file(ref: str, resolved: str | None = None) -> Path | None:
    """The file of ``FILE.py:FUNC`` as given (from the working directory), else ``resolved``."""
    head = file_of(ref)
    if head is None:
        return None
    p = Path(head)
    if not p.exists() and resolved:
        p = Path(resolved)
    return p


def load_callable(ref: str, *, option: str, resolved: str | None = None) -> Callable[..., Any]:
    """The function ``ref`` names: ``FILE.py:FUNC`` or ``package.module:FUNC``.

    Args:
        ref: the reference.
        option: the command-line option or field it came from (named in errors).
        resolved: absolute path of the file, tried when ``FILE.py`` does not exist from the
            working directory (a trace made elsewhere).

    Raises:
        InputError: malformed reference, missing file or module, import error, no such
            function, or not callable.
    """
    if ":" not in ref or not ref.rsplit(":", 1)[1]:
        raise InputError(f"{ref!r} must be FILE.py:FUNC or package.module:FUNC", field=option)
    head, func = ref.rsplit(":", 1)
    path = resolve_file(ref, resolved)
    where = str(path) if path is not None else head
    if path is not None:
        if not path.is_file():
            raise InputError("file not found", file=str(path), field=option)
        module = _import_file(path.resolve(), option)
    else:
        module = _import_module(head, option)
    fn = getattr(module, func, None)
    if fn is None:
        defined = sorted(
            n for n, v in vars(module).items() if inspect.isfunction(v) and not n.startswith("_")
        )
        raise InputError(
            f"has no function {func!r}; functions defined there: {', '.join(defined) or 'none'}",
            file=where,
            field=option,
        )
    if not callable(fn):
        raise InputError(
            f"{func!r} is a {type(fn).__name__}, not a function", file=where, field=option
        )
    return fn


def takes_microbatch_size(fn: Callable[..., Any]) -> bool:
    """True when ``fn`` accepts a ``microbatch_size`` keyword (or ``**kwargs``)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "microbatch_size" or p.kind is p.VAR_KEYWORD for p in params)


@dataclass
class UserModel:
    """What ``FUNC`` returned, checked.

    Attributes:
        model: the module (training mode, in the requested dtype, on CPU).
        sample: one micro-batch, as a tuple of tensors (batch in dim 0).
        target: the target for the loss, or ``None``.
        microbatch_size: samples in the micro-batch (dim 0 of the sample).
        takes_microbatch_size: ``FUNC`` accepted ``microbatch_size``.
    """

    model: nn.Module
    sample: tuple[torch.Tensor, ...]
    target: torch.Tensor | None
    microbatch_size: int
    takes_microbatch_size: bool


def _check_return(out: Any, ref: str, option: str) -> tuple[nn.Module, tuple, Any]:
    where = file_of(ref) or ref
    shape = "(model: nn.Module, sample: Tensor | tuple[Tensor, ...][, target])"
    if not isinstance(out, (tuple, list)) or len(out) not in (2, 3):
        got = f"a {type(out).__name__}" + (
            f" of {len(out)}" if isinstance(out, (tuple, list)) else ""
        )
        raise InputError(f"{ref} returned {got}; it must return {shape}", file=where, field=option)
    model, sample = out[0], out[1]
    target = out[2] if len(out) == 3 else None
    if not isinstance(model, nn.Module):
        raise InputError(
            f"{ref} returned a {type(model).__name__} as the model; it must be a "
            f"torch.nn.Module ({shape})",
            file=where,
            field=option,
        )
    sample = (sample,) if isinstance(sample, torch.Tensor) else sample
    if (
        not isinstance(sample, (tuple, list))
        or not sample
        or not all(isinstance(t, torch.Tensor) for t in sample)
    ):
        raise InputError(
            f"{ref} returned a sample that is not a tensor or a tuple of tensors "
            f"({type(out[1]).__name__}); {shape}",
            file=where,
            field=option,
        )
    if target is not None and not isinstance(target, torch.Tensor):
        raise InputError(
            f"{ref} returned a target of type {type(target).__name__}; it must be a tensor",
            file=where,
            field=option,
        )
    batches = {t.shape[0] if t.dim() else None for t in sample}
    if None in batches or len(batches) != 1:
        raise InputError(
            f"{ref} returned a sample whose tensors do not share a batch "
            f"dimension (dim 0): shapes {[list(t.shape) for t in sample]}",
            file=where,
            field=option,
        )
    return model, tuple(sample), target


def build_user_model(
    spec: UserModelSpec,
    *,
    microbatch_size: int | None = None,
    dtype: str = "fp32",
    option: str = "--model",
) -> UserModel:
    """Call the spec's function under its seed and check what it returns.

    Args:
        spec: the model's source, seed and keyword arguments.
        microbatch_size: samples per micro-batch wanted; passed to a function that accepts it,
            else checked against the sample.
        dtype: ``fp32``, ``fp16`` or ``bf16``: parameters and floating-point sample/target.
        option: the option named in errors.

    Raises:
        InputError: see :func:`load_callable` and :func:`_check_return`; the function raised
            (``sys.exit`` included); a function asked for ``microbatch_size`` returned another
            batch.
    """
    fn = load_callable(spec.source, option=option, resolved=spec.resolved)
    takes_b = takes_microbatch_size(fn)
    kwargs = dict(spec.kwargs)
    if takes_b and microbatch_size is not None:
        kwargs["microbatch_size"] = microbatch_size
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        try:
            out = fn(**kwargs)
        except InputError:
            raise
        except (Exception, SystemExit) as exc:  # sys.exit() in user code is an error too
            raise InputError(
                f"{spec.source} raised {type(exc).__name__}: {exc}",
                file=file_of(spec.source),
                field=option,
            ) from None
    model, sample, target = _check_return(out, spec.source, option)
    b = int(sample[0].shape[0])
    if microbatch_size is not None and b != microbatch_size:
        if takes_b:
            raise InputError(
                f"{spec.source} returned a sample of {b} samples (dim 0) but was asked for "
                f"microbatch_size={microbatch_size}",
                file=file_of(spec.source),
                field=option,
            )
        sample, target = resize_batch(sample, target, microbatch_size)
        b = microbatch_size
    dt = DTYPES[dtype]
    model = cast_module(model, dt).train()
    sample = tuple(t.to(dt) if t.is_floating_point() else t for t in sample)
    return UserModel(model, sample, target, b, takes_b)


def resize_batch(
    sample: tuple[torch.Tensor, ...], target: torch.Tensor | None, microbatch_size: int
) -> tuple[tuple[torch.Tensor, ...], torch.Tensor | None]:
    """The sample (and a target with the same dim 0) at ``microbatch_size`` samples, for a
    function without a ``microbatch_size`` parameter: its samples repeated in order and cut
    (``index = arange(b) mod b0``), so every size is made of the function's own data.

    Example:
        >>> x = torch.arange(3).reshape(3, 1)
        >>> resize_batch((x,), torch.tensor([7, 8, 9]), 5)[1].tolist()
        [7, 8, 9, 7, 8]
    """
    b0 = int(sample[0].shape[0])
    index = torch.arange(microbatch_size) % b0
    out = tuple(t[index] for t in sample)
    if target is not None and target.dim() and target.shape[0] == b0:
        target = target[index]
    return out, target


def cast_module(model: nn.Module, dtype: torch.dtype) -> nn.Module:
    """Floating-point parameters and buffers of ``model`` cast to ``dtype``, in place.

    Unlike ``model.to(dtype)`` this also works under ``FakeTensorMode`` (where ``to`` tries to
    swap tensors that hold weak references). Tied parameters stay tied.
    """
    done: dict[int, nn.Parameter] = {}
    for module in model.modules():
        for name, p in list(module._parameters.items()):
            if p is None or not p.is_floating_point() or p.dtype == dtype:
                continue
            if id(p) not in done:
                done[id(p)] = nn.Parameter(p.detach().to(dtype), requires_grad=p.requires_grad)
            module._parameters[name] = done[id(p)]
        for name, b in list(module._buffers.items()):
            if b is not None and b.is_floating_point() and b.dtype != dtype:
                module._buffers[name] = b.to(dtype)
    return model


def default_loss(output: torch.Tensor, target: torch.Tensor | None = None) -> torch.Tensor:
    """Stand-in loss when none is given: ``mean(output**2)`` in fp32 (an assumption: a scalar
    whose backward touches every output element, like a real loss; for timing only)."""
    return output.float().square().mean()


def load_loss(spec: UserModelSpec, option: str = "--loss") -> Callable[..., torch.Tensor]:
    """The loss ``spec.loss`` names, or :func:`default_loss`; called as ``loss(output[,
    target])`` (the target only when the model's function returned one)."""
    if spec.loss is None:
        return default_loss
    return load_callable(spec.loss, option=option, resolved=spec.loss_resolved)


def compute_loss(
    loss_fn: Callable[..., Any], output: torch.Tensor, target: torch.Tensor | None, ref: str | None
) -> torch.Tensor:
    """``loss_fn(output[, target])``, checked to be a scalar tensor.

    Raises:
        InputError: the loss raised or did not return a scalar tensor (naming ``--loss``).
    """
    try:
        loss = loss_fn(output) if target is None else loss_fn(output, target)
    except Exception as exc:
        raise InputError(
            f"{ref or 'the loss'} raised {type(exc).__name__}: {exc} (output "
            f"shape {list(output.shape)})",
            file=file_of(ref) if ref else None,
            field="--loss",
        ) from None
    if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
        got = list(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__
        raise InputError(
            f"{ref or 'the loss'} must return a scalar tensor, got {got}",
            file=file_of(ref) if ref else None,
            field="--loss",
        )
    return loss
