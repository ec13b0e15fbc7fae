"""JSON's `\\uXXXX` escapes (and `\\/`) read as the characters they stand for. Pure, no I/O.

A JSON writer may escape any character, plain letters included (`\\u0068unter2` is `hunter2`),
and a backend that quotes JSON in a text escapes it once more (`\\\\u0068unter2`). A secret
written so has none of the letters a pattern or a search looks for. Some writers (PHP's, some
Java ones) write every `/` as `\\/`, and base64 values and URLs have slashes. Everything here first
tests for a backslash-u or backslash-slash (`has_escape`), so a text with neither costs that test
and nothing more.
"""
from __future__ import annotations

import bisect
import re
from typing import Iterator

# Characters one escaped character takes at most: a surrogate pair, each half after two backslashes.
WIDEST = 14
# One escape, at any depth of quoting (one backslash or more): a surrogate pair (a character past
# U+FFFF) first, else one UTF-16 unit (hex digits in either case), else a slash.
_ESCAPE = re.compile(r"\\\\*(?:u(?:(d[89ab][0-9a-f]{2})\\+u(d[c-f][0-9a-f]{2})|([0-9a-f]{4}))|/)", re.IGNORECASE)
# What reading an escape must not produce where the text is kept (`plain`): a quote, a backslash
# or a control character would change where a JSON string ends, or what the next escape is.
_STRUCTURAL = frozenset('"\\') | frozenset(map(chr, range(0x20)))


# Whether a text has an escape: a backslash first (memchr: ~10 us a MB), then an expression that
# starts with one (~0.3 ms a MB; `"\\u" in text`, a two-character search, took 1.8 ms).
_MARK = re.compile(r"\\[u/]")
_MARK_BYTES = re.compile(rb"\\[u/]")


def has_escape(text: str) -> bool:
    return "\\" in text and _MARK.search(text) is not None


def bytes_have_escape(raw: bytes) -> bool:
    return b"\\" in raw and _MARK_BYTES.search(raw) is not None


def _char(m: re.Match[str]) -> str:
    if m.group(0)[-1] == "/":
        return "/"
    if m.group(3) is not None:
        return chr(int(m.group(3), 16))  # a lone surrogate stays one (as bytes that were not UTF-8 do)
    high, low = int(m.group(1), 16), int(m.group(2), 16)
    return chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))


def unescaped(text: str) -> str:
    """`text` with every escape read (for searching in; not to be kept: a quote may appear)."""
    return _ESCAPE.sub(_char, text) if has_escape(text) else text


def read_near(text: str, reach: int) -> Iterator[str]:
    """The parts of `text` within `reach` characters of an escape (overlapping ones as one), each
    with its escapes read: what a search through escapes need look at. A text of 1 MB with one
    escape in it is read 2 x `reach` characters of, not whole."""
    start = end = -1
    for m in _ESCAPE.finditer(text):
        low, high = max(0, m.start() - reach), m.end() + reach
        if low <= end:
            end = high
            continue
        if end >= 0:
            yield unescaped(text[start:end])
        start, end = low, high
    if end >= 0:
        yield unescaped(text[start:end])


def _plain_char(m: re.Match[str]) -> str:
    char = _char(m)
    return m.group(0) if char in _STRUCTURAL else char


def plain(text: str) -> str:
    """`text` with every escape read but those of quotes, backslashes and control characters:
    the same JSON (or text quoting JSON) with its names and values as a reader sees them."""
    return _ESCAPE.sub(_plain_char, text) if has_escape(text) else text


def sub_through(pattern: re.Pattern[str], replacement: str, text: str) -> str:
    """`text` with each match of `pattern` in `unescaped(text)` replaced by `replacement` where it
    is written in `text` (escapes and all); characters of `text` outside a match kept as written."""
    if not has_escape(text):
        return pattern.sub(replacement, text)
    # Where each escape is: its start in the read text, and the characters it saved before it.
    starts: list[int] = []
    saved: list[int] = [0]
    pieces: list[str] = []
    at = 0
    for m in _ESCAPE.finditer(text):
        pieces.append(text[at:m.start()])
        char = _char(m)
        starts.append(m.start() - saved[-1])
        saved.append(saved[-1] + len(m.group(0)) - len(char))
        pieces.append(char)
        at = m.end()
    pieces.append(text[at:])
    read = "".join(pieces)

    def written(index: int) -> int:  # where the read text's character `index` starts in `text`
        return index + saved[bisect.bisect_left(starts, index)]

    out: list[str] = []
    at = 0
    for m in pattern.finditer(read):
        if m.end() == m.start():
            continue
        start, end = written(m.start()), written(m.end())
        out += [text[at:start], replacement]
        at = end
    if not out:
        return text
    out.append(text[at:])
    return "".join(out)
