"""An export's range as typed (`since`, `until`): read before the filters read it, so that the
range selected is the range meant. Used by /api/export/ (and so the dashboard's export form),
/api/audit/export/ and `manage.py export`.

- **Digits past the microsecond** (nanoseconds, as Go and Kubernetes write times) are rounded
  UP to the microsecond, for both ends. Stored times are whole microseconds: a stored time t is
  at or after `since` (inclusive) exactly when it is at or after `since` rounded up, and before
  `until` (exclusive) exactly when it is before `until` rounded up. Cut down, as the parser
  cuts them, `since` took in a call stored in the microsecond before it, and `until` left out
  one stored in the microsecond it names.
- **An unencoded `+`** before the offset (`since=2026-12-07T10:00:00+01:00` typed into a URL)
  arrives as a space. A space followed by an offset's hours (and minutes), right after a time,
  can mean nothing else: it is read as `+`. A minus sign is never changed in transit.

Anything else is left as given: the filters refuse what they cannot read, as before.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

RANGE_FIELDS = ("since", "until")
MICROSECOND_DIGITS = 6

_TIME = re.compile(
    r"(?P<date>\d{4}-\d{2}-\d{2})[Tt ](?P<clock>\d{2}:\d{2}(?::\d{2})?)(?:[.,](?P<fraction>\d+))?"
    r"(?P<offset>[Zz]|[+-]\d{2}(?::?\d{2})?| \d{2}(?::?\d{2})?)?"
)


class TimeProblem(ValueError):
    """A time that is read, and cannot be kept (past the calendar's end once rounded up)."""

    field = ""  # since or until, when known


def as_meant(text: str) -> str:
    """`text` as the filters should read it: itself, unless it has digits past the microsecond
    or a `+` that arrived as a space; then the same moment in ISO 8601, rounded up to the
    microsecond. Raises TimeProblem when rounding up leaves the calendar."""
    found = _TIME.fullmatch(text.strip())
    if found is None:
        return text
    fraction, offset = found["fraction"] or "", found["offset"] or ""
    spaced = offset.startswith(" ")
    if not spaced and len(fraction) <= MICROSECOND_DIGITS:
        return text
    offset = "+" + offset[1:] if spaced else ("+00:00" if offset in ("Z", "z") else offset)
    micro = f".{fraction[:MICROSECOND_DIGITS].ljust(MICROSECOND_DIGITS, '0')}" if fraction else ""
    try:
        moment = datetime.fromisoformat(f"{found['date']}T{found['clock']}{micro}{offset}")
    except ValueError:  # a month 13, an offset of 25 hours: the filters say what is wrong
        return text
    if fraction[MICROSECOND_DIGITS:].strip("0"):
        try:
            moment += timedelta(microseconds=1)
        except OverflowError:
            raise TimeProblem("past the last microsecond a time can have, once rounded up to microseconds "
                              "(stored times have no finer digits)") from None
    return moment.isoformat()


def range_as_meant(data: Mapping[str, Any]) -> dict[str, Any] | None:
    """`data`'s since and until as meant (`as_meant`), the other values as given; None when
    none changes. Raises TimeProblem, its `field` set."""
    changed = {}
    for name in RANGE_FIELDS:
        value = data.get(name)
        if isinstance(value, str):
            try:
                meant = as_meant(value)
            except TimeProblem as exc:
                exc.field = name
                raise
            if meant != value:
                changed[name] = meant
    return changed or None
