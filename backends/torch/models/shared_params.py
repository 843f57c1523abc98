"""Parameters that several layers of a chain hold: shared modules and tied weights.

A user's model may reuse one ``nn.Parameter`` in two layers of its chain: a module placed in
two blocks (``blocks[3].ffn = blocks[1].ffn``), or an output head tied to an embedding
(``head.weight = embed.weight``, Hugging Face's ``tie_word_embeddings``). In one process
autograd sums both uses' gradients into the one tensor. A pipeline that puts the two layers
on two ranks holds two copies, which must get the same (summed) gradient at every optimizer step
to stay one parameter: Megatron-LM keeps its word embedding on the first and the last stage and
all-reduces its gradient between them (``megatron/core/distributed/finalize_model_grads.py``,
``_allreduce_word_embedding_grads``); the replay does the same for every shared group
(:mod:`backends.torch.parallel.ties`) and the simulator adds that all-reduce (``sim.trace.shared``).

Here, found by identity on the built chain: every parameter is named once, by its first
occurrence in chain order (``"<layer index>.<name inside the layer>"``: its *canonical* name),
its bytes are counted in that first layer only, and the parameters held by more than one layer
are grouped by the set of layers holding them (:class:`SharedGroup`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from torch import nn

from sim.trace.schema import LayerProfile, SharedParams


@dataclass(frozen=True)
class SharedGroup:
    """Parameters held by the same several layers of a chain.

    Attributes:
        layers: chain indices of the layers holding them, ascending (at least two).
        names: their canonical names (first occurrence, ``"<layer>.<name>"``).
        param_bytes: their bytes, counted once.
    """

    layers: tuple[int, ...]
    names: tuple[str, ...]
    param_bytes: int

    def to_dict(self) -> dict[str, object]:
        """The trace sidecar's ``shared`` entry (``sim.trace.schema.SharedParams``)."""
        return {
            "layers": list(self.layers),
            "names": list(self.names),
            "param_bytes": self.param_bytes,
        }


def _nbytes(p: torch.Tensor) -> int:
    return p.numel() * p.element_size()


def canonical_names(layers: Sequence[nn.Module]) -> dict[int, str]:
    """``id(parameter) -> "<first layer index>.<name there>"`` over the chain ``layers``.

    Example:
        >>> a = nn.Linear(2, 2); b = nn.Linear(2, 2); b.weight = a.weight
        >>> sorted(canonical_names([a, b]).values())
        ['0.bias', '0.weight', '1.bias']
    """
    names: dict[int, str] = {}
    for i, layer in enumerate(layers):
        for name, p in layer.named_parameters():
            names.setdefault(id(p), f"{i}.{name}")
    return names


def holders(layers: Sequence[nn.Module]) -> dict[int, list[int]]:
    """``id(parameter) -> chain indices of the layers holding it`` (ascending)."""
    out: dict[int, list[int]] = {}
    for i, layer in enumerate(layers):
        for p in layer.parameters():
            out.setdefault(id(p), []).append(i)
    return out


def shared_groups(layers: Sequence[nn.Module]) -> list[SharedGroup]:
    """The parameters held by more than one layer, grouped by the layers holding them.

    Example (a head tied to an embedding, one chain between them):
        >>> emb, mid, head = nn.Embedding(8, 4), nn.Linear(4, 4), nn.Linear(4, 8, bias=False)
        >>> head.weight = emb.weight
        >>> shared_groups([emb, mid, head])
        [SharedGroup(layers=(0, 2), names=('0.weight',), param_bytes=128)]
    """
    names, held = canonical_names(layers), holders(layers)
    params = {id(p): p for layer in layers for p in layer.parameters()}
    groups: dict[tuple[int, ...], list[int]] = {}
    for pid, where in held.items():
        if len(where) > 1:
            groups.setdefault(tuple(where), []).append(pid)
    return [
        SharedGroup(
            layers=where,
            names=tuple(names[pid] for pid in pids),
            param_bytes=sum(_nbytes(params[pid]) for pid in pids),
        )
        for where, pids in sorted(groups.items())
    ]


def owned_parameters(layers: Sequence[nn.Module], index: int) -> list[torch.Tensor]:
    """The parameters of layer ``index`` not held by an earlier layer (counted once)."""
    seen = {id(p) for layer in layers[:index] for p in layer.parameters()}
    return [p for p in layers[index].parameters() if id(p) not in seen]


def names_of(module: nn.Module, names: dict[int, str]) -> list[str]:
    """The canonical names of ``module.parameters()``, in that order (a stage's parameters,
    each once; a deep copy of the stage, a weight version, has them in the same order)."""
    return [names[id(p)] for p in module.parameters()]


def counted_once(
    profiles: Sequence[LayerProfile], layers: Sequence[nn.Module]
) -> tuple[tuple[LayerProfile, ...], tuple[SharedParams, ...]]:
    """Per-layer profiles with every parameter's bytes in its first holder only, and the
    trace's :attr:`~sim.trace.schema.Trace.shared` groups (module docstring).

    Args:
        profiles: one profile per layer of the chain, ``param_bytes`` of all its parameters.
        layers: the chain's modules, same order.
    """
    owned = [owned_parameters(layers, i) for i in range(len(profiles))]
    out = tuple(
        replace(x, param_bytes=float(sum(_nbytes(p) for p in own)), param_tensors=float(len(own)))
        for x, own in zip(profiles, owned, strict=True)
    )
    groups = tuple(
        SharedParams(g.layers, float(g.param_bytes), g.names) for g in shared_groups(layers)
    )
    return out, groups
