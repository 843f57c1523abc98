"""Parse and format quantities with units at the input/output boundary, with pint.

Inside pipesim everything is seconds, bytes, bytes per second and FLOP/s. YAML may say
``25 GB/s``, ``32 GiB``, ``1.2 ms`` or ``125 TFLOPS``; these helpers convert. The units are
read by pint (https://pint.readthedocs.io) in a registry of our own, :data:`DEFINITIONS`, that
holds only what pipesim's inputs need: ``B``/``byte``, ``s``/``second`` with ``ms``, ``us``
(``µs``) and ``ns``, ``FLOP`` and ``FLOPS``/``flops`` (= ``FLOP/s``). Decimal prefixes (k, M, G,
T, P) are powers of 1000, binary ones (Ki, Mi, Gi, Ti, Pi) of 1024 (IEC 80000-13). ``K`` is kilo
as well (``KB``), as the hand-written parser before pint accepted: pint's own registry reads ``K``
as kelvin, so the alias is defined here. Prefixed seconds other than ``ms``, ``us``/``µs`` and
``ns`` (``Ms``, ``ks``) are refused: ``10 Ms`` is far likelier a typo for ``ms`` than 115 days.

The number is read before pint sees the unit (``[-+]digits[.digits][e±digits]``, then
``float``), and multiplied by the unit's factor to its base unit (1, 1e3 ... 1e15, 2**10 ...
2**50, 1e-3, 1e-6, 1e-9), so a value is the same float the hand-written parser gave. A unit is names joined by ``/``
or ``*``; powers and parentheses are refused before pint evaluates them.

Importing pint takes about 0.3 s, more than pipesim's whole API wants at import
(``python -X importtime -c "import sim.api"``), so the registry is built lazily: on the first
string with a unit, and once per process (:func:`registry`). Bare numbers and
:func:`fmt_bytes` never import pint, nor do the units of :data:`COMMON_UNITS` (every prefix on
``B``, ``B/s``, ``FLOPS``, ``FLOP/s``, ``flops``, and ``s``, ``ms``, ``us``, ``ns``: all that
the shipped presets and experiments use), whose factors are pint's, checked against it by
``tests/test_units.py``: ``sim run`` reads a preset without importing pint and the scipy it
imports (0.25 CPU s on the path to the first simulation, issue 28).
"""

from __future__ import annotations

import re
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pint

#: pint definitions of the registry (pint's definition syntax; no defaults loaded).
DEFINITIONS = (
    "kilo- = 1e3 = k- = K-",
    "mega- = 1e6 = M-",
    "giga- = 1e9 = G-",
    "tera- = 1e12 = T-",
    "peta- = 1e15 = P-",
    "kibi- = 2**10 = Ki-",
    "mebi- = 2**20 = Mi-",
    "gibi- = 2**30 = Gi-",
    "tebi- = 2**40 = Ti-",
    "pebi- = 2**50 = Pi-",
    "second = [time] = s",
    "millisecond = 1e-3 * second = ms",
    "microsecond = 1e-6 * second = us = µs = μs",
    "nanosecond = 1e-9 * second = ns",
    "byte = [information] = B",
    "FLOP = [flop] = flop",
    "FLOPS = FLOP / second = flops",
)
_NUM = re.compile(r"^\s*([-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)\s*(.*?)\s*$")
# unit names joined by / or * (no powers: pint would evaluate B**9**9**9 for minutes)
_UNIT = re.compile(r"^[A-Za-zµμ]+(?:\s*[/*]\s*[A-Za-zµμ]+)*$")


_DECIMAL = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}
_PER_SECOND = {"FLOP/s": ("FLOPS", "FLOP/s", "flops"), "B/s": ("B/s",)}
_SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ns": 1e-9}

COMMON_UNITS: dict[tuple[str, str], float] = {
    **{(p + "B", "B"): f for p, f in (_DECIMAL | _BINARY).items()},
    **{
        (p + unit, base): f
        for base, units in _PER_SECOND.items()
        for unit in units
        for p, f in (_DECIMAL | _BINARY).items()
    },
    **{(unit, "s"): f for unit, f in _SECONDS.items()},
}
"""``(unit, base unit): base units per unit`` of the common units, the factors pint gives
(:func:`_factor`), known without importing it; any other unit goes to pint."""


@cache
def registry() -> pint.UnitRegistry:
    """The pint registry of :data:`DEFINITIONS`, built (and pint imported) on first use."""
    import pint

    ureg: pint.UnitRegistry = pint.UnitRegistry(None)
    for line in DEFINITIONS:
        ureg.define(line)
    return ureg


@cache
def _factor(unit: str, base: str) -> float:
    """Base units per ``unit`` (``'GiB/s'``, ``'B/s'`` -> 2**30).

    Raises:
        ValueError: pint cannot read ``unit``, it is not of ``base``'s dimension, or it puts
            a prefix on seconds other than ms, us, ns.
    """
    known = COMMON_UNITS.get((unit, base))
    return known if known is not None else pint_factor(unit, base)


def pint_factor(unit: str, base: str) -> float:
    """Base units per ``unit`` as pint reads it (:func:`_factor` without
    :data:`COMMON_UNITS`).

    Raises:
        ValueError: as :func:`_factor`.
    """
    if not _UNIT.match(unit):
        raise ValueError(f"unknown unit {unit!r}")
    ureg = registry()
    try:
        parsed = ureg.parse_units(unit)
    except Exception as err:  # pint raises a dozen types on odd text (tokenize, Assertion...)
        raise ValueError(f"unknown unit {unit!r}") from err
    for name in re.split(r"[\s/*]+", unit):
        prefix, unit_name, _ = ureg.parse_unit_name(name)[0]
        if prefix and ureg.parse_units(unit_name).dimensionality == {"[time]": 1}:
            raise ValueError(f"a prefix on seconds in {unit!r} (write s, ms, us or ns)")
    target = ureg.parse_units(base)
    if parsed.dimensionality != target.dimensionality:
        raise ValueError(f"{unit!r} measures {parsed.dimensionality}, not {target.dimensionality}")
    return float((1 * parsed).to(target).magnitude)


def _parse(value: str | float | int, base: str, what: str, example: str) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    m = _NUM.match(value)
    if not m:
        raise ValueError(f"cannot read a number from {value!r} (expected {what} e.g. '{example}')")
    number, unit = float(m.group(1)), m.group(2)
    if unit == "":
        return number
    try:
        return number * _factor(unit, base)
    except ValueError as err:
        msg = f"{value!r} is not {what} (expected e.g. '{example}'): {err}"
        raise ValueError(msg + _unit_hint(unit, base)) from None


def _unit_hint(unit: str, base: str) -> str:
    """``" (did you mean 'GB' (1e9 B) or 'GiB' (2**30 B)?)"`` for a unit that differs from a
    common unit of ``base`` only in letter case (``gb``, ``GIB``, ``tflops``) or lacks its
    ``B`` (``Gi``); a decimal byte unit is offered with its binary twin, as ``80 GB`` is often
    meant as ``80 GiB``. Empty when nothing is close."""
    names: dict[str, str] = {}
    for u, b in COMMON_UNITS:
        if b == base:
            names.setdefault(u.lower(), u)
    hit = names.get(unit.lower()) or names.get(unit.lower() + "b")
    if hit is None:
        return ""
    power = "kKMGTP".find(hit[0]) if hit[1:2] != "i" and base in ("B", "B/s") else -1
    if power < 0:
        return f" (did you mean '{hit}'?)"
    n = max(power, 1)  # k and K are both kilo
    twin = f"{'KMGTP'[n - 1]}i{hit[1:]}"
    return f" (did you mean '{hit}' (1e{3 * n} {base}) or '{twin}' (2**{10 * n} {base})?)"


def parse_bytes(value: str | float | int) -> float:
    """Bytes from ``32 GiB``, ``16 GB``, ``512 MB`` or a bare number (bytes).

    Raises:
        ValueError: the text is not a byte quantity.
    """
    return _parse(value, "B", "a byte quantity", "32 GiB")


def parse_bandwidth(value: str | float | int) -> float:
    """Bytes per second from ``25 GB/s``, ``12.5 GiB/s`` or a bare number (B/s).

    Raises:
        ValueError: the text is not a bandwidth.
    """
    return _parse(value, "B/s", "a bandwidth", "25 GB/s")


def parse_seconds(value: str | float | int) -> float:
    """Seconds from ``1.2 ms``, ``10 us``, ``3 s`` or a bare number (seconds).

    Raises:
        ValueError: the text is not a duration.
    """
    return _parse(value, "s", "a duration", "1.2 ms")


def parse_flops(value: str | float | int) -> float:
    """FLOP/s from ``125 TFLOPS``, ``989.4 TFLOP/s`` or a bare number.

    Raises:
        ValueError: the text is not a FLOP rate.
    """
    return _parse(value, "FLOP/s", "a FLOP rate", "125 TFLOPS")


def fmt_bytes(n: float) -> str:
    """``17179869184`` -> ``'16.00 GiB'`` (binary prefixes, two decimals; below 1 KiB whole
    bytes: ``'512 B'``). Not pint's: its ``to_compact`` knows decimal prefixes only."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"
