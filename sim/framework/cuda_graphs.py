"""CUDA graphs as Megatron-LM captures them: the host work of the captured layers goes.

A captured region is replayed by one ``cudaGraphLaunch``, which "skips all layers of argument
setup and kernel dispatch, including Python, C++, and CUDA driver overheads" (PyTorch CUDA
graphs blog, 2021; the host model's ``cuda_graphs`` mode, :mod:`sim.hardware.host_ops`). Megatron-LM
(``transformer_config.py`` ``cuda_graph_impl``, ``docs/user-guide/features/cuda_graph.md``):

* ``full_iteration`` captures the whole forward and backward of an iteration (not the
  optimizer): every layer's host ops and Python calls go;
* ``local`` (Megatron-Core's ``CudaGraphManager``) and ``transformer_engine``
  (``make_graphed_callables``) capture each transformer layer's forward and backward, the
  modules of ``cuda_graph_scope`` (``attn``, ``mlp``, ``moe``, ``moe_router``,
  ``moe_preprocess``, ``mamba``; empty: the whole layer). The embedding, the output layer and
  the loss stay eager.

A layer's captured share of its ops is, by assumption (a trace records a layer's ops, not each
module's): 1 for a dense block, an MLP or a Mamba layer in scope (empty scope, or ``attn`` and
``mlp`` for a block); 1/2 for a block whose scope holds one of its two halves; a MoE block's
attention half (1/2) when ``attn`` is in scope or the scope is empty, its expert half only with
``moe`` (the dispatch has data-dependent shapes and stays eager otherwise, cuda_graph.md).

**The router region** (``moe_router``, with or without ``moe_preprocess``, and not ``moe``):
the per-layer graph runs the MoE layer's ``_forward_mlp`` up to the end of the router and the
dispatcher's preprocess and returns there (NVIDIA/Megatron-LM@2edffadb, the Megatron-LM of
Megatron-Bridge v0.4.2 / 26.04.01, ``megatron/core/transformer/transformer_layer.py``
1034-1069 ``_te_cuda_graph_capture``, 821-833 the early return; ``_get_submodules_under_cudagraphs``
1025-1026: ``pre_mlp_layernorm`` and ``mlp.router``; ``moe/moe_layer.py`` 401-429 ``route``
and ``preprocess``, 556-573; the ``local`` implementation's partial graph likewise, 1366-1385),
forward and backward; the replay resumes the MoE layer eagerly after it (1109-1171). That
region's host work, :data:`ROUTER_REGION`, leaves the layer's other ops before the attention
share is taken (:func:`router_captured`). Counted by ``scripts/count_moe_router_region.py``
in the configuration the MoE block's op counts were taken in (:mod:`sim.compute.mcore_ops`:
megatron-core 0.15.0, unfused top-2 router with the auxiliary loss, the ``allgather``
dispatcher, whose ``dispatch_preprocess`` is one ``view``); timed on the same CPU the region
runs no Python beyond its counted work (``measurements/host/mcore_moe_router_region.md``), so
none of the MoE block's measured Python (:mod:`sim.framework.mcore_python`) leaves with it.
Assumptions: the flex dispatcher's preprocess (``_initialize_metadata`` and HybridEP's
``setup_metadata``: reshapes, token_dispatcher.py 1007-1026, 1422-1446 at 2edffadb) and the
fused router issue as many host ops as the counted path (pipesim's MoE block counts do not
change with router fusion either).

A MoE layer's grouped experts' per-expert host work (Transformer Engine ``GroupedLinear``,
:attr:`~sim.engine.stage_cost.StageCost.grouped_ops`) is not split so: it runs in the experts,
which a per-layer graph captures only with ``moe`` in scope (NVIDIA/Megatron-LM@d98e8a64
``megatron/core/transformer/transformer_layer.py`` 1235-1261
``_get_submodules_under_cudagraphs``: ``attn`` adds the norm and attention modules,
``moe`` the pre-MLP norm and the whole ``self.mlp``, ``moe_router`` (and with it
``moe_preprocess``) only ``self.mlp.router`` and the shared experts; 1366-1376: with
``moe_router`` the rest of the MoE layer "should go to the normal pass"), an empty scope
(it "captures the whole layer", ``transformer_config.py`` 2872-2874, and with it the MoE part,
``transformer_layer.py`` 1366-1369; ``docs/user-guide/features/cuda_graph.md`` 77: "not
working for MoE dynamic shapes", so a run with it pads its experts to capacity), or
``full_iteration`` (:func:`module_captured`). With ``attn`` alone the layer's other ops lose
their attention half and this work none of itself. (An empty scope's expert half of the
other ops stays eager in :func:`captured_share`, the assumption above.)

The host work inside the attention module that the generic counts lack (GPT-OSS's unfused
rotary embedding and projection bias, :attr:`~sim.engine.stage_cost.StageCost.attn_ops`) goes
whole where the attention is captured (:func:`module_captured`): with ``attn`` (or an empty
scope) the per-layer graph's callable runs ``_forward_attention`` (``transformer_layer.py``
1284-1288, ``_te_cuda_graph_capture``), which applies the rotary embedding inside
``self.self_attention`` (line 673, ``rotary_pos_emb``) and the bias in
``_apply_self_attn_bda_step`` (line 690).
"""

from __future__ import annotations

from dataclasses import replace

from sim.compute.decoder import ATTN
from sim.compute.decoder_shape import base_kind
from sim.engine.stage_cost import StageCost

DENSE = ("block", "attention", "mlp", "mamba", "mtp")
_Slot = tuple[float, float]
"""A layer's own slot of host work: ``(eager share, ops)``."""


def captured_share(kind: str, impl: str, scope: tuple[str, ...]) -> float:
    """Share of a layer's host ops a CUDA graph ``impl`` with ``scope`` captures (module doc).

    Example:
        >>> captured_share("block", "local", ()), captured_share("moe_block", "local", ())
        (1.0, 0.5)
        >>> captured_share("head", "full_iteration", ()), captured_share("head", "local", ())
        (1.0, 0.0)
    """
    if impl == "none":
        return 0.0
    if impl == "full_iteration":
        return 1.0
    base = base_kind(kind)
    whole = not scope
    if base in ("block", "mtp"):
        return 0.5 * (whole or "attn" in scope) + 0.5 * (whole or "mlp" in scope)
    if base == "attention":
        return float(whole or "attn" in scope)
    if base == "mlp":
        return float(whole or "mlp" in scope)
    if base == "mamba":
        return float(whole or "mamba" in scope)
    if base == "moe_block":
        return 0.5 * (whole or "attn" in scope) + 0.5 * ("moe" in scope)
    if base == "moe":
        return float("moe" in scope)
    return 0.0


MODULE_KINDS = {"moe": ("moe_block", "moe"), "attn": ATTN}
"""The layer kinds that hold each module a per-layer graph captures by its scope key: the
routed experts (``moe``), the attention (``attn``)."""


ROUTER_REGION = (38.0, 29.5, 2.0, 2.0)
"""``(forward ops, backward ops, module calls, Function nodes)`` a ``moe_router`` graph
captures in a MoE layer: the pre-MLP norm, the router and the dispatcher's preprocess
(module doc; ``scripts/count_moe_router_region.py``: 38 forward ops with 2 and with 8 experts,
30 and 29 backward ops, one following the random routing; the norm and the router modules; the
auxiliary loss's two ``autograd.Function`` applies, each a Python node of the backward)."""


def router_captured(kind: str, impl: str, scope: tuple[str, ...]) -> bool:
    """Whether a per-layer CUDA graph ``impl`` with ``scope`` captures the router region of a
    layer of ``kind`` (:data:`ROUTER_REGION`, module doc): a MoE layer, ``moe_router`` in a
    scope without ``moe`` (which captures the whole MoE half). ``full_iteration`` and an
    empty scope capture the whole layer anyway (:func:`captured_share`).

    Example:
        >>> [router_captured("moe_block", "transformer_engine", s)
        ...  for s in (("moe_router", "moe_preprocess"), ("attn",), ("moe_router", "moe"))]
        [True, False, False]
        >>> router_captured("block", "local", ("moe_router",))
        False
    """
    return (
        impl in ("local", "transformer_engine")
        and "moe_router" in scope
        and "moe" not in scope
        and base_kind(kind) in MODULE_KINDS["moe"]
    )


def module_captured(kind: str, impl: str, scope: tuple[str, ...], module: str) -> float:
    """Whether (1.0) or not (0.0) a CUDA graph ``impl`` with ``scope`` captures ``module``
    (a key of :data:`MODULE_KINDS`: ``"moe"`` the routed experts, ``"attn"`` the attention) of
    a layer of ``kind`` (module doc): ``full_iteration``; a per-layer graph with ``module`` in
    scope or an empty scope (the whole layer), for a layer that has the module (so not the
    experts under ``attn``, ``moe_router`` or ``moe_preprocess``).

    Example:
        >>> [module_captured("moe_block", "local", s, "moe") for s in (("attn",), ("moe",), ())]
        [0.0, 1.0, 1.0]
        >>> [module_captured("moe_block", "transformer_engine", s, "attn")
        ...  for s in (("attn",), ("moe",), ())]
        [1.0, 0.0, 1.0]
    """
    if impl == "full_iteration":
        return 1.0
    if impl == "none" or base_kind(kind) not in MODULE_KINDS[module]:
        return 0.0
    return float(not scope or module in scope)


def captured(cost: StageCost, kinds: list[str], impl: str, scope: tuple[str, ...]) -> StageCost:
    """``cost`` with the captured share (:func:`captured_share`) of each layer's host ops and
    Python calls removed, its grouped experts' host work (:attr:`StageCost.grouped_ops`) only
    where the experts are not captured, its attention's own host work (:attr:`StageCost.attn_ops`)
    only where the attention is not (:func:`module_captured`);
    ``kinds``: the stage's layer kinds in order.

    Example: a MoE block of 100 forward ops, 20 of them its grouped experts', under ``attn``
    keeps half of the other 80 and all 20 (60); under ``attn`` and ``moe`` none. With 30 of
    the 100 its attention's own, ``attn`` keeps half of the other 50 and the 20 (45).

    >>> c = StageCost(1.0, 2.0, 0.0, 0.0, fwd_layers=((1.0, 100.0, 0.0, 0.0, 0.0),),
    ...               bwd_layers=((2.0, 50.0, 0.0),), grouped_ops=((20.0, 10.0),))
    >>> a = captured(c, ["moe_block"], "local", ("attn",))
    >>> a.fwd_ops, a.bwd_ops
    (60.0, 30.0)
    >>> captured(c, ["moe_block"], "local", ("attn", "moe")).fwd_ops
    0.0
    >>> captured(replace(c, attn_ops=((30.0, 0.0),)), ["moe_block"], "local", ("attn",)).fwd_ops
    45.0
    """
    if impl == "none":
        return cost
    shares = [1.0 - captured_share(k, impl, scope) for k in kinds]
    eager = [1.0 - module_captured(k, impl, scope, "moe") for k in kinds]
    attn_eager = [1.0 - module_captured(k, impl, scope, "attn") for k in kinds]
    router = [ROUTER_REGION if router_captured(k, impl, scope) else (0.0,) * 4 for k in kinds]
    pad = [(0.0, 0.0)] * len(kinds)
    rows = list(zip(shares, eager, [*cost.grouped_ops, *pad], attn_eager, [*cost.attn_ops, *pad],
                    router, strict=False))  # fmt: skip

    def side(j: int) -> list[tuple[float, _Slot, _Slot, _Slot]]:
        """Per layer: its other ops' eager share and its own slots' ``(eager share, ops)`` of
        side ``j`` (0 the forward, 1 the backward): the grouped experts', the attention's, the
        captured router region's (none eager)."""
        return [(k, (e, g[j]), (a, x[j]), (0.0, r[j])) for k, e, g, a, x, r in rows]

    kf, kb = side(0), side(1)

    def kept(ops: float, k: float, *own: tuple[float, float]) -> float:
        """The layer's other ops at share ``k``, each own slot ``(eager share, ops)`` at its."""
        return max(0.0, ops - sum(n for _, n in own)) * k + sum(e * n for e, n in own)

    def calls(n: float, k: float, region: float) -> float:
        """Module calls, Function applies or Python nodes less the router region's, at ``k``."""
        return max(0.0, n - region) * k

    fwd_layers = tuple(
        (sec, kept(ops, k, *slots), calls(mods, k, r[2]), calls(fns, k, r[3]), te * k)
        for (sec, ops, mods, fns, te), (k, *slots), r in zip(
            cost.fwd_layers, kf, router, strict=False
        )
    )
    bwd_layers = tuple(
        (sec, kept(ops, k, *slots), calls(nodes, k, r[3]))
        for (sec, ops, nodes), (k, *slots), r in zip(cost.bwd_layers, kb, router, strict=False)
    )
    if cost.fwd_layers:
        fwd_ops = sum(x[1] for x in fwd_layers)
        bwd_ops = sum(x[1] for x in bwd_layers)
    else:
        mean = sum(shares) / len(shares) if shares else 1.0
        fwd_ops, bwd_ops = cost.fwd_ops * mean, cost.bwd_ops * mean
    left, own = (
        tuple((f * e, b * e) for (f, b), e in zip(slots, es, strict=False))
        for slots, es in ((cost.grouped_ops, eager), (cost.attn_ops, attn_eager))
    )
    return replace(
        cost,
        fwd_layers=fwd_layers,
        bwd_layers=bwd_layers,
        fwd_ops=fwd_ops,
        bwd_ops=bwd_ops,
        grouped_ops=left,
        attn_ops=own,
    )
