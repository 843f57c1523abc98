"""Expert parallelism for Hugging Face Mixtral-style experts: all-to-all dispatch and combine.

:class:`EPExperts` replaces a ``MixtralExperts`` module (``transformers``' fused experts:
``gate_up_proj [E, 2f, h]``, ``down_proj [E, h, f]``) on one of ``ep`` ranks. It keeps the
rank's ``E/ep`` contiguous experts (Megatron-LM's ``local_expert_indices``) and runs the
``alltoall`` token dispatcher's steps (``megatron/core/transformer/moe/token_dispatcher.py``):
permute the ``T*k`` assignments by expert, exchange the counts, **dispatch** the rows with
``all_to_all_single`` to the owners of their experts, compute each local expert on its rows,
**combine** them back with the transposed ``all_to_all_single``, weight each copy by its routing
probability and sum the ``k`` copies per token. The row exchanges are
``torch.distributed.nn.functional.all_to_all_single`` (autograd: the backward runs the
transposed exchange), on gloo (CPU) or NCCL.

The router stays whole on every rank (its weights replicated); the tokens of each rank are its
own data-parallel micro-batch. Gradients: dense weights are averaged over the ``world`` ranks,
expert weights divided by it (the experts of one rank collect the gradient of every rank's loss
through the combine's backward; Megatron-LM scales them the same, by ``1/dp*cp``, in
``megatron/core/distributed``), so an EP run's update equals a single process's on the
concatenated batch (:func:`reduce_gradients`).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_nn
from torch import nn


class EPExperts(nn.Module):
    """The local experts of one EP rank (module doc).

    Args:
        experts: the whole ``MixtralExperts`` (read for its weights and activation).
        rank: this rank's index in the EP group.
        ep: EP group size (divides the experts).
        group: the process group (None: the default one).

    Raises:
        ValueError: ``ep`` does not divide the experts.
    """

    def __init__(self, experts: nn.Module, rank: int, ep: int, group=None):
        super().__init__()
        gate_up: torch.Tensor = getattr(experts, "gate_up_proj")  # noqa: B009 (typed access)
        down: torch.Tensor = getattr(experts, "down_proj")  # noqa: B009
        n = int(gate_up.shape[0])
        if n % ep:
            raise ValueError(f"expert parallel size {ep} must divide the {n} experts")
        self.n_local, self.rank, self.ep, self.group = n // ep, rank, ep, group
        lo, hi = rank * self.n_local, (rank + 1) * self.n_local
        self.gate_up_proj = nn.Parameter(gate_up.detach()[lo:hi].clone())
        self.down_proj = nn.Parameter(down.detach()[lo:hi].clone())
        self.act_fn: nn.Module = getattr(experts, "act_fn")  # noqa: B009

    def _exchange_counts(self, send: torch.Tensor) -> torch.Tensor:
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send, group=self.group)
        return recv

    def _local(self, rows: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
        """Each received row through its local expert, in the received order."""
        out = rows.new_zeros(rows.shape)
        for j in range(self.n_local):
            idx = torch.nonzero(experts == j).squeeze(1)
            if idx.numel() == 0:
                continue
            gate, up = nn.functional.linear(rows[idx], self.gate_up_proj[j]).chunk(2, dim=-1)
            y = nn.functional.linear(self.act_fn(gate) * up, self.down_proj[j])
            out = out.index_copy(0, idx, y)
        return out

    def forward(
        self, hidden: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
    ) -> torch.Tensor:
        """``hidden [T, h]`` with routing ``top_k_index, top_k_weights [T, k]`` -> ``[T, h]``."""
        t, k = top_k_index.shape
        flat = top_k_index.reshape(-1)
        order = torch.argsort(flat, stable=True)
        token = torch.arange(t, device=hidden.device).repeat_interleave(k)[order]
        expert = flat[order]
        send = torch.bincount(expert // self.n_local, minlength=self.ep)
        recv = self._exchange_counts(send)
        sends, recvs = send.tolist(), recv.tolist()
        rows = hidden.new_empty((sum(recvs), hidden.shape[1]))
        rows = dist_nn.all_to_all_single(rows, hidden[token], recvs, sends, group=self.group)
        ids = expert.new_empty(sum(recvs))
        dist.all_to_all_single(ids, expert.contiguous(), recvs, sends, group=self.group)
        done = self._local(rows, ids - self.rank * self.n_local)
        back = hidden.new_empty((len(token), hidden.shape[1]))
        back = dist_nn.all_to_all_single(back, done, sends, recvs, group=self.group)
        weights = top_k_weights.reshape(-1)[order].to(back.dtype)
        return hidden.new_zeros(hidden.shape).index_add(0, token, back * weights[:, None])


def expert_parallel(chain: nn.Module, rank: int, ep: int, group=None) -> list[nn.Parameter]:
    """Replace every ``mlp.experts`` of ``chain``'s decoder layers by an :class:`EPExperts`;
    returns the expert parameters (their gradients are reduced differently)."""
    out: list[nn.Parameter] = []
    for module in list(chain.modules()):
        mlp = getattr(module, "mlp", None)
        if mlp is not None and hasattr(mlp, "experts") and hasattr(mlp.experts, "gate_up_proj"):
            mlp.experts = EPExperts(mlp.experts, rank, ep, group)
            out += [mlp.experts.gate_up_proj, mlp.experts.down_proj]
    return out


def reduce_gradients(params: list[nn.Parameter], expert: list[nn.Parameter], world: int) -> None:
    """Average the dense gradients over the ``world`` ranks and divide the experts' by it
    (module doc; every expert lives on one rank here: expert-data-parallel width 1)."""
    ids = {id(p) for p in expert}
    for p in params:
        if p.grad is None:
            continue
        if id(p) in ids:
            p.grad /= world
        else:
            dist.all_reduce(p.grad)
            p.grad /= world
