"""sim.units: quantities read by pint to seconds, bytes, bytes/s and FLOP/s, and fmt_bytes.

Closed forms: decimal prefixes are powers of 1000, binary ones of 1024 (IEC 80000-13); the
values are the float products the hand-written parser before pint gave (number * factor).
The hardware loader's use of these (field names in the errors) is in tests/test_hardware.py.
"""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.errors import InputError
from sim.hardware import load_hardware
from sim.units import (
    COMMON_UNITS,
    fmt_bytes,
    parse_bandwidth,
    parse_bytes,
    parse_flops,
    parse_seconds,
    pint_factor,
)

GIB = 2.0**30
PREFIXES = ["k", "M", "G", "T"]  # decimal prefix p and binary pi: 1000**k vs 1024**k, k = 1..4


@pytest.mark.parametrize(
    ("parse", "text", "expected"),
    [
        (parse_bytes, "32 GiB", 32 * GIB),
        (parse_bytes, "16 GB", 16e9),
        (parse_bytes, "512 MB", 512e6),
        (parse_bytes, "3 KB", 3e3),  # K is kilo, as before pint
        (parse_bytes, "3 kB", 3e3),
        (parse_bytes, "3 KiB", 3072.0),
        (parse_bytes, "2 PiB", 2.0 * 2**50),
        (parse_bytes, "7 B", 7.0),
        (parse_bytes, "32GiB", 32 * GIB),
        (parse_bytes, " 1e9 ", 1e9),
        (parse_bytes, "-12.5 GB", -12.5e9),  # the sign is the field's to refuse (ge=0)
        (parse_bandwidth, "25 GB/s", 25e9),
        (parse_bandwidth, "12.5 GiB/s", 12.5 * GIB),
        (parse_bandwidth, "1 GB/ms", 1e12),
        (parse_bandwidth, "900 B/s", 900.0),
        (parse_seconds, "1.2 ms", 1.2e-3),
        (parse_seconds, "10 us", 10 * 1e-6),
        (parse_seconds, "10 µs", 10 * 1e-6),
        (parse_seconds, "10 μs", 10 * 1e-6),  # Greek mu as well as the micro sign
        (parse_seconds, "5 ns", 5 * 1e-9),
        (parse_seconds, "3 s", 3.0),
        (parse_flops, "125 TFLOPS", 125e12),
        (parse_flops, "989.4 TFLOP/s", 989.4 * 1e12),
        (parse_flops, "19.5 Tflops", 19.5 * 1e12),
        (parse_flops, "1 PFLOPS", 1e15),
    ],
)
def test_quantities_in_base_units(parse, text, expected):
    assert parse(text) == expected  # exact: number * factor, as the parser before pint


@pytest.mark.parametrize("parse", [parse_bytes, parse_bandwidth, parse_seconds, parse_flops])
def test_bare_numbers_are_base_units(parse):
    assert parse(3) == 3.0 and parse(2.5) == 2.5 and parse("42") == 42.0
    assert isinstance(parse(3), float)


@given(st.floats(-(2.0**52), 2.0**52, allow_nan=False))
def test_fmt_bytes_round_trips_within_its_rounding(n):
    size = next((s for s in (2**40, 2**30, 2**20, 2**10) if abs(n) >= s), 1)
    step = 0.01 * size if size > 1 else 1.0  # two decimals of the unit, or whole bytes
    assert abs(parse_bytes(fmt_bytes(n)) - n) <= step / 2 * (1 + 1e-9)


@given(st.floats(0.001, 1e6), st.sampled_from(list(enumerate(PREFIXES, start=1))))
def test_binary_prefixes_are_1024_over_1000_per_step(value, step_prefix):
    k, p = step_prefix
    dec, binary = f"{value!r} {p}B", f"{value!r} {p.upper()}iB"
    assert parse_bytes(dec) == pytest.approx(value * 1000.0**k)
    assert parse_bytes(binary) == pytest.approx(value * 1024.0**k)
    assert parse_bytes(binary) / parse_bytes(dec) == pytest.approx(1.024**k)
    assert parse_bandwidth(binary + "/s") / parse_bandwidth(dec + "/s") == pytest.approx(1.024**k)


@pytest.mark.parametrize(
    ("parse", "text", "expected"),
    [
        (parse_bandwidth, "13 GB", "not a bandwidth (expected e.g. '25 GB/s')"),
        (parse_seconds, "10 GB", "not a duration (expected e.g. '1.2 ms')"),
        (parse_bytes, "16 GB/s", "not a byte quantity (expected e.g. '32 GiB')"),
        (parse_flops, "125 TFLOPs", "not a FLOP rate (expected e.g. '125 TFLOPS')"),  # a count
        (parse_flops, "2 GB/s", "not a FLOP rate"),
        (parse_seconds, "10 Ms", "a prefix on seconds"),  # likelier a typo for ms
        (parse_seconds, "3 ks", "a prefix on seconds"),
        (parse_bytes, "16 mB", "unknown unit 'mB'"),  # no millibytes
        (parse_bytes, "16 XB", "unknown unit"),
        (parse_bytes, "16 gb", "unknown unit"),
        (parse_bandwidth, "10 Gb/s", "unknown unit"),  # bits are not defined
        (parse_bandwidth, "1 GB)", "unknown unit"),
        (parse_bytes, "1 B**9**9**9", "unknown unit"),  # no powers: pint would compute 9**9**9
        (parse_bytes, "12 parsecs", "unknown unit"),
        (parse_bytes, "abc", "cannot read a number from 'abc' (expected a byte quantity"),
        (parse_bytes, "", "cannot read a number"),
        (parse_bandwidth, "GB/s", "expected a bandwidth e.g. '25 GB/s'"),
        (parse_seconds, "inf s", "cannot read a number"),
        (parse_flops, ".5 TFLOPS", "cannot read a number"),
    ],
)
def test_refusals_say_what_was_expected(parse, text, expected):
    with pytest.raises(ValueError, match="expected") as info:
        parse(text)
    assert expected in str(info.value)


@given(st.text(max_size=12))
def test_any_text_parses_or_raises_value_error(text):
    for parse in (parse_bytes, parse_bandwidth, parse_seconds, parse_flops):
        try:
            assert math.isfinite(parse("1 " + text))
        except ValueError as err:
            assert "expected" in str(err)


def test_a_wrong_unit_in_hardware_names_the_field_and_the_expectation():
    spec = {
        "name": "toy",
        "gpu": {"model": "X", "memory": "16 GiB", "peak_flops": 1e12, "hbm_bandwidth": 1e12},
        "num_gpus": 1,
        "hosts": [{"name": "cpu0", "dram": "64 GB"}],
        "links": [{"a": "gpu0", "b": "cpu0", "bandwidth": "13 GB"}],
    }
    with pytest.raises(InputError) as info:
        load_hardware(spec)
    assert info.value.field == "hardware.links.0.bandwidth"
    assert "not a bandwidth (expected e.g. '25 GB/s')" in info.value.message


def test_pint_is_imported_on_first_uncommon_unit_not_with_the_api():
    code = (
        "import sys, sim.api, sim.units as u\n"
        "assert 'pint' not in sys.modules\n"
        "u.parse_bytes(3); u.fmt_bytes(3)\n"
        "assert u.parse_bytes('1 KiB') == 1024 and u.parse_flops('2 TFLOPS') == 2e12\n"
        "assert 'pint' not in sys.modules\n"
        "assert u.parse_bytes('1 kibibyte') == 1024 and 'pint' in sys.modules\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize(("unit", "base"), sorted(COMMON_UNITS))
def test_common_units_are_pints_factors(unit, base):
    """The units known without pint have the factor pint gives, the same float."""
    assert COMMON_UNITS[(unit, base)] == pint_factor(unit, base)
