"""Go's reading of JSON strings that are not well-formed Unicode, which msgspec refuses.

kube-scheduler's decoder (encoding/json, ``unquoteBytes``) takes a string holding bytes that are
not UTF-8, or a ``\\ud800`` escape that is half a surrogate pair, and reads each such byte, and
each such escape, as U+FFFD. msgspec raises instead, so a reply the scheduler would have used
was judged undecodable, and in the combined form answered as an error. ``go_strings`` rewrites a
body's strings as Go reads them; ``as_go_reads`` retries a decoder with it, only after
the decoder failed, so that well-formed bodies cost nothing more.

May import: the standard library, msgspec and ``gojson``. No Django, no I/O, no logging.
"""

from __future__ import annotations

import codecs
import functools
import re
from typing import Any, Callable, TypeVar

import msgspec

from .gojson import ProtocolError

_REPLACEMENT_ESCAPE = b"\\ufffd"
SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
# A surrogate escape, and the low half that may follow it. Whether its backslash is itself
# escaped (text "\\\\ud800") is told by the run of backslashes before it (_escaped).
_SURROGATE = re.compile(rb"\\u([dD][89a-fA-F][0-9a-fA-F]{2})(\\u[dD][c-fC-F][0-9a-fA-F]{2})?")
_CHUNK = 1 << 20  # bytes checked for UTF-8 at a time: no copy of a large body as text
# Odd units (bytes that are no UTF-8, surrogate escapes) read as Go reads them, at most: each
# costs a Python call, and a body of nothing else (16 M of them: seconds of one core) is no
# scheduler's. A body with more is refused as msgspec refuses it, unlike Go.
MAX_ODD = 1 << 16


def _each_byte_fffd(error: UnicodeError) -> tuple[bytes, int]:
    # Go's utf8.DecodeRune gives up one byte at a time: one U+FFFD per byte that is no rune.
    # (Called once per run of such bytes, as surrogateescape decoded them; the UTF-8 encoder
    # takes a replacement that is not ASCII only as bytes.)
    assert isinstance(error, UnicodeEncodeError)
    return "\ufffd".encode() * (error.end - error.start), error.end


codecs.register_error("extproxy-go-fffd", _each_byte_fffd)


def _is_utf8(data: bytes) -> bool:
    if data.isascii():
        return True
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        for start in range(0, len(data), _CHUNK):
            decoder.decode(data[start : start + _CHUNK])
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


def _escaped(data: bytes, at: int) -> bool:
    """Whether the backslash at `at` is escaped: an odd run of backslashes before it."""
    run = 0
    while at - run - 1 >= 0 and data[at - run - 1] == 0x5C:
        run += 1
    return run % 2 == 1


def _pair_or_replacement(m: re.Match[bytes]) -> bytes:
    first, low = m.group(1), m.group(2)
    if _escaped(m.string, m.start()):  # text "ud800": the low half after it, if any, is alone
        return b"\\u" + first + (_REPLACEMENT_ESCAPE if low is not None else b"")
    if low is not None and first[1:2] in b"89abAB":  # a high half and its low half: a pair
        return m.group(0)
    # Go's unquote: a half alone is U+FFFD; so is a low half after a low half
    return _REPLACEMENT_ESCAPE + (_REPLACEMENT_ESCAPE if low is not None else b"")


def go_strings(body: bytes | memoryview) -> bytes | None:
    """`body` with its strings as Go reads them; None when that changes nothing.

    Each byte that is no UTF-8 becomes U+FFFD (Go's utf8.DecodeRune gives up one byte at a
    time; outside a string such a byte is no JSON either way), and each surrogate escape that
    is not half of a pair becomes \\ufffd. Looked for first, in C: a bad body with neither, the
    usual one, costs a regex search and a UTF-8 check, milliseconds for tens of MB."""
    data = fixed = bytes(body)
    if not _is_utf8(data):
        if len(data) - len(data.decode("utf-8", "ignore").encode()) > MAX_ODD:
            return None
        fixed = data.decode("utf-8", "surrogateescape").encode("utf-8", "extproxy-go-fffd")
    if SURROGATE_ESCAPE.search(fixed):
        if any(n >= MAX_ODD for n, _ in enumerate(SURROGATE_ESCAPE.finditer(fixed))):  # n from 0
            return None
        fixed = _SURROGATE.sub(_pair_or_replacement, fixed)
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
