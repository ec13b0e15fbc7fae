"""Characters written as escapes, read as the characters they stand for. Pure, no I/O.

JSON's `\\uXXXX` (and `\\/`): a JSON writer may escape any character, plain letters included
(`\\u0068unter2` is `hunter2`), and a backend that quotes JSON in a text escapes it once more
(`\\\\u0068unter2`); some writers (PHP's, some Java ones) write every `/` as `\\/`, and base64
values and URLs have slashes. A URL's `%XX` (`PERCENT`): a backend that builds a URL or a form
body out of a value writes its reserved characters so (`p%40ss`), and Go's HTTP client quotes the
URL in every error it returns. A secret written so has none of the characters a pattern or a
search looks for. Everything here first tests for an escape (`Reading.has`: a one-character
search, then an expression only when that character is there), so a text with none costs that.
"""
from __future__ import annotations

import bisect
import re
from typing import Callable, Iterator

# Characters one escaped character takes at most: a surrogate pair, each half after two backslashes.
WIDEST = 14
# One escape, at any depth of quoting (one backslash or more; an expression that starts with a
# plain backslash is searched for ~50 times faster than one that starts with `\\+`): a surrogate
# pair (a character past U+FFFF) first, else one UTF-16 unit (hex digits in either case), else a slash.
_ESCAPE = re.compile(r"\\\\*(?:u(?:(d[89ab][0-9a-f]{2})\\+u(d[c-f][0-9a-f]{2})|([0-9a-f]{4}))|/)", re.IGNORECASE)
# One character's UTF-8 bytes as %XX (an invalid sequence is not read).
_PERCENT = re.compile(r"%(?:[0-7][0-9a-f]|[cd][0-9a-f]%[89ab][0-9a-f]|e[0-9a-f](?:%[89ab][0-9a-f]){2}"
                      r"|f[0-7](?:%[89ab][0-9a-f]){3})", re.IGNORECASE)
# What reading an escape must not produce where the text is kept (`plain`): a quote, a backslash
# or a control character would change where a JSON string ends, or what the next escape is.
_STRUCTURAL = frozenset('"\\') | frozenset(map(chr, range(0x20)))


def _json_char(m: re.Match[str]) -> str:
    if m.group(0)[-1] == "/":
        return "/"
    if m.group(3) is not None:
        return chr(int(m.group(3), 16))  # a lone surrogate stays one (as bytes that were not UTF-8 do)
    high, low = int(m.group(1), 16), int(m.group(2), 16)
    return chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))


def _percent_char(m: re.Match[str]) -> str:
    char = bytes.fromhex(m.group(0).replace("%", "")).decode("utf-8", "surrogateescape")
    return char if len(char) == 1 else m.group(0)  # an overlong form: not a character, left as it is


class Reading:
    """One way of writing characters as escapes: where one may be (`lead`, one character, then
    `mark`), the escape, and what it reads as."""

    def __init__(self, lead: str, mark: str, escape: re.Pattern[str], char: Callable[[re.Match[str]], str],
                 widest: int) -> None:
        self.lead, self.lead_bytes = lead, lead.encode()
        self._mark, self._mark_bytes = re.compile(mark), re.compile(mark.encode())
        self.escape, self.char, self.widest = escape, char, widest

    def has(self, text: str) -> bool:
        return self.lead in text and self._mark.search(text) is not None

    def has_bytes(self, raw: bytes) -> bool:
        return self.lead_bytes in raw and self._mark_bytes.search(raw) is not None

    def read(self, text: str) -> str:
        """`text` with every escape read (for searching in; not to be kept: a quote may appear)."""
        return self.escape.sub(self.char, text) if self.has(text) else text

    def near(self, text: str, reach: int) -> Iterator[str]:
        """The parts of `text` within `reach` characters of an escape (overlapping ones as one),
        each read: what a search through escapes need look at. A text of 1 MB with one escape in
        it is read 2 x `reach` characters of, not whole."""
        start = end = -1
        for m in self.escape.finditer(text):
            low, high = max(0, m.start() - reach), m.end() + reach
            if low <= end:
                end = high
                continue
            if end >= 0:
                yield self.read(text[start:end])
            start, end = low, high
        if end >= 0:
            yield self.read(text[start:end])

    def sub_through(self, pattern: re.Pattern[str], replacement: str, text: str) -> str:
        """`text` with each match of `pattern` in `read(text)` replaced by `replacement` where it
        is written in `text` (escapes and all); characters of `text` outside a match kept as written."""
        if not self.has(text):
            return pattern.sub(replacement, text)
        # Where each escape is: its start in the read text, and the characters it saved before it.
        starts: list[int] = []
        saved: list[int] = [0]
        pieces: list[str] = []
        at = 0
        for m in self.escape.finditer(text):
            pieces.append(text[at:m.start()])
            char = self.char(m)
            starts.append(m.start() - saved[-1])
            saved.append(saved[-1] + len(m.group(0)) - len(char))
            pieces.append(char)
            at = m.end()
        pieces.append(text[at:])

        def written(index: int) -> int:  # where the read text's character `index` starts in `text`
            return index + saved[bisect.bisect_left(starts, index)]

        out: list[str] = []
        at = 0
        for m in pattern.finditer("".join(pieces)):
            if m.end() > m.start():
                start, end = written(m.start()), written(m.end())
                out += [text[at:start], replacement]
                at = end
        return "".join(out + [text[at:]]) if out else text


JSON = Reading("\\", r"\\[u/]", _ESCAPE, _json_char, WIDEST)
PERCENT = Reading("%", r"%[0-9a-fA-F]{2}", _PERCENT, _percent_char, 12)  # %F0%9F%94%90: 12 for one
READINGS = (JSON, PERCENT)


def has_escape(text: str) -> bool:
    return JSON.has(text)


def _plain_char(m: re.Match[str]) -> str:
    char = _json_char(m)
    # A lone surrogate (`\udc00`, which Go's decoder reads as U+FFFD) stays written as it is:
    # read, it is a character UTF-8 cannot carry, and the kept text could not be stored.
    return m.group(0) if char in _STRUCTURAL or "\ud800" <= char <= "\udfff" else char


def plain(text: str) -> str:
    """`text` with every JSON escape read but those of quotes, backslashes and control characters:
    the same JSON (or text quoting JSON) with its names and values as a reader sees them."""
    return _ESCAPE.sub(_plain_char, text) if JSON.has(text) else text
