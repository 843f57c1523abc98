"""What a replay writes for its numerics check (``ReplayJob.dump_dir``), and reading it back.

Every rank writes, at each optimizer step ``k``, the gradient it applies to each of its
parameters (after the tied all-reduce; by canonical name,
:mod:`backends.torch.models.shared_params`) to ``rank<r>-step<k>.pt``, so nothing accumulates in the
rank's memory; at the end it writes ``rank<r>.pt``: its losses as ``(micro-batch, loss)`` and its
final weights. A tied parameter held by two ranks appears in both ranks' files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch


def save_step(
    dump_dir: str | Path,
    rank: int,
    step: int,
    names: Sequence[str],
    grads: Sequence[torch.Tensor | None],
) -> None:
    """Write the gradients of step ``step`` (``names`` aligned with ``grads``)."""
    data = {n: g.detach().float().cpu() for n, g in zip(names, grads, strict=True) if g is not None}
    torch.save(data, Path(dump_dir) / f"rank{rank}-step{step}.pt")


def save_end(
    dump_dir: str | Path,
    rank: int,
    losses: Sequence[tuple[int, float]],
    names: Sequence[str],
    params: Sequence[torch.Tensor],
) -> None:
    """Write the rank's losses ``(micro-batch, loss)`` and final weights."""
    weights = {n: p.detach().float().cpu() for n, p in zip(names, params, strict=True)}
    torch.save({"losses": list(losses), "params": weights}, Path(dump_dir) / f"rank{rank}.pt")


@dataclass
class Dumps:
    """Every rank's dumps of one replay.

    Attributes:
        grads: ``step -> name -> [gradient per rank holding it]``.
        losses: ``micro-batch -> loss``.
        params: ``name -> [final weight per rank holding it]``.
    """

    grads: dict[int, dict[str, list[torch.Tensor]]] = field(default_factory=dict)
    losses: dict[int, float] = field(default_factory=dict)
    params: dict[str, list[torch.Tensor]] = field(default_factory=dict)


def load_dumps(dump_dir: str | Path) -> Dumps:
    """Read every rank's files in ``dump_dir``.

    Raises:
        FileNotFoundError: no rank wrote its end file.
    """
    root, out = Path(dump_dir), Dumps()
    ends = sorted(p for p in root.glob("rank*.pt") if "-step" not in p.stem)
    if not ends:
        raise FileNotFoundError(f"no replay dumps in {root}")
    for path in sorted(root.glob("rank*-step*.pt")):
        step = int(path.stem.rsplit("-step", 1)[1])
        for name, g in torch.load(path).items():
            out.grads.setdefault(step, {}).setdefault(name, []).append(g)
    for path in ends:
        data = torch.load(path)
        out.losses.update({int(mb): float(v) for mb, v in data["losses"]})
        for name, p in data["params"].items():
            out.params.setdefault(name, []).append(p)
    return out
