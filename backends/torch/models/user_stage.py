"""A user's model rebuilt on a replay rank (``sim validate``): :class:`UserModel`.

Every rank calls the model's function (``FILE.py:FUNC``) under the trace's seed, so all ranks
hold the same weights, takes the recorded layer chain (fqns) and runs the layers of its stages
(:class:`UserStageModule`; several stage chunks of one rank share what the model shares). The
shape of the activation a stage receives is the previous layer's output for the micro-batch,
found by running the earlier layers under ``FakeTensorMode`` (no compute, no memory).

Every micro-batch of the replay uses the sample the function returned (the data are the same,
the weights change with every step).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import torch
from torch import nn

from backends.torch.models.layer_chain import chain_layers
from backends.torch.models.replay_model import ReplayModel
from backends.torch.models.shared_params import canonical_names, names_of, shared_groups
from backends.torch.models.user import build_user_model, compute_loss, load_loss
from backends.torch.models.user_spec import UserModelSpec


class UserStageModule(nn.Module):
    """The layers of one stage run in order; optionally recomputing each (checkpointing).

    Args:
        layers: the stage's modules, chain order.
        first: chain index of ``layers[0]`` (names parameters globally).
        recompute: wrap each layer in ``torch.utils.checkpoint.checkpoint`` (non-reentrant),
            or only the layers at these positions (set by
            :func:`backends.torch.replay.memory.apply_policy`).
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


def random_layers(model: nn.Module) -> list[str]:
    """Modules of ``model`` whose training forward draws random numbers: dropout with ``p > 0``
    (``nn.Dropout*``, ``nn.MultiheadAttention(dropout=)``, Hugging Face ``attention_dropout``).

    Example:
        >>> random_layers(nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.1), nn.Dropout(0.0)))
        ['1']
    """
    out = []
    for name, m in model.named_modules():
        p = (
            m.p
            if isinstance(m, nn.modules.dropout._DropoutNd)
            else m.dropout
            if isinstance(m, nn.MultiheadAttention)
            else getattr(m, "attention_dropout", 0.0)
        )
        if isinstance(p, (int, float)) and p > 0:
            out.append(name)
    return out


class UserModel(ReplayModel):
    """A user's model (``kind: user``) as the replay runs it (:class:`ReplayModel`).

    The function is called once, under the spec's seed, so every rank (and the reference)
    holds the same weights; the chain is the recorded layer names (fqns). Every micro-batch is
    the sample the function returned (the data are the same, the weights change with every
    step).

    Args:
        model: the :class:`~backends.torch.models.user_spec.UserModelSpec` dict.
        microbatch_size: samples per micro-batch (passed to a function that takes it).
        dtype: parameter dtype.

    Raises:
        sim.errors.InputError: the function or the chain can no longer be built.
    """

    def __init__(self, model: dict[str, Any], microbatch_size: int, dtype: str = "fp32"):
        self.spec = UserModelSpec.from_dict(model)
        self.um = build_user_model(self.spec, microbatch_size=microbatch_size, dtype=dtype)
        self.chain = [m for _, m in chain_layers(self.um.model, self.spec.layers)]
        self.n_layers = len(self.chain)
        self.shared = shared_groups(self.chain)
        self.random_layers = random_layers(self.um.model)
        self._names = canonical_names(self.chain)
        self._loss_fn = load_loss(self.spec)
        self._shapes: dict[int, tuple[tuple[int, ...], torch.dtype]] = {}

    def layers(self, indices: Sequence[int]) -> list[nn.Module]:
        return [self.chain[i] for i in indices]

    def stage_module(self, layers: Sequence[nn.Module], first: int) -> nn.Module:
        return UserStageModule(layers, first)

    def batch(self, mb: int) -> tuple[tuple[torch.Tensor, ...], torch.Tensor | None]:
        return self.um.sample, self.um.target

    def loss(self, y: torch.Tensor, target: torch.Tensor | None) -> torch.Tensor:
        target = None if target is None else target.to(y.device)
        return compute_loss(self._loss_fn, y, target, self.spec.loss)

    def boundary(self, index: int) -> tuple[tuple[int, ...], torch.dtype]:
        if index not in self._shapes:
            y = _prefix_output(self.chain[: index + 1], self.um.sample)
            self._shapes[index] = (tuple(y.shape), y.dtype)
        return self._shapes[index]

    def names(self, module: nn.Module) -> list[str]:
        return names_of(module, self._names)

    def release(self, keep: Collection[int]) -> None:
        """Drop every layer but the chain indices ``keep`` (and the model object), so a rank
        holds only its stages' memory; shapes found so far are kept."""
        self.chain = [m if i in keep else nn.Identity() for i, m in enumerate(self.chain)]
        self.um.model = nn.Identity()
