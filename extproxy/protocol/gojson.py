"""Go's encoding/json, reproduced on msgspec: the rules every extender message is decoded by.

Owns: finding the first JSON value of a body (``EOF`` for an empty one, bytes after the value
ignored), splitting objects into (key, raw value) pairs with duplicates kept, Go's key matching
(exact field name first, then case-insensitive with Go's folding of the Kelvin sign and long s),
and the scalar/list/map readers with Go's type checks and error texts
(``json: cannot unmarshal number 5.5 into Go struct field HostPriority.Score of type int64``).
Every failure raises :class:`ProtocolError`.

May import: the standard library and msgspec only. No Django, no I/O, no logging.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

import msgspec

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


class ProtocolError(ValueError):
    """A body that kube-scheduler's decoder would reject.

    ``kind`` classifies the failure: ``"eof"`` (empty/whitespace body), ``"syntax"`` (invalid or
    truncated JSON), ``"type"`` (a JSON type Go cannot store in the field), ``"float-score"`` /
    ``"string-score"`` (a non-integer ``HostPriority.Score``), ``"int-range"`` (integer outside
    int64).
    """

    def __init__(self, message: str, kind: str = "type") -> None:
        super().__init__(message)
        self.kind = kind


# ---------------------------------------------------------------------------------------------
# Low-level JSON helpers (Go encoding/json semantics on top of msgspec)
# ---------------------------------------------------------------------------------------------

_Buf = bytes | memoryview
_WS = b" \t\r\n"
_WS_RE = re.compile(rb"[ \t\r\n]*")
_STR_RE = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_INT_RE = re.compile(rb"-?(?:0|[1-9][0-9]*)\Z")
_POS_RE = re.compile(r"\(byte (\d+)\)")
_RAW_DICT = dict[str, msgspec.Raw]
_raw_dict_decoder = msgspec.json.Decoder(_RAW_DICT)
_raw_list_decoder = msgspec.json.Decoder(list[msgspec.Raw])
_raw_decoder = msgspec.json.Decoder(msgspec.Raw)
_any_decoder = msgspec.json.Decoder()
_key_encoder = msgspec.json.Encoder()


def _skip_ws(buf: memoryview, pos: int) -> int:
    """Index of the first non-whitespace byte at or after ``pos``."""
    m = _WS_RE.match(buf, pos)
    assert m is not None  # [ \t\r\n]* always matches, possibly empty
    return m.end()


def _err_pos(exc: Exception) -> int | None:
    m = _POS_RE.search(str(exc))
    return int(m.group(1)) if m else None


def _first_value(body: _Buf) -> memoryview:
    """The first JSON value of ``body`` (surrounding whitespace removed), like json.Decoder."""
    view = memoryview(body).cast("B") if not isinstance(body, memoryview) else body
    n = len(view)
    start = _skip_ws(view, 0) if n else 0
    if start >= n:
        raise ProtocolError("EOF", "eof")
    end = n
    while end > start and view[end - 1] in _WS:
        end -= 1
    value = view[start:end]
    try:
        _raw_decoder.decode(value)
        return value
    except msgspec.DecodeError as exc:
        msg = str(exc)
        if "truncated" in msg:
            raise ProtocolError("unexpected EOF", "syntax") from None
        pos = _err_pos(exc)
        if "trailing characters" in msg and pos is not None:
            value = view[start : start + pos - 1]
            try:
                _raw_decoder.decode(value)
            except msgspec.DecodeError:  # pragma: no cover - msgspec already validated it
                raise ProtocolError(f"invalid JSON: {msg}", "syntax") from None
            return value
        if pos is not None and 0 < pos <= len(value):
            ch = chr(value[pos - 1])
            raise ProtocolError(
                f"invalid character {ch!r} in JSON at byte {start + pos - 1}", "syntax"
            ) from None
        raise ProtocolError(f"invalid JSON: {msg}", "syntax") from None


def _jkind(raw: _Buf) -> str:
    """Go's name for the JSON type of a (validated, trimmed) value."""
    c = raw[0]
    if c == 0x7B:
        return "object"
    if c == 0x5B:
        return "array"
    if c == 0x22:
        return "string"
    if c == 0x6E:
        return "null"
    if c in (0x74, 0x66):
        return "bool"
    return "number"


def _trim(raw: _Buf) -> memoryview:
    view = memoryview(raw)
    start, end = 0, len(view)
    while start < end and view[start] in _WS:
        start += 1
    while end > start and view[end - 1] in _WS:
        end -= 1
    return view[start:end]


def _value_end(buf: memoryview, pos: int) -> int:
    """Index just past the JSON value starting at ``pos`` (buf is known to be valid JSON)."""
    try:
        _raw_decoder.decode(buf[pos:])
    except msgspec.DecodeError as exc:
        p = _err_pos(exc)
        if p is not None and "trailing" in str(exc):
            return pos + p - 1
        raise ProtocolError(f"invalid JSON: {exc}", "syntax") from None
    return len(buf)


def _scan_pairs(buf: memoryview) -> list[tuple[str, memoryview]]:
    """All (key, raw value) pairs of a valid JSON object, in order, duplicates included."""
    pairs: list[tuple[str, memoryview]] = []
    p = _skip_ws(buf, 0) + 1  # past '{'
    n = len(buf)
    while p < n:
        p = _skip_ws(buf, p)
        if buf[p] == 0x7D:  # '}'
            break
        if buf[p] == 0x2C:  # ','
            p += 1
            continue
        m = _STR_RE.match(buf, p)
        if m is None:  # pragma: no cover - validated input
            raise ProtocolError("invalid JSON object key", "syntax")
        key = _any_decoder.decode(buf[p : m.end()])
        p = _skip_ws(buf, m.end()) + 1  # past ':'
        p = _skip_ws(buf, p)
        q = _value_end(buf, p)
        pairs.append((key, _trim(buf[p:q])))
        p = q
    return pairs


def _pairs(buf: memoryview, d: dict | None = None) -> list[tuple[str, _Buf]]:
    """(key, raw) pairs of a valid JSON object, document order, duplicate keys preserved.

    Fast path: msgspec decodes ``dict[str, Raw]`` in C; when the object is compact and the pair
    lengths add up to the object's length, no key was duplicated and dict order is document order.
    Otherwise (whitespace, duplicates) fall back to an exact scan.
    """
    if d is None:
        d = _raw_dict_decoder.decode(buf)
    total = 1 + len(d)  # '{' + commas + '}'
    for k, v in d.items():
        total += len(_key_encoder.encode(k)) + 1 + len(v)
    if not d:
        total = 2
    if total == len(buf):
        return [(k, memoryview(v)) for k, v in d.items()]
    return _scan_pairs(buf)  # type: ignore[return-value]


def _fold(key: str) -> str:
    """Go's foldName: ASCII case folding plus the two non-ASCII runes that fold to ASCII."""
    if key.isascii():
        return key.upper()
    return key.replace("\u212a", "K").replace("\u017f", "S").upper() if _only_folds(key) else key


def _only_folds(key: str) -> bool:
    return all(c.isascii() or c in "\u212a\u017f" for c in key)


class _Fields:
    """Go field lookup for one struct: exact name first, then case-insensitive."""

    __slots__ = ("exact", "folded")

    def __init__(self, names: list[str]) -> None:
        self.exact = {n: n for n in names}
        self.folded = {n.upper(): n for n in names}

    def match(self, key: str) -> str | None:
        name = self.exact.get(key)
        if name is None:
            name = self.folded.get(_fold(key))
        return name


def go_key(keys: Iterable[str], field: str) -> str | None:
    """The key whose value Go's decoder leaves in struct field ``field``; None when no key matches.

    Go binds a key to a field by exact name, else by folded name, and a later key overwrites an
    earlier one: the answer is the last matching key. (For structs whose field names differ
    after folding, which every extender message is.)
    """
    folded = _fold(field)
    found = None
    for key in keys:
        if key == field or _fold(key) == folded:
            found = key
    return found


def _type_error(jkind: str, where: str, gotype: str) -> ProtocolError:
    return ProtocolError(f"json: cannot unmarshal {jkind} into Go struct field {where} of type {gotype}")


def _struct_pairs(raw: _Buf, gotype: str, fields: _Fields, where: str = "") -> list[tuple[str, _Buf]] | None:
    """Pairs of a Go struct value, keys resolved to field names; None for JSON null.

    ``where``: the field that holds the struct (a map's value, a slice's element), as a type
    error names it; empty for the message itself (Go then has no field to name).
    """
    raw = _trim(raw)
    k = _jkind(raw)
    if k == "null":
        return None
    if k != "object":
        if where:
            raise _type_error(k, where, gotype)
        raise ProtocolError(f"json: cannot unmarshal {k} into Go value of type {gotype}")
    out = []
    for key, val in _pairs(raw):
        name = fields.match(key)
        if name is not None:
            out.append((name, val))
    return out


def _string(raw: _Buf, where: str, current: str = "", gotype: str = "string") -> str:
    """A string field; ``gotype`` is its Go type as an error names it (``types.UID`` is a string)."""
    k = _jkind(raw)
    if k == "string":
        return _any_decoder.decode(raw)
    if k == "null":
        return current
    raise _type_error(k, where, gotype)


def _int64(raw: _Buf, where: str, current: int = 0, score: bool = False) -> int:
    k = _jkind(raw)
    if k == "null":
        return current
    if k == "number":
        lit = bytes(raw)
        if _INT_RE.match(lit):
            v = int(lit)
            if _INT64_MIN <= v <= _INT64_MAX:
                return v
            raise ProtocolError(
                f"json: cannot unmarshal number {lit.decode()} into Go struct field {where} of type int64",
                "int-range",
            )
        raise ProtocolError(
            f"json: cannot unmarshal number {lit.decode()} into Go struct field {where} of type int64",
            "float-score" if score else "type",
        )
    err = _type_error(k, where, "int64")
    if score and k == "string":
        err.kind = "string-score"
    raise err


_strings_decoder = msgspec.json.Decoder(list[str])


def _string_list(raw: _Buf, where: str) -> list[str] | None:
    k = _jkind(raw)
    if k == "null":
        return None
    if k != "array":
        raise _type_error(k, where, "[]string")
    try:
        return _strings_decoder.decode(raw)  # the common case, checked in C
    except msgspec.ValidationError:
        pass  # nulls (Go: "") or a wrong element type: the exact walk below
    return [item if item is not None else "" for item in _string_items(raw, where) or ()]


def _string_items(raw: _Buf, where: str) -> list[str | None] | None:
    """A []string's elements, None for a null one (which Go's decoder leaves as it was)."""
    k = _jkind(raw)
    if k == "null":
        return None
    if k != "array":
        raise _type_error(k, where, "[]string")
    out: list[str | None] = []
    for it in _any_decoder.decode(raw):
        if isinstance(it, str) or it is None:
            out.append(it)
        else:
            raise _type_error(_pykind(it), where, "string")
    return out


def _string_map(raw: _Buf, where: str, current: dict[str, str] | None,
                gotype: str = "map[string]string") -> dict[str, str] | None:
    """map[string]string (``gotype``: its Go name); merges into ``current`` like Go does for a
    duplicated key."""
    k = _jkind(raw)
    if k == "null":
        return None
    if k != "object":
        raise _type_error(k, where, gotype)
    out = current if current is not None else {}
    for key, val in _pairs(_trim(raw)):
        vk = _jkind(val)
        if vk == "string":
            out[key] = _any_decoder.decode(val)
        elif vk == "null":
            out[key] = ""
        else:
            raise _type_error(vk, where, "string")
    return out


def _pykind(v: Any) -> str:
    if isinstance(v, dict):
        return "object"
    if isinstance(v, list):
        return "array"
    if isinstance(v, str):
        return "string"
    if isinstance(v, bool):
        return "bool"
    if v is None:
        return "null"
    return "number"


def _object(raw: _Buf, where: str, gotype: str) -> dict | None:
    """A Kubernetes object (Pod/Node) kept as a plain dict; None for JSON null."""
    k = _jkind(raw)
    if k == "null":
        return None
    if k != "object":
        raise _type_error(k, where, gotype)
    return _any_decoder.decode(raw)


def _object_list(raw: _Buf, where: str, gotype: str, list_type: str = "") -> list | None:
    """A slice of objects (``list_type``: the slice's Go type, ``[]`` + gotype unless given;
    an element's error names ``gotype``, the type after the pointer)."""
    k = _jkind(raw)
    if k == "null":
        return None
    if k != "array":
        raise _type_error(k, where, list_type or "[]" + gotype)
    items = _any_decoder.decode(raw)
    for it in items:
        if it is not None and not isinstance(it, dict):
            raise _type_error(_pykind(it), where, gotype)
    return items
