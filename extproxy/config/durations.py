"""Go durations (``time.ParseDuration``, with Go's error texts) and ages with days ("7d12h").

May import: the standard library only. No Django, no I/O.
"""
from __future__ import annotations

import re
from fractions import Fraction

INT64_MAX = 2**63 - 1  # Go's int64: the bound of durations and of integer fields

_DURATION_UNITS_NS = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,  # micro sign
    "\u03bcs": 1_000,  # Greek mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}
_DURATION_PART = re.compile(r"(\d*)(?:\.(\d*))?([^\d.]*)")


def parse_go_duration(text: str) -> float:
    """Seconds for a Go `time.ParseDuration` string; ValueError (with Go's wording) otherwise."""
    if not isinstance(text, str):
        raise ValueError(f"time: invalid duration {text!r}: not a string")
    invalid = f'time: invalid duration "{text}"'
    rest, negative = text, False
    if rest[:1] in ("-", "+"):
        negative, rest = rest[0] == "-", rest[1:]
    if rest == "0":
        return 0.0
    if not rest:
        raise ValueError(invalid)
    total_ns = 0
    while rest:
        match = _DURATION_PART.match(rest)
        assert match is not None  # every part of the pattern may be empty: it always matches
        whole, frac, unit = match.group(1), match.group(2), match.group(3)
        if not whole and not frac:
            raise ValueError(invalid)
        if not unit:
            raise ValueError(f'time: missing unit in duration "{text}"')
        if unit not in _DURATION_UNITS_NS:
            raise ValueError(f'time: unknown unit "{unit}" in duration "{text}"')
        value = Fraction(int(whole or "0"))
        if frac:
            value += Fraction(int(frac), 10 ** len(frac))
        total_ns += int(value * _DURATION_UNITS_NS[unit])  # Go truncates sub-nanoseconds
        if total_ns > INT64_MAX:
            raise ValueError(invalid)
        rest = rest[match.end():]
    seconds = total_ns / 1e9
    return -seconds if negative else seconds


_DAYS = re.compile(r"(\d+(?:\.\d*)?|\.\d+)d(.*)", re.DOTALL)


def parse_age(text: str) -> float:
    """A Go duration, or days in front of one: "7d", "1.5d", "7d12h"."""
    match = _DAYS.fullmatch(text) if isinstance(text, str) else None
    if not match:
        return parse_go_duration(text)
    days = float(match.group(1)) * 86400
    return days + (parse_go_duration(match.group(2)) if match.group(2) else 0.0)

