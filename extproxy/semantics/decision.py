"""The words of a verdict: a call's outcome, a node's result, and the Decision that carries it.

The values are the strings stored since the first release (decisions are stored as JSON objects
with the keys node, backend, result, reason, score, weighted_score; the dashboard and the API
read them back as plain objects), so an enum member and its stored string are interchangeable.

May import: the standard library, msgspec and ``extproxy.protocol``. No Django, no I/O.
"""

from __future__ import annotations

import msgspec

from extproxy.protocol import Choices


class Outcome(Choices):
    """How a call ended. The judge says ok or error; timeout is the caller's (no reply to judge)."""

    OK = "ok"
    ERROR = "error"
    TIMEOUT = "timeout"


class Result(Choices):
    """What one backend decided about one node."""

    PASSED = "passed"
    FAILED = "failed"
    UNRESOLVABLE = "unresolvable"
    SCORED = "scored"


class Decision(msgspec.Struct):
    """One backend's verdict on one node; encodes to the stored JSON object, keys in this order."""

    node: str
    backend: str
    result: Result
    reason: str | None = None
    score: int | None = None
    weighted_score: int | None = None
