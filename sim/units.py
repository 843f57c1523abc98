"""Parse and format quantities with units at the input/output boundary.

Inside pipesim everything is seconds, bytes, bytes per second and FLOP/s. YAML may say
``25 GB/s``, ``32 GiB``, ``1.2 ms`` or ``125 TFLOPS``; these helpers convert.
Decimal prefixes (k, M, G, T) are powers of 1000, binary ones (Ki, Mi, Gi, Ti) of 1024.
"""

from __future__ import annotations

import re

_DEC = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BIN = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40}
_NUM = r"^\s*([-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)\s*"
_TIME = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def _split(text: str) -> tuple[float, str]:
    m = re.match(_NUM + r"(.*?)\s*$", text)
    if not m:
        raise ValueError(f"cannot read a number from {text!r}")
    return float(m.group(1)), m.group(2)


def _prefix(unit: str, base: str) -> float:
    stem = unit[: len(unit) - len(base)]
    if stem in _BIN:
        return _BIN[stem]
    if stem in _DEC:
        return _DEC[stem]
    raise ValueError(f"unknown prefix {stem!r} in unit {unit!r}")


def parse_bytes(value: str | float | int) -> float:
    """Bytes from ``32 GiB``, ``16 GB``, ``512 MB`` or a bare number (bytes).

    Raises:
        ValueError: the text is not a byte quantity.
    """
    if isinstance(value, (int, float)):
        return float(value)
    num, unit = _split(value)
    if unit in ("", "B"):
        return num
    if not unit.endswith("B"):
        raise ValueError(f"{value!r} is not a byte quantity (expected e.g. '32 GiB')")
    return num * _prefix(unit, "B")


def parse_bandwidth(value: str | float | int) -> float:
    """Bytes per second from ``25 GB/s``, ``12.5 GiB/s`` or a bare number (B/s).

    Raises:
        ValueError: the text is not a bandwidth.
    """
    if isinstance(value, (int, float)):
        return float(value)
    num, unit = _split(value)
    if unit in ("", "B/s"):
        return num
    if not unit.endswith("B/s"):
        raise ValueError(f"{value!r} is not a bandwidth (expected e.g. '25 GB/s')")
    return num * _prefix(unit, "B/s")


def parse_seconds(value: str | float | int) -> float:
    """Seconds from ``1.2 ms``, ``10 us``, ``3 s`` or a bare number (seconds).

    Raises:
        ValueError: the text is not a duration.
    """
    if isinstance(value, (int, float)):
        return float(value)
    num, unit = _split(value)
    if unit == "":
        return num
    if unit not in _TIME:
        raise ValueError(f"{value!r} is not a duration (expected e.g. '1.2 ms')")
    return num * _TIME[unit]


def parse_flops(value: str | float | int) -> float:
    """FLOP/s from ``125 TFLOPS``, ``989.4 TFLOP/s`` or a bare number.

    Raises:
        ValueError: the text is not a FLOP rate.
    """
    if isinstance(value, (int, float)):
        return float(value)
    num, unit = _split(value)
    if unit == "":
        return num
    for base in ("FLOPS", "FLOP/s", "flops"):
        if unit.endswith(base):
            return num * _prefix(unit, base)
    raise ValueError(f"{value!r} is not a FLOP rate (expected e.g. '125 TFLOPS')")


def fmt_bytes(n: float) -> str:
    """``17179869184`` -> ``'16.00 GiB'``."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"
