"""How a mixture-of-experts router spreads tokens over experts, and what the experts receive.

A router sends each of ``T`` tokens to ``k`` of ``E`` experts, ``T*k`` assignments in all. Which
experts receive them is data-dependent; the simulator needs only each expert's **share** of the
assignments (its *load*, summing to 1 over the experts) and, with a capacity factor, how many of
them it keeps:

* ``balanced`` (default): every expert receives ``1/E`` of the assignments, the regime the
  auxiliary load-balancing loss (GShard, Lepikhin et al., arXiv:2006.16668, §2.2; Switch,
  Fedus et al., arXiv:2101.03961, §2.2) and DeepSeek-V3's bias-based balancing
  (arXiv:2412.19437, §2.1.2) steer training towards.
* ``imbalance`` ``a`` (``1 <= a <= E``): the busiest expert receives ``a/E`` (``a`` times the
  mean), the other ``E - 1`` share the rest equally. An assumption of shape, not a measurement:
  it models "the hottest expert gets ``a`` x its share", the quantity that sets the slowest
  expert-parallel rank.
* ``histogram``: measured per-expert token counts (e.g. Megatron-LM's
  ``--moe-per-layer-logging`` ``tokens_per_expert``), normalised to shares.

Every source rank is assumed to route with the same shares (one histogram for the group).

**Dispatcher** (a ``+allgather`` suffix of the spec: ``balanced+allgather``): how the routed
tokens reach their experts' ranks, ``alltoall`` by default, or Megatron-Core's ``allgather``
token dispatcher (``--moe-token-dispatcher-type allgather``), which gathers every token over
the expert-parallel ranks and reduce-scatters the outputs back
(:func:`sim.parallel.expert.expert_plan`).

**Capacity** (Megatron-LM ``megatron/core/transformer/moe/moe_utils.py`` ``get_capacity``, used
by ``topk_softmax_with_capacity``; GShard §2.2, Switch §2.2): with a capacity factor ``c`` each
rank's router keeps at most ``ceil(T*k/E * c)`` assignments per expert (the lowest-probability
ones are dropped first, ``--moe-token-drop-policy probs``); with
``--moe-pad-expert-input-to-capacity`` every expert then computes exactly that many rows.
Without a capacity factor (``None``, Megatron's default "dropless") nothing is dropped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

KINDS = ("balanced", "imbalance", "histogram")
DISPATCHERS = ("alltoall", "allgather")
"""Token dispatchers (module doc, "Dispatcher")."""

SOURCES = {
    "capacity": "Megatron-LM megatron/core/transformer/moe/moe_utils.py get_capacity: "
    "ceil(num_tokens * topk / num_experts * capacity_factor); GShard arXiv:2006.16668 §2.2; "
    "Switch arXiv:2101.03961 §2.2",
    "balanced": "load-balancing loss (GShard §2.2, Switch §2.2) / DeepSeek-V3 arXiv:2412.19437 "
    "§2.1.2 auxiliary-loss-free balancing: equal shares (assumption of perfect balance)",
}


@dataclass(frozen=True)
class Routing:
    """The shares of routed tokens per expert (module doc).

    Attributes:
        kind: ``balanced``, ``imbalance`` or ``histogram``.
        imbalance: the busiest expert's load over the mean (``kind="imbalance"``), >= 1.
        histogram: tokens (or shares) per expert (``kind="histogram"``), all >= 0, not all 0.
        dispatcher: ``alltoall`` or ``allgather`` (module doc, "Dispatcher").

    Example:
        >>> Routing("imbalance", imbalance=2.0).loads(4)
        (0.5, 0.16666666666666666, 0.16666666666666666, 0.16666666666666666)
    """

    kind: str = "balanced"
    imbalance: float = 1.0
    histogram: tuple[float, ...] = ()
    dispatcher: str = "alltoall"

    def __post_init__(self) -> None:
        if self.dispatcher not in DISPATCHERS:
            raise ValueError(f"dispatcher must be one of {', '.join(DISPATCHERS)}, "
                             f"got {self.dispatcher!r}")  # fmt: skip
        if self.kind not in KINDS:
            raise ValueError(f"routing must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.kind == "imbalance" and not self.imbalance >= 1:
            raise ValueError(f"imbalance factor must be >= 1, got {self.imbalance!r}")
        if self.kind == "histogram":
            if not self.histogram or any(not x >= 0 for x in self.histogram):
                raise ValueError("a routing histogram needs one count >= 0 per expert")
            if sum(self.histogram) <= 0:
                raise ValueError("a routing histogram must not be all zeros")

    def loads(self, experts: int) -> tuple[float, ...]:
        """Each expert's share of the routed assignments (sums to 1).

        Raises:
            ValueError: ``experts < 1``; an imbalance above ``experts``; a histogram whose
                length is not ``experts``.
        """
        if experts < 1:
            raise ValueError(f"experts must be >= 1, got {experts}")
        if self.kind == "balanced":
            return (1.0 / experts,) * experts
        if self.kind == "imbalance":
            if self.imbalance > experts:
                raise ValueError(
                    f"imbalance factor {self.imbalance:g} exceeds the {experts} experts "
                    "(the busiest expert cannot take more than all tokens)"
                )
            hot = self.imbalance / experts
            rest = (1.0 - hot) / (experts - 1) if experts > 1 else 0.0
            return (hot,) + (rest,) * (experts - 1)
        if len(self.histogram) != experts:
            raise ValueError(
                f"the routing histogram has {len(self.histogram)} entries, the model {experts} "
                "experts"
            )
        total = float(sum(self.histogram))
        return tuple(x / total for x in self.histogram)

    def label(self) -> str:
        """A short description: ``balanced``, ``imbalance 1.5``, ``histogram``."""
        return f"imbalance {self.imbalance:g}" if self.kind == "imbalance" else self.kind


def capacity(tokens: int, experts: int, top_k: int, factor: float) -> int:
    """Assignments one rank's router keeps per expert: ``ceil(T*k/E * factor)`` (module doc)."""
    return math.ceil(tokens * top_k / experts * factor)


def expert_rows(
    tokens: int,
    sources: int,
    experts: int,
    top_k: int,
    loads: tuple[float, ...],
    capacity_factor: float | None = None,
    pad: bool = False,
) -> tuple[float, ...]:
    """Rows (token copies) each expert computes when ``sources`` ranks of ``tokens`` tokens each
    route to it with shares ``loads``.

    Dropless: ``sources * tokens * k * load_e``. With a capacity factor: each source keeps at
    most :func:`capacity` per expert, so ``sources * min(tokens*k*load_e, cap)``; with ``pad``
    every expert computes ``sources * cap``.

    Raises:
        ValueError: ``loads`` does not have ``experts`` entries.
    """
    if len(loads) != experts:
        raise ValueError(f"{len(loads)} loads for {experts} experts")
    assigned = [tokens * top_k * x for x in loads]
    if capacity_factor is None:
        return tuple(sources * a for a in assigned)
    cap = capacity(tokens, experts, top_k, capacity_factor)
    if pad:
        return (float(sources * cap),) * experts
    return tuple(sources * min(a, cap) for a in assigned)


def parse_routing(spec: str) -> Routing:
    """A :class:`Routing` from its text form: ``balanced``, ``imbalance:A`` or
    ``histogram:N0,N1,...``, optionally ``+allgather`` (the dispatcher, module doc).

    Example:
        >>> parse_routing("imbalance:1.5").loads(3)
        (0.5, 0.25, 0.25)

    Raises:
        ValueError: an unknown form or a bad number.
    """
    spec, _, disp = spec.partition("+")
    kind, _, arg = spec.partition(":")
    disp = disp or "alltoall"
    try:
        if kind == "balanced" and not arg:
            return Routing(dispatcher=disp)
        if kind == "imbalance":
            return Routing("imbalance", imbalance=float(arg), dispatcher=disp)
        if kind == "histogram":
            return Routing("histogram", histogram=tuple(float(x) for x in arg.split(",")),
                           dispatcher=disp)  # fmt: skip
    except ValueError as exc:
        raise ValueError(f"routing {spec!r}: {exc}") from None
    raise ValueError(f"routing {spec!r}: use 'balanced', 'imbalance:A' or 'histogram:N0,N1,...'")
