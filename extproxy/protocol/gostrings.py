"""Go's reading of JSON strings that are not well-formed Unicode, which msgspec refuses.

kube-scheduler's decoder (encoding/json, ``unquoteBytes``) takes a string holding bytes that are
not UTF-8, or a ``\\ud800`` escape that is half a surrogate pair, and reads each such byte, and
each such escape, as U+FFFD. msgspec raises instead, so a reply the scheduler would have used
was judged undecodable, and in the combined form answered as an error. ``go_strings`` rewrites a
body's string literals as Go reads them; ``as_go_reads`` retries a decoder with it, only after
the decoder failed, so that well-formed bodies cost nothing more.

May import: the standard library, msgspec and ``gojson``. No Django, no I/O, no logging.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Callable, TypeVar

import msgspec

from .gojson import ProtocolError

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_ESCAPE = re.compile(rb"\\u([0-9a-fA-F]{4})|\\.", re.S)
_REPLACEMENT_ESCAPE = b"\\ufffd"


def _utf8_as_go_reads_it(literal: bytes) -> bytes:
    """Each byte that is not part of a UTF-8 sequence as U+FFFD: Go's utf8.DecodeRune gives up
    one byte at a time (Python's "replace" would give one U+FFFD for a cut sequence)."""
    out: list[str] = []
    while True:
        try:
            out.append(literal.decode("utf-8"))
            return "".join(out).encode("utf-8")
        except UnicodeDecodeError as exc:
            out += (literal[: exc.start].decode("utf-8"), "\ufffd" * (exc.end - exc.start))
            literal = literal[exc.end :]


def _lone_surrogates_replaced(literal: bytes) -> bytes:
    """`literal` with each \\uXXXX escape that is a surrogate but not the first half of a pair
    immediately followed by its second (or that second half) written as \\ufffd."""
    escapes = [m for m in _ESCAPE.finditer(literal) if m.group(1) is not None]
    out: list[bytes] = []
    done, k = 0, 0
    while k < len(escapes):
        m = escapes[k]
        unit = int(m.group(1), 16)
        if 0xD800 <= unit <= 0xDFFF:
            pair = (k + 1 < len(escapes) and escapes[k + 1].start() == m.end() and unit <= 0xDBFF
                    and 0xDC00 <= int(escapes[k + 1].group(1), 16) <= 0xDFFF)
            if pair:
                k += 2
                continue
            out += (literal[done : m.start()], _REPLACEMENT_ESCAPE)
            done = m.end()
        k += 1
    if not out:
        return literal
    out.append(literal[done:])
    return b"".join(out)


def _as_go_reads_it(match: re.Match[bytes]) -> bytes:
    literal = match.group(0)
    if not literal.isascii():
        try:
            literal.decode("utf-8")
        except UnicodeDecodeError:
            literal = _utf8_as_go_reads_it(literal)
    if b"\\u" in literal:
        literal = _lone_surrogates_replaced(literal)
    return literal


def go_strings(body: bytes | memoryview) -> bytes | None:
    """`body` with its string literals as Go reads them; None when that changes nothing."""
    data = bytes(body)
    fixed = _STRING.sub(_as_go_reads_it, data)
    return None if fixed == data else fixed


F = TypeVar("F", bound=Callable[..., Any])


def as_go_reads(decoder: F) -> F:
    """`decoder(body, ...)`, and when it fails on a body whose strings Go reads otherwise, the
    same decoder on the body as Go reads it. msgspec's own errors become ProtocolError."""

    @functools.wraps(decoder)
    def decode(body: bytes, *args: Any, **kwargs: Any) -> Any:
        try:
            return decoder(body, *args, **kwargs)
        except (ProtocolError, msgspec.DecodeError) as exc:
            fixed = go_strings(body)
            if fixed is None:
                raise _protocol_error(exc) from None
        try:
            return decoder(fixed, *args, **kwargs)
        except msgspec.DecodeError as exc:
            raise _protocol_error(exc) from None

    return decode  # type: ignore[return-value]


def _protocol_error(exc: Exception) -> ProtocolError:
    return exc if isinstance(exc, ProtocolError) else ProtocolError(f"invalid JSON: {exc}", "syntax")
