"""Which Transformer Engine releases fuse the grouped MLP under NVFP4 (sim/runs/megatron_shape.py
``_fused_grouped_mlp``): TE v2.16's op fuser fuses MXFP8 only (``ops/_common.py`` 244-245),
v2.17.1 MXFP8 and NVFP4 (``ops/fused/grouped_mlp.py`` 707)."""

from __future__ import annotations

import pytest

from sim.runs.bridge_software import TE_FLAG
from sim.runs.megatron_reading import Reading
from sim.runs.megatron_shape import shape_features

BASE = {"num-experts": 8, "use-transformer-engine-op-fuser": True}


@pytest.mark.parametrize(
    ("recipe", "te", "fused"),
    [
        ({"fp4-recipe": "nvfp4"}, "2.16.0+4220403e", False),  # 26.06 / 26.06.01 containers
        ({"fp4-recipe": "nvfp4"}, "2.17.1+4329ff84", True),  # 26.08
        ({"fp4-recipe": "nvfp4"}, None, False),  # no version named: TE_VERSION's (2.16)
        ({"fp8-recipe": "mxfp8"}, "2.14.0+71bbefbf", True),  # MXFP8 fused in every release
        ({"fp8-recipe": "tensorwise"}, "2.17.1+4329ff84", False),  # not block-scaled
    ],
)
def test_nvfp4_experts_are_fused_only_from_te_2_17(recipe, te, fused):
    flags = {**BASE, **recipe, **({TE_FLAG: te} if te else {})}
    features = shape_features(Reading(flags, strict=False), grouped=True)
    assert ("moe_experts=fused" in features) is fused


def test_without_the_op_fuser_nothing_is_fused():
    flags = {"num-experts": 8, "fp8-recipe": "mxfp8", TE_FLAG: "2.17.1+4329ff84"}
    assert "moe_experts=fused" not in shape_features(Reading(flags, strict=False), grouped=True)
