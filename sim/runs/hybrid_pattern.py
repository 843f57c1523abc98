"""Megatron-Core's hybrid layer pattern (``--hybrid-layer-pattern``) as pipesim's decoder fields.

A hybrid Mamba-2 model (Nemotron-H, Nemotron 3) is one character per layer, ``M`` Mamba-2,
``*`` attention, ``-`` MLP, ``E`` MoE, with two separators (NVIDIA/Megatron-LM@d98e8a64
``megatron/core/models/hybrid/hybrid_layer_allocation.py``: ``Symbols.PIPE`` ``|`` and
``Symbols.MTP_SEPARATOR`` ``/``; ``megatron/training/arguments.py`` lines 743-830):

* ``|`` cuts the main pattern into pipeline segments, one per (virtual) pipeline stage in
  order: the explicit stage layout (``--decoder-first-pipeline-num-layers`` and
  ``--pipeline-model-parallel-layout`` are refused beside it); ``--num-layers`` is the count of
  layer characters;
* ``/`` ends the main pattern; each part after it is one multi-token-prediction depth's pattern
  (``"M*M*/MM/MM"``: main ``M*M*``, two MTP depths ``MM``).

The Mamba-2 mixer's sizes default as ``TransformerConfig`` (``transformer_config.py`` lines
1259-1270): state 128, head width 64, 8 groups, heads ``hidden * 2 // head_dim``;
``MambaMixer``'s ``chunk_size`` 128, conv kernel 4 (``megatron/core/ssm/mamba_mixer.py:194``).
"""

from __future__ import annotations

from dataclasses import dataclass

PIPE, MTP = "|", "/"
"""Megatron's separators (module doc)."""
LAYERS = set("M*-E")
"""Megatron's layer symbols that pipesim's decoder generator builds."""
MAMBA_DEFAULTS = {"state": 128, "head_dim": 64, "groups": 8, "chunk": 128, "conv_kernel": 4}
"""``TransformerConfig`` / ``MambaMixer`` defaults (module doc)."""


@dataclass(frozen=True)
class HybridPattern:
    """A parsed pattern.

    Attributes:
        layers: the main pattern's layer characters, separators removed.
        segments: its pipeline segments (one: no ``|``).
        mtp: each MTP depth's pattern.
    """

    layers: str
    segments: tuple[str, ...]
    mtp: tuple[str, ...]


def parse_pattern(text: str) -> HybridPattern:
    """``text`` as Megatron reads it (module doc).

    Raises:
        ValueError: a symbol pipesim's generator lacks, or an empty pipeline segment.

    Example:
        >>> p = parse_pattern("M*-|ME/*E/*E")
        >>> p.layers, p.segments, p.mtp
        ('M*-ME', ('M*-', 'ME'), ('*E', '*E'))
    """
    main, *mtp = text.strip().split(MTP)
    segments = tuple(main.split(PIPE))
    bad = sorted(set(main.replace(PIPE, "")) - LAYERS)
    if bad:
        raise ValueError(
            f"hybrid pattern {text!r}: layer symbols {bad} (pipesim builds M, *, -, E)"
        )
    if any(not s for s in segments):
        raise ValueError(f"hybrid pattern {text!r} has an empty pipeline segment")
    return HybridPattern("".join(segments), segments, tuple(mtp))


def stage_layout(p: HybridPattern) -> str:
    """The pipeline segments as a ``--pipeline-model-parallel-layout`` string
    (:mod:`sim.runs.pipeline_layout`): the embedding with the first segment, the MTP depths and
    the loss with the last (Megatron's placement); "" without ``|``.

    Example:
        >>> stage_layout(parse_pattern("M*|MM/*E"))
        'Ett|ttmL'
    """
    if len(p.segments) < 2:
        return ""
    parts = ["t" * len(s) for s in p.segments]
    parts[0] = "E" + parts[0]
    parts[-1] += "m" * len(p.mtp) + "L"
    return PIPE.join(parts)


def mamba_sizes(hidden: int, heads: int | None, head_dim: int | None, state: int | None,
                groups: int | None) -> tuple[int, int, int, int]:  # fmt: skip
    """``(heads, head_dim, state, groups)`` with Megatron's defaults (module doc).

    Example:
        >>> mamba_sizes(1024, None, None, None, None)
        (32, 64, 128, 8)
    """
    p = head_dim or MAMBA_DEFAULTS["head_dim"]
    return (heads or hidden * 2 // p, p, state or MAMBA_DEFAULTS["state"],
            groups or MAMBA_DEFAULTS["groups"])  # fmt: skip
