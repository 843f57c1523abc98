"""What every replay runtime, and the one-process reference, asks of the model: one interface.

:class:`ReplayModel` is the model a replay job names (``ReplayJob.model``), built the same way
on every rank and in the reference process: its stages (the layers between two boundaries, as
one module; several stage chunks of one rank share the parameters the model shares), the input
and target of each micro-batch, the loss, the shapes that cross each boundary, each parameter's
canonical name (its first layer in chain order, :mod:`backends.torch.models.shared_params`) and the
groups of parameters several layers share. Two implementations:

* :class:`TransformerModel`: the GPT/BERT models of :mod:`backends.torch.models.transformer` (built
  layer by layer, so a rank builds only its layers; nothing shared; micro-batch ``i`` has its own
  seeded tokens);
* :class:`backends.torch.models.user_stage.UserModel`: a user's model (``kind: user``: a function or
  a Hugging Face config), built whole from its function under its seed; every micro-batch is
  the sample the function returned.

:func:`backends.torch.models.load.load_model` picks one from a job's model dict.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Sequence
from typing import Any

import torch
from torch import nn

from backends.torch.models.shared_params import SharedGroup
from backends.torch.models.transformer import (
    DTYPES,
    StageModule,
    as_spec,
    build_layers,
    lm_loss,
    microbatch,
    stage_ranges,
)


class ReplayModel(ABC):
    """A model as the replay runs it (module docstring).

    Attributes:
        n_layers: length of the layer chain.
        shared: parameter groups several layers hold (empty for GPT/BERT).
        random_layers: modules whose forward draws random numbers (dropout with ``p > 0``):
            a replay and its reference cannot draw the same numbers.
    """

    n_layers: int
    shared: list[SharedGroup]
    random_layers: list[str]

    @abstractmethod
    def layers(self, indices: Sequence[int]) -> list[nn.Module]:
        """The chain's modules at ``indices`` (the same objects on every call, so shared
        parameters stay one tensor in this process)."""

    @abstractmethod
    def stage_module(self, layers: Sequence[nn.Module], first: int) -> nn.Module:
        """The module running ``layers`` (chain indices from ``first``) in order."""

    @abstractmethod
    def batch(self, mb: int) -> tuple[tuple[torch.Tensor, ...], torch.Tensor | None]:
        """``(inputs of the first layer, loss target)`` of global micro-batch ``mb`` (CPU)."""

    @abstractmethod
    def loss(self, y: torch.Tensor, target: torch.Tensor | None) -> torch.Tensor:
        """The loss of the last layer's output ``y`` (a scalar)."""

    @abstractmethod
    def boundary(self, index: int) -> tuple[tuple[int, ...], torch.dtype]:
        """Shape and dtype of the output of chain layer ``index`` (what crosses a boundary
        after it, and the gradient coming back)."""

    @abstractmethod
    def names(self, module: nn.Module) -> list[str]:
        """Canonical names of ``module.parameters()`` in that order (a stage, or a chain
        layer)."""

    def release(self, keep: Collection[int]) -> None:  # noqa: B027 - optional hook
        """Drop the layers outside chain indices ``keep`` (a rank keeps only its own);
        nothing to drop where only those were built."""

    def stage(self, boundaries: Sequence[int], stage: int) -> nn.Module:
        """Stage ``stage`` of the partition ``boundaries`` (start layer of each stage)."""
        rng = stage_ranges(boundaries, self.n_layers)[stage]
        return self.stage_module(self.layers(rng), rng.start)

    def recv(self, boundaries: Sequence[int], stage: int) -> tuple[tuple[int, ...], torch.dtype]:
        """Shape and dtype of what stage ``stage > 0`` receives in a forward."""
        return self.boundary(stage_ranges(boundaries, self.n_layers)[stage].start - 1)

    def send(self, boundaries: Sequence[int], stage: int) -> tuple[tuple[int, ...], torch.dtype]:
        """Shape and dtype of what stage ``stage`` (not the last) sends, and of the gradient
        it receives back."""
        return self.boundary(stage_ranges(boundaries, self.n_layers)[stage].stop - 1)


class TransformerModel(ReplayModel):
    """The GPT/BERT chain of :mod:`backends.torch.models.transformer`.

    Args:
        spec: the model's size (a ``ModelSpec`` dict).
        microbatch_size: samples per micro-batch.
        seed: weights and data seed.
        dtype: ``fp32``, ``fp16`` or ``bf16``.
    """

    def __init__(self, spec: Any, microbatch_size: int, seed: int = 0, dtype: str = "fp32"):
        self.spec = as_spec(spec)
        self.b, self.seed, self.dtype = microbatch_size, seed, dtype
        self.n_layers = self.spec.n_layers
        self.shared, self.random_layers = [], []
        self._built: dict[int, nn.Module] = {}

    def layers(self, indices: Sequence[int]) -> list[nn.Module]:
        missing = [i for i in indices if i not in self._built]
        for i, layer in zip(
            missing, build_layers(self.spec, self.seed, missing, self.dtype), strict=True
        ):
            self._built[i] = layer
        return [self._built[i] for i in indices]

    def stage_module(self, layers: Sequence[nn.Module], first: int) -> nn.Module:
        return StageModule(layers, first)

    def batch(self, mb: int) -> tuple[tuple[torch.Tensor, ...], torch.Tensor | None]:
        ids, targets = microbatch(self.spec, self.b, self.seed, mb)
        return (ids,), targets

    def loss(self, y: torch.Tensor, target: torch.Tensor | None) -> torch.Tensor:
        assert target is not None, "the LM loss needs its targets"
        return lm_loss(y, target.to(y.device))

    def boundary(self, index: int) -> tuple[tuple[int, ...], torch.dtype]:
        return (self.b, self.spec.seq_len, self.spec.hidden), DTYPES[self.dtype]

    def names(self, module: nn.Module) -> list[str]:
        if isinstance(module, StageModule):
            by_id = {id(p): n for n, p in module.global_named_parameters().items()}
            return [by_id[id(p)] for p in module.parameters()]
        index = next(i for i, layer in self._built.items() if layer is module)
        return [f"{index}.{n}" for n, _ in module.named_parameters()]
