"""Keep shared and tied parameters one parameter across pipeline ranks: :class:`Ties`.

When the layers that share a parameter (:mod:`backends.torch.models.shared_params`) sit on several
ranks, each rank holds a copy, built equal (same seed). Before every optimizer update the ranks
holding a group all-reduce (sum) its gradient, so every copy takes the same step as the one
tensor of a single-process run, whose gradient autograd sums over both uses: Megatron-LM does
this for the word embedding kept on the first and the last stage
(``megatron/core/distributed/finalize_model_grads.py``, ``_allreduce_word_embedding_grads``:
``torch.distributed.all_reduce(grad, group=parallel_state.get_embedding_group())``). The
simulator times the same all-reduce (``sim.trace.shared``).

The groups are the same on every rank (the model and the partition are), and every rank creates
every group's communicator in the same order, as ``torch.distributed.new_group`` requires.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

from backends.torch.models.shared_params import SharedGroup
from sim.trace.shared import stage_of_layers


class Ties:
    """The tied all-reduces one rank takes part in.

    Args:
        shared: the model's shared groups (chain indices).
        boundaries: start layer of each stage.
        n_layers: length of the chain.
        stage_rank: rank of each stage.
        rank: this process's rank.
        distributed: create communicators (``False``: one process alone, nothing to reduce).
    """

    def __init__(
        self,
        shared: Sequence[SharedGroup],
        boundaries: Sequence[int],
        n_layers: int,
        stage_rank: Sequence[int],
        rank: int,
        distributed: bool = True,
    ):
        stage = stage_of_layers(boundaries, n_layers)
        self.groups: list[tuple[tuple[str, ...], object]] = []
        self.ranks: list[tuple[int, ...]] = []
        for g in shared:
            ranks = tuple(sorted({stage_rank[stage[i]] for i in g.layers}))
            if len(ranks) < 2 or not distributed:
                continue
            pg = dist.new_group(list(ranks))  # every rank, same order
            if rank in ranks:
                self.groups.append((g.names, pg))
                self.ranks.append(ranks)

    @property
    def active(self) -> bool:
        """This rank holds a copy of some parameter another rank holds too."""
        return bool(self.groups)

    def reduce(self, names: Sequence[str], grads: list[torch.Tensor | None]) -> None:
        """Sum, in place, over the ranks holding them, the gradients of the tied parameters
        among ``names``.

        Args:
            names: canonical names of this rank's parameters.
            grads: their gradients, aligned with ``names``.

        Raises:
            RuntimeError: a tied parameter has no gradient here (its layer never ran a
                backward since the last step), which would leave the other ranks waiting.
        """
        where = {n: i for i, n in enumerate(names)}
        for group_names, pg in self.groups:
            for name in group_names:
                i = where.get(name)
                if i is None:
                    continue
                g = grads[i]
                if g is None:
                    raise RuntimeError(f"tied parameter {name} has no gradient on this rank")
                dist.all_reduce(g, op=dist.ReduceOp.SUM, group=pg)  # type: ignore[arg-type]
