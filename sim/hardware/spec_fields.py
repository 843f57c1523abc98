"""The field types of a hardware description: quantities with units (``16 GiB``, ``25 GB/s``,
``10 us``, ``125 TFLOPS``; see :mod:`sim.units`) or bare numbers in base units, node names and
link kinds."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import BeforeValidator

from sim.units import parse_bandwidth, parse_bytes, parse_flops, parse_seconds

NODE_NAME = r"^[A-Za-z][A-Za-z0-9_.-]*$"
LinkKind = Literal[
    "nvlink", "nvswitch", "pcie", "qpi", "upi", "xgmi", "network", "loopback", "link"
]


def _quantity(parse: Callable[[str | float], float], example: str) -> BeforeValidator:
    def convert(value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ValueError(f"expected a quantity such as '{example}' or a number, got {value!r}")
        number = parse(value)
        if not math.isfinite(number):
            raise ValueError(f"must be finite, got {value!r}")
        return number

    return BeforeValidator(convert)


Bytes = Annotated[float, _quantity(parse_bytes, "16 GiB")]
Bandwidth = Annotated[float, _quantity(parse_bandwidth, "25 GB/s")]
Seconds = Annotated[float, _quantity(parse_seconds, "10 us")]
Flops = Annotated[float, _quantity(parse_flops, "125 TFLOPS")]
