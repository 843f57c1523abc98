"""A ``precision`` cell of the measured-data CSV layout as Megatron-LM's precision flags, for
:func:`sim.runs.measured_csv.row_run`: the labels of Megatron-Bridge's and NeMo's tables (FP8 is
current scaling there), Megatron-LM's (a bare FP8 is delayed scaling), and the Hopper readings of
Bridge's FP8 variants (``measurements/megatron-bridge/hopper.md``)."""

from __future__ import annotations

from typing import Any

HOPPER = ("H100", "H200", "H800", "H20", "GH200")
"""GPU names of the Hopper generation (FP8 tensor cores, no MXFP8 or NVFP4: the H100 datasheet
lists FP8 only; the presets' ``gpu.low_precision``)."""
BLOCKWISE = {"fp8-format": "e4m3", "fp8-recipe": "blockwise"}
SUBCHANNEL = ("fp8-sc", "fp8_sc", "subchannel", "sub-channel")
"""Labels of Megatron-Bridge's FP8 subchannel scaling (``bf16_with_fp8_subchannel_scaling_mixed``,
``training/mixed_precision.py:373-385``: ``fp8_recipe = "blockwise"``, and it gathers parameters
in bf16, ``fp8_param_gather = False``: :mod:`sim.runs.bridge_fallback`)."""
PRECISION_FLAGS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("nvfp4", {"fp4-format": "e2m1", "fp4-recipe": "nvfp4"}),
    ("alt granularity", {"fp8-format": "e4m3", "fp8-recipe": "mxfp8"}),
    ("blockwise", BLOCKWISE),
    *((label, BLOCKWISE) for label in SUBCHANNEL),
    ("mx", {"fp8-format": "e4m3", "fp8-recipe": "mxfp8"}),
    ("delayed", {"fp8-format": "hybrid", "fp8-recipe": "delayed"}),
    ("fp8-ds", {"fp8-format": "hybrid", "fp8-recipe": "delayed"}),
    ("fp8_ds", {"fp8-format": "hybrid", "fp8-recipe": "delayed"}),
    ("fp8 ds", {"fp8-format": "hybrid", "fp8-recipe": "delayed"}),
    ("current", {"fp8-format": "hybrid", "fp8-recipe": "tensorwise"}),
    ("tensorwise", {"fp8-format": "hybrid", "fp8-recipe": "tensorwise"}),
    ("fp8-cs", {"fp8-format": "hybrid", "fp8-recipe": "tensorwise"}),
    ("fp8", {"fp8-format": "hybrid", "fp8-recipe": "tensorwise"}),
    ("bf16", {"bf16": True}),
    ("fp16", {"fp16": True}),
)
"""A ``precision`` cell (lower case) -> Megatron flags, first match: NVFP4; Megatron-Bridge's
"alternative granularity" FP8 (MXFP8 on Blackwell; on Hopper its 128x128 / 1x128 blocks,
:func:`precision_flags`), blockwise FP8 (and Bridge's ``FP8-SC``, "subchannel" scaling: ``bf16_with_fp8_subchannel_scaling_mixed``,
``mixed_precision.py:373-385``, ``fp8_recipe = "blockwise"``), MXFP8/FP8-MX; FP8 delayed scaling (``FP8-DS``, Bridge's
``fp8_ds``: ``bf16_with_fp8_delayed_scaling_mixed``, NVIDIA-NeMo/Megatron-Bridge@067f987df0
``src/megatron/bridge/training/mixed_precision.py:217-232``, ``fp8_recipe = "delayed"``);
FP8/FP8-CS (current scaling, Transformer Engine's ``Float8CurrentScaling`` is ``tensorwise`` in
Megatron's names); BF16, FP16."""


MEGATRON_FP8 = {"fp8-format": "hybrid", "fp8-recipe": "delayed"}
"""A bare "FP8" of a Megatron-LM row: Megatron-Core's default recipe, delayed scaling
(NVIDIA/Megatron-LM@d98e8a64dd ``megatron/core/transformer/transformer_config.py:594-596``,
``fp8_recipe = "delayed"``); Megatron-Bridge's and NeMo's tables call current scaling "FP8"
(``measurements/megatron-bridge/README.md``, "Precision labels")."""


def precision_flags(cell: str, gpu: str, framework: str = "megatron-bridge") -> dict[str, Any]:
    """Megatron flags of a ``precision`` cell (:data:`PRECISION_FLAGS`) on ``gpu``: Megatron-
    Bridge's "alt granularity" FP8 is MXFP8 on Blackwell and 128x128 weight / 1x128 activation
    blocks (Transformer Engine's ``Float8BlockScaling``, Megatron's ``blockwise``) on Hopper,
    as the tables' header says (``measurements/megatron-bridge/README.md``, "Precision labels");
    a bare "FP8" of a ``megatron-lm`` row is Megatron's default (:data:`MEGATRON_FP8`).

    >>> precision_flags("FP8 alt granularity (MX 32x32 ...)", "H100")["fp8-recipe"]
    'blockwise'
    >>> precision_flags("FP8-DS", "H100")["fp8-recipe"], precision_flags("FP8-CS", "H100")["fp8-recipe"]
    ('delayed', 'tensorwise')
    >>> precision_flags("FP8", "H100", "megatron-lm")["fp8-recipe"]
    'delayed'
    """
    prec = cell.lower()
    if "alt granularity" in prec and any(h in gpu.upper() for h in HOPPER):
        return dict(BLOCKWISE)
    key, flags = next(((k, f) for k, f in PRECISION_FLAGS if k in prec), ("", {}))
    if key == "fp8" and framework == "megatron-lm":
        return dict(MEGATRON_FP8)
    return dict(flags)
