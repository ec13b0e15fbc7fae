"""Trace.not_called: the one answer to "was this part of a combined call sent at all?", asked by
the engine (no latency observed for a part never sent) and the shadow process (no call to
mirror). Both asked it of the findings with their own copy of the same test."""
from __future__ import annotations

from extproxy.recording.trace import NOT_CALLED, decode_trace, encode_trace
from tests.test_recorder import make_trace


def test_a_part_with_the_not_called_finding_was_not_called_and_keeps_it_through_the_spool():
    part = make_trace(findings=[{"kind": "reply-truncated", "detail": "x"},
                                {"kind": NOT_CALLED, "detail": "extproxy did not call this backend"}])
    assert part.not_called
    assert decode_trace(encode_trace(part)).not_called


def test_a_part_without_it_was_called():
    assert not make_trace().not_called
    assert not make_trace(findings=[{"kind": "reply-truncated", "detail": "x"}]).not_called
