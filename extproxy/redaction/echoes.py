"""A request's secrets where the same call's texts repeat them (`Echoes`). Pure, no I/O."""
from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any, Iterable

import msgspec

from .. import bodyformat
from ..config import RedactionConfig
from .escapes import READINGS, WIDEST, Reading
from .raw import _json_unescaped
from .text import REDACTED, bounded_text

# --- a request's secrets where the same call's texts repeat them ------------------------------
# A backend can echo a value it was sent in a form no pattern knows: Go's `%v` of a map
# (`map[PASSWORD:hunter2]`), YAML inside a longer message, a JSON fragment, the bare value. The
# values redaction removed from a call's request are therefore also removed, as they are, from
# that call's stored texts (rows.py: its error, findings, reasons, the reply's free-text fields).
#
# Shorter values are left alone: with `envValues` every env value is redacted, most of them
# words such as `true`, `info`, `WARN` or `8080`, and removing those wherever they occur would
# take words out of every reason. Six characters keep a short password (`hunter2`, `s3cr3t`) and
# leave every value of five characters or fewer (`debug`, `false`, `30000`) in place.
ECHO_MIN_CHARS = 6
# Values kept at most, longest first (the rest are not looked for): the search over a call's
# texts is one expression of them all.
ECHO_MAX_VALUES = 256
# Characters of a value looked for at most (a call's error text is kept to as many): a longer one
# (a certificate) is looked for by its head, and line by line.
ECHO_MAX_CHARS = 16384
ECHO_MARK = " redacted: repeats a value redacted from the request"
_FEW_FORMS = 24  # forms of the values looked for one by one (more: one expression)
_SCHEME_VALUE = re.compile(r"(?:Bearer|Token|Basic)\s+(\S+)$", re.IGNORECASE)
_GO_HTML = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def _candidates(value: str) -> Iterable[str]:
    """What of a removed value is looked for: the value; unquoted (`--password 'x y'`); the
    credential after its scheme word (a header `Bearer x`); JSON-unescaped; each line of one
    with several (a key's text)."""
    yield value
    bare = value.strip()
    if len(bare) > 1 and bare[0] == bare[-1] and bare[0] in "'\"":
        bare = bare[1:-1]
    yield bare
    scheme = _SCHEME_VALUE.match(bare)
    if scheme:
        yield scheme.group(1)
    if "\\" in bare:
        yield _json_unescaped(bare)
    if "\n" in bare:
        yield from (line.strip() for line in bare.splitlines())


def _escaped(text: str) -> tuple[str, ...]:
    """`text` and the forms a JSON encoder writes it in: escaped (Go's also escapes <, > and &;
    Python's by default every character past ASCII). Lone surrogates (bytes that were not UTF-8)
    are kept as they are."""
    plain = json.dumps(text, ensure_ascii=False)[1:-1]
    go = "".join(_GO_HTML.get(ch, ch) for ch in plain)
    return tuple(dict.fromkeys((text, plain, go, json.dumps(text)[1:-1])))


class Echoes:
    """The values removed from one call's request, found and removed in its other texts."""

    def __init__(self, values: tuple[str, ...]) -> None:
        self.values = values
        texts = sorted({form for value in values for form in _escaped(value)}, key=len, reverse=True)
        self.longest = max(map(len, texts), default=0)
        # In a JSON body a text is written escaped once more (a JSON fragment inside a reason).
        raw = sorted({form.encode("utf-8", "surrogatepass") for text in texts for form in _escaped(text)},
                     key=len, reverse=True)
        self._text = re.compile("|".join(map(re.escape, texts)))
        # Whether a text holds one: `in` for each of a few (~1 us per 1 kB each); an alternation
        # of many in one expression costs ~20 us per 1 kB whatever their number.
        few = len(raw) <= _FEW_FORMS
        self._texts = tuple(texts) if few else None
        self._raw = tuple(raw) if few else None
        self._bytes = re.compile(b"|".join(map(re.escape, raw)))
        self._raw_texts = [form.decode("utf-8", "surrogatepass") for form in raw]
        self._read: dict[Reading, re.Pattern[str]] = {}  # made when first a text has such escapes (_through)
        self._longest_form = max(map(len, self._raw_texts), default=0)

    def _through(self, reading: Reading) -> re.Pattern[str]:
        """Every form, read, as one expression: searched for in a text with its escapes read
        (escapes.py), so that one written with any (`\\u0068unter2`, `\\u0068\\u0075...`, a
        surrogate pair, upper- or lower-case hex, escaped once more in a JSON body; `%68unter2`,
        `p%40ss`) is found."""
        if reading not in self._read:
            # A value that is itself escapes (`\\u0041...`) may read as fewer characters than are looked for.
            forms = {read for read in map(reading.read, self._raw_texts) if len(read) >= ECHO_MIN_CHARS}
            self._read[reading] = re.compile("|".join(map(re.escape, sorted(forms, key=len, reverse=True))) or r"(?!x)x")
        return self._read[reading]

    def _as_written(self, text: str) -> bool:
        return self._text.search(text) is not None if self._texts is None else any(f in text for f in self._texts)

    def _in_read(self, text: str, reading: Reading) -> bool:
        """Whether `text`, its escapes read, holds a form: only the parts near an escape are read
        (a match without one is a form as written, found by the search before this)."""
        found = self._through(reading).search
        return any(found(part) is not None for part in reading.near(text, self._longest_form * reading.widest))

    def _read_holds(self, text: str) -> list[Reading]:
        """The readings through which `text` holds a form (a test of two characters when it has none:
        the usual case)."""
        if "\\" not in text and "%" not in text:
            return []
        return [reading for reading in READINGS if reading.has(text) and self._in_read(text, reading)]

    def in_text(self, text: str) -> bool:
        if not text:
            return False
        return self._as_written(text) or bool(self._read_holds(text))

    def in_bytes(self, raw: bytes) -> bool:
        """Whether `raw` (UTF-8 text, or JSON holding it) may repeat a value: written plainly,
        escaped as JSON encoders write it, or with any character written as a `\\u` or `%XX` escape."""
        if not raw:
            return False
        if (any(form in raw for form in self._raw) if self._raw is not None else self._bytes.search(raw) is not None):
            return True
        if (b"\\" not in raw and b"%" not in raw) or not any(reading.has_bytes(raw) for reading in READINGS):
            return False
        return bool(self._read_holds(raw.decode("utf-8", "surrogateescape")))

    def apart_from(self, names: Iterable[str]) -> "Echoes | None":
        """Without the values that are, or are part of, one of `names`: the names a record keeps
        in the clear (the Pod's name, namespace and UID, the node names) are shown anyway, and a
        node's name in a reason must stay readable."""
        shown = "\n".join(names)
        kept = tuple(value for value in self.values if value not in shown) if shown else self.values
        if kept == self.values:
            return self
        return _echoes(kept) if kept else None

    def text(self, text: str) -> str:
        if text and self._as_written(text):
            text = self._text.sub(REDACTED, text)
        for reading in self._read_holds(text) if text else ():
            text = reading.sub_through(self._through(reading), REDACTED, text)
        return text

    def bounded(self, text: str, rules: RedactionConfig, limit: int, margin: int | None = None) -> str:
        """redaction.bounded_text, and the values removed first: a value that the redacted
        window's end cuts through is found whole, then cut (written with escapes, a value takes
        up to WIDEST characters a character; its first escape is within its length)."""
        window = limit + (limit if margin is None else margin)
        beyond = self.longest
        if any(reading.has(text[: window + beyond + 1]) for reading in READINGS):
            beyond *= WIDEST
        return bounded_text(self.text(text[: window + beyond])[:window], rules, limit, margin)

    def in_call(self, trace: Any) -> bool:
        """Whether a recorded call's replies or errors (its parts' too: a Trace's) may repeat a
        value. The call's reasons and error texts come from those: when none does, neither do they."""
        return any(self.in_bytes(t.response_body) or self.in_text(t.transport_error)
                   for t in [trace, *trace.backend_calls])

    def in_reasons(self, decisions: Iterable[Any]) -> bool:
        reasons = {d.reason for d in decisions if d.reason}
        return bool(reasons) and self.in_text("\n".join(reasons))

    def strings(self, value: Any) -> Any:
        """Every string in a decoded JSON value with the values removed, keys aside."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.strings(item) for item in value]
        if isinstance(value, dict):
            return {key: self.strings(item) for key, item in value.items()}
        return value


@lru_cache(maxsize=256)
def _echoes(values: tuple[str, ...]) -> Echoes:
    return Echoes(values)  # a Pending Pod's every retry removes the same values


def echoes(removed: list[str]) -> Echoes | None:
    """What to remove from a call's texts, given the values removed from its request (a
    `collecting()` list); None when there is nothing (the usual case: costs a test of `removed`)."""
    if not removed:
        return None
    found = _looked_for(tuple(removed))
    return _echoes(found[:ECHO_MAX_VALUES]) if found else None


@lru_cache(maxsize=1024)
def _looked_for(removed: tuple[str, ...]) -> tuple[str, ...]:
    """The candidates of removed values long enough to look for, longest first."""
    found = set()
    for value in set(removed):
        for candidate in _candidates(value):
            if len(candidate) >= ECHO_MIN_CHARS and REDACTED not in candidate and candidate not in REDACTED:
                if len(candidate) <= ECHO_MAX_CHARS:
                    found.add(candidate)
                else:
                    found.add(candidate[:ECHO_MAX_CHARS])  # its head at least (its lines too)
    return tuple(sorted(found, key=lambda value: (-len(value), value)))


def echo_redactor(redact: bodyformat.Redactor, echoes: Echoes) -> bodyformat.Redactor:
    """`redact`, and then each string of a free-text field with the request's removed values
    removed where it repeats them (marked as such). Pods (OBJECT_FIELDS) as `redact` has them."""

    def both(name: str, value: bytes) -> tuple[bytes, list[str]] | None:
        answer = redact(name, value)
        if name in bodyformat.OBJECT_FIELDS:
            return answer
        current = value if answer is None else answer[0]
        if not echoes.in_bytes(current):
            return answer
        original = msgspec.json.decode(value)
        kept = msgspec.json.decode(current)
        scrubbed = echoes.strings(kept)
        if scrubbed == kept:
            return answer
        marks = list(answer[1]) if answer is not None else []
        echoed = [mark[: -len(" redacted")] + ECHO_MARK if mark.endswith(" redacted") else mark
                  for mark in bodyformat.redaction_marks(kept, scrubbed)]
        marks += [mark for mark in echoed if mark not in marks]
        if answer is None and msgspec.json.encode(original) != value:
            marks.append(" re-encoded after redaction: spacing and escapes may differ")
        return msgspec.json.encode(scrubbed), marks

    return both
