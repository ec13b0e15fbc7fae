"""Bytes that cannot be read as JSON, redacted by pattern. Pure, no I/O."""
from __future__ import annotations

import re
from functools import lru_cache

import msgspec

from ..config import RedactionConfig
from .escapes import plain
from .replies import _EDGE
from .text import REDACTED, _cut, _names, _removed, needs_redaction, redact_text, text_needs_redaction

_JSON = msgspec.json.Decoder()
_ANY_VALUE = re.compile(r'("value"\s*:\s*")(?P<v>(?:[^"\\]|\\.)*)(")')
_FLAG_THEN_VALUE = re.compile(r'"(-{1,2}[^"\\=\s]{1,256})"(\s*,\s*")((?:[^"\\]|\\.)*)(")')
RAW_MARK_TEXT = "redacted by pattern: the body could not be read as JSON"


def _json_unescaped(text: str) -> str:
    """A JSON string's content (between its quotes) as the string it stands for; as it is when
    it is not one."""
    if "\\" not in text:
        return text
    try:
        value = _JSON.decode(('"' + text + '"').encode("utf-8", "surrogateescape"))
    except (ValueError, UnicodeError):
        return text
    return value if isinstance(value, str) else text


_CUT_JSON = _cut("v", _json_unescaped)
# Bytes redacted by pattern at most. The free-text patterns take 0.25-0.5 s of CPU a MiB: a
# full-object reply cut short at 64 MiB took the recorder 17 s (2 s with this bound). Beyond
# it, not kept (marked).
RAW_REDACT_MAX = 4 << 20


@lru_cache(maxsize=32)
def _listed_key(names: tuple[str, ...]) -> re.Pattern[str] | None:
    if not names:
        return None
    keys = "|".join(re.escape(name) for name in names)
    return re.compile(rf'("(?:{keys})"\s*:\s*")(?P<v>(?:[^"\\]|\\.)*)(")')


def redact_raw(raw: bytes, rules: RedactionConfig) -> tuple[bytes, list[str]]:
    """Bytes that could not be read as JSON, with what looks like a secret replaced, and a mark
    when anything was (none when nothing was).

    By pattern, so it errs towards redacting more than a decoded Pod would lose (every
    `"value"` string with `envValues`, whatever holds it). Bytes that are not UTF-8 are kept as
    they are around what is replaced. Of bytes that need redacting, only the first
    RAW_REDACT_MAX are kept.
    """
    # Both byte tests: a text reply holding only a credential (`Basic <base64>`) has none of the
    # names needs_redaction looks for.
    if not (needs_redaction(raw, rules) or text_needs_redaction(raw, rules)):
        return raw, []
    marks = [RAW_MARK_TEXT]
    cut = len(raw) > RAW_REDACT_MAX
    if cut:
        marks.append(f"only the first {RAW_REDACT_MAX} of its {len(raw)} bytes are kept: "
                     "the rest is too long to redact by pattern")
        raw = raw[: RAW_REDACT_MAX + _EDGE]  # redacted past the cut, then cut (bounded_text)
    # Names and values as a reader sees them (`"pass\\u0077ord"`, `"v\\u0061lue"`); kept so only
    # when something was redacted.
    text = plain(raw.decode("utf-8", "surrogateescape"))
    out = text
    listed = _listed_key(rules.drop_annotations + rules.redact_annotations + rules.redact_labels)
    if listed is not None:
        out = listed.sub(_CUT_JSON, out)
    if rules.env_values:
        out = _ANY_VALUE.sub(_CUT_JSON, out)
    names = _names(rules.name_patterns)

    def flag_value(m: re.Match[str]) -> str:  # ["--token", "x"]: the value is the next string
        if names.search(m.group(1)):
            if m.group(3) != REDACTED:
                _removed(_json_unescaped(m.group(3)))
            return m.group(0)[: m.start(3) - m.start(0)] + REDACTED + m.group(4)
        return m.group(0)

    out = redact_text(_FLAG_THEN_VALUE.sub(flag_value, out), rules)
    if out == text and not cut:
        return raw, []
    kept = out.encode("utf-8", "surrogateescape")
    return (kept[:RAW_REDACT_MAX] if cut else kept), marks
