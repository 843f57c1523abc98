"""Weight versions of one stage during a replay, as the schedule's class says (schedules.md §1,
§2, §6.2).

Every policy applies plain SGD, ``W <- W - lr * g``, where ``g`` is the gradient accumulated
since the previous STEP (the loss of each micro-batch is already divided by the micro-batches
per step, so ``g`` is their mean), computed as torch's SGD computes it (:func:`sgd_update`), as
do torch's runtimes and the numerics reference. They differ in which weights a micro-batch uses:

Which one a schedule runs is its class's :attr:`~sim.schedules.base.Schedule.version_rule`
(:func:`make_versions`); the backend never asks a schedule's name.

* :class:`SingleVersion` (rule ``single``: ``gpipe``, ``1f1b``, ``pipemare``, every flushed
  schedule): one copy, updated in place
  through ``.data``. With a flush (GPipe, 1F1B) no micro-batch is in flight at a STEP, so this
  is minibatch SGD. Without one (PipeMare) the backward of a micro-batch whose forward ran
  before a STEP uses the *updated* weights with the stashed activations: PipeMare's F/B weight
  discrepancy, with no stash and one version.
* :class:`Stashed` (rules ``stashed``: ``pipedream``; ``two_versions``: ``pipedream_2bw``): a
  copy of the stage per live version.
  The backward runs on the version its forward used (autograd keeps that module's weights in
  the graph), so gradients accumulate in that copy. A STEP writes ``newest - lr * g`` into a
  new version, reusing the memory of a version no longer needed.

  - PipeDream (weight stashing): forwards use the newest version; a version lives while a
    micro-batch that used it is in flight (``p - s`` versions on stage ``s``).
  - PipeDream-2BW: micro-batches of iteration ``k`` use ``W(max(k-1, 0))`` for F and B, and
    STEP ``k`` makes ``W(k+1) = W(k) - lr * grad f(W(k-1))``; the two newest versions live.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import nn

from sim.schedules.base import VERSION_RULES, Schedule


def sgd_update(weight: torch.Tensor, grad: torch.Tensor, lr: float) -> torch.Tensor:
    """``weight - lr * grad`` as ``torch.optim.SGD`` computes it, ``weight.add(grad,
    alpha=-lr)`` (``torch/optim/sgd.py``, ``_single_tensor_sgd``): one rounding per entry,
    where ``weight - lr * grad`` rounds ``lr * grad`` first and lands one unit in the last
    place away in some entries (0.06 % to 3 % in fp32 here, with the sizes of ``weight`` and
    ``lr * grad``). Every replay runtime and the numerics reference
    (:mod:`backends.torch.replay.reference`) update through this function or
    :func:`sgd_update_`, so their weights stay equal to the bit (issue 30, item 2: in a 6-layer
    encoder whose head is tied to its embedding, that unit grew to a relative gradient error of
    2.2e-4 in six steps). A new tensor.

    Example:
        >>> w, g = torch.tensor([1.0]), torch.tensor([0.1])
        >>> torch.equal(sgd_update(w, g, 1e-2), w.clone().add_(g, alpha=-1e-2))
        True
    """
    return torch.add(weight, grad, alpha=-lr)


def sgd_update_(weight: torch.Tensor, grad: torch.Tensor, lr: float) -> None:
    """:func:`sgd_update` in place (the same kernel, the same bits)."""
    weight.add_(grad, alpha=-lr)


class SingleVersion:
    """One weight copy updated in place (GPipe, 1F1B, PipeMare).

    Args:
        module: the stage.
        lr: SGD learning rate.
    """

    def __init__(self, module: nn.Module, lr: float):
        self.module = module
        self.lr = lr
        self.peak_versions = 1

    def forward_module(self, microbatch: int) -> nn.Module:
        """The module micro-batch ``microbatch``'s forward runs on."""
        return self.module

    def backward_done(self, microbatch: int) -> None:
        """Called after each backward."""

    def newest(self) -> nn.Module:
        """The latest weights."""
        return self.module

    def gradients(self) -> list[torch.Tensor | None]:
        """Accumulated gradient per parameter (``None`` where none yet)."""
        return [p.grad for p in self.module.parameters()]

    def step(self, grads: list[torch.Tensor | None] | None = None) -> None:
        """``W <- W - lr * g`` in place (:func:`sgd_update_`; ``.data``: pending graphs see the
        new values); ``g`` is ``grads`` when given (:meth:`gradients` after a tied all-reduce),
        else ``p.grad``."""
        params = list(self.module.parameters())
        for p, g in zip(params, grads or [p.grad for p in params], strict=True):
            if g is not None:
                sgd_update_(p.data, g, self.lr)
            p.grad = None


class Stashed:
    """Several weight versions (PipeDream, PipeDream-2BW); see the module docstring.

    Args:
        module: the stage, version 0.
        lr: SGD learning rate.
        microbatches: micro-batches per iteration ``m`` (2BW's version rule).
        two_versions: True for 2BW's rule, False for PipeDream's stashing.
        on_new: called with every newly allocated version (e.g. to exclude its parameters
            from saved-tensor counting).
    """

    def __init__(
        self,
        module: nn.Module,
        lr: float,
        microbatches: int,
        two_versions: bool,
        on_new: Callable[[nn.Module], None] = lambda m: None,
    ):
        self.versions: dict[int, nn.Module] = {0: module}
        self.lr = lr
        self.m = microbatches
        self.two = two_versions
        self.on_new = on_new
        self.in_flight: dict[int, int] = {}  # micro-batch -> version id
        self.holders: set[int] = set()  # versions holding gradients since the last STEP
        self.peak_versions = 1

    @property
    def newest_id(self) -> int:
        return max(self.versions)

    def newest(self) -> nn.Module:
        """The latest weights."""
        return self.versions[self.newest_id]

    def forward_module(self, microbatch: int) -> nn.Module:
        """The version micro-batch ``microbatch`` uses (recorded for its backward).

        Raises:
            RuntimeError: 2BW needs a version already dropped (the program has ``m < p``).
        """
        vid = max(microbatch // self.m - 1, 0) if self.two else self.newest_id
        if vid not in self.versions:
            raise RuntimeError(
                f"micro-batch {microbatch} needs weight version {vid}, which is not live "
                f"(live: {sorted(self.versions)}); PipeDream-2BW needs microbatches >= stages"
            )
        self.in_flight[microbatch] = vid
        return self.versions[vid]

    def backward_done(self, microbatch: int) -> None:
        """Called after the backward of ``microbatch``: its version now holds gradients."""
        self.holders.add(self.in_flight.pop(microbatch))

    def gradients(self) -> list[torch.Tensor | None]:
        """Gradient per parameter summed over the versions that ran backwards since the last STEP."""
        total: list[torch.Tensor | None] = [None] * len(list(self.newest().parameters()))
        for vid in sorted(self.holders):
            for i, p in enumerate(self.versions[vid].parameters()):
                if p.grad is not None:
                    acc = total[i]
                    total[i] = p.grad.clone() if acc is None else acc + p.grad
        return total

    def _keep(self, vid: int, new_id: int) -> bool:
        if self.two:
            return vid >= new_id - 1
        return vid in self.in_flight.values()

    def step(self, grads: list[torch.Tensor | None] | None = None) -> None:
        """Create version ``newest + 1 = newest - lr * g`` (:func:`sgd_update`); drop versions
        no longer needed (``g``: ``grads`` when given, else :meth:`gradients`)."""
        grads = self.gradients() if grads is None else grads
        new_id = self.newest_id + 1
        newest = self.newest()
        with torch.no_grad():
            update = [
                p.detach().clone() if g is None else sgd_update(p.detach(), g, self.lr)
                for p, g in zip(newest.parameters(), grads, strict=True)
            ]
        for vid in self.holders:
            for p in self.versions[vid].parameters():
                p.grad = None
        self.holders.clear()
        dropped = [vid for vid in self.versions if not self._keep(vid, new_id)]
        if dropped:
            target = self.versions.pop(dropped[0])
            for vid in dropped[1:]:
                del self.versions[vid]
        else:
            target = copy.deepcopy(newest)
            self.on_new(target)
        with torch.no_grad():
            for p, value in zip(target.parameters(), update, strict=True):
                p.copy_(value)
        self.versions[new_id] = target
        self.peak_versions = max(self.peak_versions, len(self.versions))


def make_versions(
    schedule: type[Schedule] | Schedule,
    module: nn.Module,
    lr: float,
    microbatches: int,
    on_new: Callable[[nn.Module], None] = lambda m: None,
) -> SingleVersion | Stashed:
    """The version policy ``schedule``'s class declares (its ``version_rule``, module docstring).

    Args:
        schedule: the schedule (class or instance).
        module: the stage, version 0.
        lr: SGD learning rate.
        microbatches: micro-batches per iteration ``m``.
        on_new: called with every newly allocated version (:class:`Stashed`).

    Raises:
        ValueError: a ``version_rule`` outside :data:`sim.schedules.base.VERSION_RULES`.
    """
    rule = schedule.version_rule
    if rule == "single":
        return SingleVersion(module, lr)
    if rule in ("stashed", "two_versions"):
        two = rule == "two_versions"
        return Stashed(module, lr, microbatches, two_versions=two, on_new=on_new)
    raise ValueError(
        f"schedule {schedule.name!r} declares version_rule {rule!r}; the replay keeps weights "
        f"by {', '.join(VERSION_RULES)}"
    )
