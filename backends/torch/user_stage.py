"""One pipeline stage of a user's model, rebuilt on a replay rank (``sim validate``).

Every rank calls the model's function (``FILE.py:FUNC``) under the trace's seed, so all ranks
hold the same weights, takes the recorded layer chain (fqns) and keeps the layers of its stage
(``boundaries``: start layer of each stage, as for GPT/BERT). The other layers are dropped. The
shape of the activation a stage receives is the previous layer's output for the micro-batch,
found by running the earlier layers under ``FakeTensorMode`` (no compute, no memory).

Every micro-batch of the replay uses the sample the function returned (the data are the same,
the weights change with every step).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from backends.torch.layer_chain import chain_layers
from backends.torch.models import stage_ranges
from backends.torch.user_model import build_user_model, compute_loss, load_loss
from backends.torch.user_spec import UserModelSpec
from sim.partition import uniform_partition


class UserStageModule(nn.Module):
    """The layers of one stage run in order; optionally recomputing each (checkpointing).

    Args:
        layers: the stage's modules, chain order.
        first: chain index of ``layers[0]`` (names parameters globally).
        recompute: wrap each layer in ``torch.utils.checkpoint.checkpoint`` (non-reentrant),
            or only the layers at these positions (set by :func:`backends.torch.memory.apply_policy`).
    """

    def __init__(
        self, layers: Sequence[nn.Module], first: int = 0, recompute: bool | Collection[int] = False
    ):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.first = first
        self.recompute = (
            frozenset(range(len(layers))) if recompute is True else frozenset(recompute or ())
        )

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            if i in self.recompute:
                y = torch.utils.checkpoint.checkpoint(layer, *xs, use_reentrant=False)
            else:
                y = layer(*xs)
            xs = (y,)
        return xs[0]

    def global_named_parameters(self) -> dict[str, torch.Tensor]:
        """Parameters named ``"<chain index>.<name>"``."""
        return {
            f"{self.first + i}.{n}": p
            for i, layer in enumerate(self.layers)
            for n, p in layer.named_parameters()
        }


@dataclass
class UserStage:
    """What a replay rank needs of a user's model.

    Attributes:
        module: the stage's layers (on CPU; the runtime moves it).
        sample: the first stage's input for every micro-batch (on CPU).
        target: the loss target (or ``None``).
        recv_shape: shape of the activation this stage receives (``None`` on stage 0).
        recv_dtype: its dtype.
        out_shape: shape of this stage's output, i.e. of the gradient it receives (``None``
            on the last stage).
        out_dtype: its dtype.
        loss_fn: the loss, called through :func:`~backends.torch.user_model.compute_loss`.
        loss_ref: the loss reference (``None``: stand-in loss).
    """

    module: UserStageModule
    sample: tuple[torch.Tensor, ...]
    target: torch.Tensor | None
    recv_shape: tuple[int, ...] | None
    recv_dtype: torch.dtype | None
    out_shape: tuple[int, ...] | None
    out_dtype: torch.dtype | None
    loss_fn: Callable[..., torch.Tensor]
    loss_ref: str | None

    def loss(self, y: torch.Tensor) -> torch.Tensor:
        """The loss of the last stage's output ``y`` (fp32 scalar)."""
        target = None if self.target is None else self.target.to(y.device)
        return compute_loss(self.loss_fn, y, target, self.loss_ref)


def _prefix_output(layers: Sequence[nn.Module], sample: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """The output of ``layers`` chained on ``sample``, under fake tensors when possible."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    try:
        with FakeTensorMode(allow_non_fake_inputs=True) as mode, torch.no_grad():
            xs: tuple[torch.Tensor, ...] = tuple(mode.from_tensor(t) for t in sample)
            for layer in layers:
                xs = (layer(*xs),)
        return xs[0]
    except Exception:  # an op without a fake kernel: run it for real, once
        with torch.no_grad():
            xs = sample
            for layer in layers:
                xs = (layer(*xs),)
        return xs[0]


def build_user_stage(
    model: dict[str, Any],
    boundaries: Sequence[int] | None,
    stage: int,
    stages: int,
    *,
    microbatch_size: int,
    dtype: str = "fp32",
    recompute: bool = False,
) -> UserStage:
    """Stage ``stage`` of the user model described by ``model`` (a ``UserModelSpec`` dict).

    Raises:
        sim.errors.InputError: the function or the chain can no longer be built.
        ValueError: bad boundaries.
    """
    spec = UserModelSpec.from_dict(model)
    um = build_user_model(spec, microbatch_size=microbatch_size, dtype=dtype)
    chain = [m for _, m in chain_layers(um.model, spec.layers)]
    rng = stage_ranges(boundaries or list(uniform_partition(len(chain), stages)), len(chain))[stage]
    recv = _prefix_output(chain[: rng.start], um.sample) if rng.start else None
    out = _prefix_output(chain[: rng.stop], um.sample) if rng.stop < len(chain) else None
    return UserStage(
        module=UserStageModule(chain[rng.start : rng.stop], rng.start, recompute),
        sample=um.sample,
        target=um.target,
        recv_shape=None if recv is None else tuple(recv.shape),
        recv_dtype=None if recv is None else recv.dtype,
        out_shape=None if out is None else tuple(out.shape),
        out_dtype=None if out is None else out.dtype,
        loss_fn=load_loss(spec),
        loss_ref=spec.loss,
    )
