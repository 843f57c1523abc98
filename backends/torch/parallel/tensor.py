"""Megatron tensor parallelism of the GPT chain with torch's own API (``parallelize_module``).

:func:`tp_chain` builds the whole chain ``[embedding, block_0 .., block_{L-1}, head]`` of
:mod:`backends.torch.models.transformer` (same seed, same weights) and splits it over a 1-D
``DeviceMesh`` of ``t`` ranks with ``torch.distributed.tensor.parallel``:

* **block** (:class:`TPBlock`, the weights of a :class:`~backends.torch.models.transformer.Block`):
  ``nn.TransformerEncoderLayer`` packs q, k and v as ``in_proj_weight [3h, h] = [q; k; v]``,
  which ``ColwiseParallel``'s contiguous split would cut across q and k, so the block is rebuilt
  with the rows grouped by rank (``qkv``, ``ColwiseParallel``: each rank holds ``a/t`` heads of
  q, k and v), ``out`` (``RowwiseParallel``, all-reduce), ``fc1`` (``ColwiseParallel``) and
  ``fc2`` (``RowwiseParallel``, all-reduce): 2 all-reduces forward and 2 backward (Shoeybi et
  al., arXiv:1909.08053, §3). The attention reshapes its local ``[b, s, 3h/t]`` projection into
  ``h/t / head_dim`` local heads (the heads follow from the local width, as in torch's TP
  tutorial), then ``F.scaled_dot_product_attention(is_causal=True)``.
* **embedding**: the token table split by vocabulary rows (``RowwiseParallel`` on
  ``nn.Embedding``: each rank looks up its rows, the output is all-reduced); the position table
  is replicated.
* **head**: the LM head split by vocabulary columns (``ColwiseParallel``, output
  ``Shard(-1)`` kept as a DTensor) and the cross-entropy computed on the sharded logits under
  ``torch.distributed.tensor.parallel.loss_parallel`` (the vocabulary-parallel loss).
* **sequence parallelism** (Korthikanti et al., arXiv:2205.05198): the LayerNorms run on
  ``s/t`` tokens (``SequenceParallel``), the column-parallel inputs are all-gathered and the
  row-parallel outputs reduce-scattered (``input_layouts=Shard(1)`` /
  ``output_layouts=Shard(1)``); the embedding's output is all-reduced, then each rank keeps its
  ``s/t`` tokens (Megatron reduce-scatters it: same result, one collective larger).

Replicated parameters (LayerNorms, row-parallel biases, the position table) stay whole on every
rank: :func:`tp_param_count` gives the closed form of a rank's parameters.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

from backends.torch.models.transformer import (
    Block,
    Embedding,
    Head,
    ModelSpec,
    as_spec,
    build_layers,
)
from backends.torch.parallel.tensor_split import tp_problem


def linear_from(weight: torch.Tensor, bias: torch.Tensor | None) -> nn.Linear:
    """A new ``nn.Linear`` holding copies of ``weight`` (``[out, in]``) and ``bias``
    (``[out]``, or None for none)."""
    out = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
    with torch.no_grad():
        out.weight.copy_(weight)
        if bias is not None:
            out.bias.copy_(bias)
    return out


class TPBlock(nn.Module):
    """A pre-norm GPT block with a rank-grouped q/k/v projection, from a :class:`Block`'s weights.

    Computes what ``nn.TransformerEncoderLayer(norm_first=True)`` with a causal mask computes:
    ``x + out(attn(norm1(x)))``, then ``x + fc2(gelu(fc1(norm2(x))))``. Input and output
    ``[b, s, h]`` (``[b, s/t, h]`` local with sequence parallelism).

    ``qkv`` is one ``[3h, h]`` linear whose rows are grouped by tensor rank (rank ``r``'s
    ``q, k, v`` heads ``r*a/t .. (r+1)*a/t - 1``, then rank ``r+1``'s), so that
    ``ColwiseParallel``'s contiguous row split gives each rank whole heads of all three and one
    input (all-gathered once with sequence parallelism), as Megatron's fused QKV does.

    Args:
        block: a GPT block (``spec.kind == "gpt"``).
        head_dim: ``h / a``.
        t: tensor-parallel size the rows are grouped for (1: plain ``[q; k; v]``).
    """

    def __init__(self, block: Block, head_dim: int, t: int = 1):
        super().__init__()
        layer: Any = block.layer
        attn = layer.self_attn
        h = attn.embed_dim
        w, b = attn.in_proj_weight.detach(), attn.in_proj_bias.detach()
        order = torch.arange(3 * h).view(3, t, h // t).transpose(0, 1).reshape(-1)
        self.head_dim = head_dim
        self.norm1, self.norm2 = layer.norm1, layer.norm2
        self.qkv = linear_from(w[order], b[order])
        self.out = linear_from(attn.out_proj.weight.detach(), attn.out_proj.bias.detach())
        self.fc1, self.fc2 = layer.linear1, layer.linear2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        qkv = self.qkv(self.norm1(x))  # [b, s, 3h/t]: this rank's q, k, v
        b, s, _ = qkv.shape  # the local heads follow from the local width
        q, k, v = qkv.view(b, s, 3, -1, self.head_dim).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(o.transpose(1, 2).reshape(b, s, -1))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class TPEmbedding(nn.Module):
    """Token + position embedding; with sequence parallelism each rank keeps its ``s/t`` tokens.

    ``[b, s]`` ids -> ``[b, s, h]`` (``[b, s/t, h]`` local with sequence parallelism).
    """

    def __init__(self, emb: Embedding, mesh: DeviceMesh | None, sequence_parallel: bool):
        super().__init__()
        self.tok, self.pos = emb.tok, emb.pos
        self.mesh, self.sequence_parallel = mesh, sequence_parallel

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        if not self.sequence_parallel or self.mesh is None:
            return x
        whole = DTensor.from_local(x, self.mesh, [Replicate()], run_check=False)
        return whole.redistribute(self.mesh, [Shard(1)]).to_local()  # backward: all-gather


def _block_plan(sp: bool) -> dict[str, Any]:
    seq = Shard(1) if sp else Replicate()
    plan: dict[str, Any] = {name: ColwiseParallel(input_layouts=seq) for name in ("qkv", "fc1")}
    plan.update(out=RowwiseParallel(output_layouts=seq), fc2=RowwiseParallel(output_layouts=seq))
    if sp:
        plan.update(norm1=SequenceParallel(), norm2=SequenceParallel())
    return plan


def tp_chain(
    spec: ModelSpec | Mapping[str, Any],
    mesh: DeviceMesh | None,
    *,
    sequence_parallel: bool = False,
    seed: int = 0,
    dtype: str = "fp32",
    device: torch.device | str = "cpu",
) -> nn.Sequential:
    """The model's chain with separate q/k/v, split over ``mesh`` (``None``: unsplit, t = 1).

    Args:
        spec: a GPT model.
        mesh: a 1-D mesh of the ``t`` tensor-parallel ranks, or None for the unsplit chain
            (same module structure: the single-process reference of the tests).
        sequence_parallel: LayerNorms and residuals on ``s/t`` tokens.
        seed: the model seed (weights equal
            :func:`backends.torch.models.transformer.build_layers`'s).
        dtype: parameter dtype.
        device: where the parameters live (moved there before they are sharded).

    Returns:
        ``nn.Sequential(embedding, blocks.., head)``, in training mode.

    Raises:
        ValueError: :func:`backends.torch.parallel.tensor_split.tp_problem`.
    """
    spec = as_spec(spec)
    t = 1 if mesh is None else mesh.size()
    problem = tp_problem(spec, t, sequence_parallel)
    if problem:
        raise ValueError(problem)
    layers = build_layers(spec, seed, dtype=dtype)
    emb, head = layers[0], layers[-1]
    assert isinstance(emb, Embedding) and isinstance(head, Head)
    sp = sequence_parallel and mesh is not None
    blocks = [TPBlock(b, spec.hidden // spec.heads, t) for b in layers[1:-1]]  # type: ignore[arg-type]
    chain = nn.Sequential(TPEmbedding(emb, mesh, sp), *blocks, head).to(device)
    if mesh is None:
        return chain
    seq = Shard(1) if sp else Replicate()
    parallelize_module(chain[0], mesh, {"tok": RowwiseParallel(input_layouts=Replicate())})
    for block in blocks:
        parallelize_module(block, mesh, _block_plan(sp))
    head_plan: dict[str, Any] = {
        "out": ColwiseParallel(input_layouts=seq, output_layouts=Shard(-1), use_local_output=False)
    }
    if sp:
        head_plan["transform"] = SequenceParallel()
    parallelize_module(head, mesh, head_plan)
    return chain


def tp_param_count(spec: ModelSpec | Mapping[str, Any], t: int) -> int:
    """Closed form of one rank's parameters in :func:`tp_chain` split ``t`` ways.

    Split by ``t``: qkv, fc1 (weights and biases), out and fc2 weights, the token table
    and the LM head (``4h^2 + 2fh + 3h + f`` per block, ``2Vh`` in all). Whole on every rank:
    out and fc2 biases, two LayerNorms per block (``6h``), the position table ``sh`` and the
    final LayerNorm ``2h``. With ``t = 1`` this is :mod:`backends.torch.models.transformer`' count.
    """
    s = as_spec(spec)
    h, f, v = s.hidden, s.ffn_mult * s.hidden, s.vocab
    split = s.layers * (4 * h * h + 2 * f * h + 3 * h + f) + 2 * v * h
    whole = s.layers * 6 * h + s.seq_len * h + 2 * h
    return split // t + whole
