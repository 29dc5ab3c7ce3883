"""Parsing human quantities: durations (``500ms``, ``30s``, ``2m``) and rates (``4/s``).

Durations are returned as integer nanoseconds; a bare number means seconds. Rates are requests per
second as floats; a bare number means per second.
"""

from __future__ import annotations

import math
import re

MAX_DURATION_NS = 366 * 86_400 * 1_000_000_000  # a year: anything longer is a typo
MAX_RATE_PER_S = 1_000_000.0

_DURATION_UNITS_NS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "min": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_RATE_UNITS_PER_S = {"s": 1.0, "sec": 1.0, "m": 1 / 60, "min": 1 / 60, "h": 1 / 3600}
_NUMBER = r"([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"
_DURATION_RE = re.compile(rf"^\s*{_NUMBER}\s*([a-zµ]*)\s*$")
_RATE_RE = re.compile(rf"^\s*{_NUMBER}\s*(?:/\s*([a-z]+)|rps|req/s)?\s*$")


def parse_duration_ns(value: object) -> int:
    """``"500ms"`` -> 500_000_000; ``1.5`` -> 1_500_000_000. Negative or unknown units raise ValueError."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration, got {value!r}")
    if isinstance(value, (int, float)):
        return _duration_from_seconds(float(value), value)
    if not isinstance(value, str):
        raise ValueError(f"expected a duration such as 30s or 500ms, got {value!r}")
    match = _DURATION_RE.match(value)
    if not match:
        raise ValueError(f"cannot read {value!r} as a duration (examples: 30s, 500ms, 2m, 1.5)")
    number, unit = match.groups()
    if unit not in _DURATION_UNITS_NS and unit != "":
        raise ValueError(f"unknown duration unit {unit!r} in {value!r} (use ns, us, ms, s, m, h)")
    seconds = float(number) * _DURATION_UNITS_NS.get(unit, 1_000_000_000) / 1_000_000_000
    return _duration_from_seconds(seconds, value)


def _duration_from_seconds(seconds: float, written: object) -> int:
    if not math.isfinite(seconds):
        raise ValueError(f"duration must be a finite number, got {written!r}")
    if seconds < 0:
        raise ValueError(f"duration must not be negative, got {written!r}")
    if seconds * 1e9 > MAX_DURATION_NS:  # before rounding: 1e308 s would overflow it
        raise ValueError(f"duration {written!r} is over a year")
    return round(seconds * 1_000_000_000)


def parse_rate_per_s(value: object) -> float:
    """``"4/s"`` -> 4.0; ``"120/m"`` -> 2.0; ``20`` -> 20.0."""
    if isinstance(value, bool):
        raise ValueError(f"expected a rate, got {value!r}")
    if isinstance(value, (int, float)):
        return _checked_rate(float(value), value)
    if not isinstance(value, str):
        raise ValueError(f"expected a rate such as 20 or 4/s, got {value!r}")
    match = _RATE_RE.match(value)
    if not match:
        raise ValueError(f"cannot read {value!r} as a rate (examples: 20, 4/s, 120/m)")
    number, unit = match.groups()
    if unit is not None and unit not in _RATE_UNITS_PER_S:
        raise ValueError(f"unknown rate unit {unit!r} in {value!r} (use /s, /m, /h)")
    return _checked_rate(float(number) * _RATE_UNITS_PER_S.get(unit or "s", 1.0), value)


def _checked_rate(rate: float, written: object) -> float:
    if not math.isfinite(rate):
        raise ValueError(f"rate must be a finite number, got {written!r}")
    if rate > MAX_RATE_PER_S:
        raise ValueError(f"rate {written!r} is over {MAX_RATE_PER_S:g} requests/s")
    return rate


def format_duration_ns(ns: int) -> str:
    """Shortest exact-ish human form, for echoing config back: 1_500_000_000 -> ``1.5s``."""
    for unit, size in (
        ("h", 3_600_000_000_000),
        ("m", 60_000_000_000),
        ("s", 1_000_000_000),
        ("ms", 1_000_000),
        ("us", 1_000),
    ):
        if ns >= size:
            return f"{ns / size:g}{unit}"
    return f"{ns}ns"


def figure(x: float, unit: str = "") -> str:
    """A measured figure as a verdict's reason writes it: 581.119 ms -> ``581 ms``, 4.731 ->
    ``4.73``, 0.05 -> ``0.05``; whole numbers above 100, so a reader compares at a glance."""
    if x != x:  # NaN
        return "-"
    text = f"{x:.0f}" if abs(x) >= 100 else f"{x:.1f}" if abs(x) >= 10 else f"{x:.3g}"
    return f"{text} {unit}" if unit else text


# The percentiles every summary reports, and their names: "p99" -> 99.0, "p999" -> 99.9.
# Summaries, SLA fields and regression metrics all use these names.
PERCENTILES = (50.0, 90.0, 95.0, 99.0, 99.9)
PERCENTILE_NAMES = {"p" + (f"{p:g}".replace(".", "")): p for p in PERCENTILES}
