"""The top level of a message body: its values read once per owner, and its keys as sent.

* ``raw_object``: a JSON object's values as Raw by key, one C pass; ``LastObject``, an owner's
  slot that keeps the last bytes read, so the next reader of the same bytes does not read them
  again (the recorder: a request's names, then its stored form);
* ``_top``: a message's (field, raw value) pairs by Go's rules, for the decoders;
* ``object_keys``, ``envelope_keys``: the keys in document order, repeats included.

May import: the standard library, msgspec and ``protocol.gojson``.
"""
from __future__ import annotations

import msgspec

from .gojson import (
    _WS,
    ProtocolError,
    _Buf,
    _Fields,
    _first_value,
    _jkind,
    _pairs,
    _skip_ws,
    _struct_pairs,
)

_raw_dict_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw])


class LastObject:
    """The last bytes object `raw_object` decoded for one owner, and what it gave.

    The recorder reads a request's envelope for its names and again to store it; one pass over
    a 3 MB full-object request costs 1.3 ms. Matched by identity: the slot holds the bytes, so
    their id cannot be reused meanwhile, and only immutable bytes are kept. Owned by one reader
    (a recorder's NodeDeduper), which it keeps one body alive for; for one thread.
    """

    __slots__ = ("body", "decoded")

    def __init__(self) -> None:
        self.body: bytes | None = None
        self.decoded: dict[str, msgspec.Raw] = {}


def raw_object(body: _Buf, last: LastObject | None = None) -> dict[str, msgspec.Raw]:
    """A JSON object's top-level values as Raw, by key (the last of a repeated key); raises
    msgspec.DecodeError. With `last`, the bytes object it read last is not read again (the
    dict is then shared: callers must not change it)."""
    if last is not None and last.body is body:
        return last.decoded
    decoded = _raw_dict_decoder.decode(body)
    if last is not None and type(body) is bytes:  # immutable: the same object is the same bytes
        last.body, last.decoded = body, decoded
    return decoded


def _top(body: _Buf, gotype: str, fields: _Fields, last: LastObject | None = None) -> list[tuple[str, _Buf]]:
    view = memoryview(body)
    if len(view) > 1 and view[0] == 0x7B and view[-1] == 0x7D:
        # Fast path for the usual compact object body: one C pass validates and splits it.
        try:
            d = raw_object(body, last)
        except msgspec.DecodeError:
            d = None
        if d is not None:
            pairs = _pairs(view, d)
            return [(n, v) for n, v in ((fields.match(k), v) for k, v in pairs) if n is not None]
    struct_pairs = _struct_pairs(_first_value(body), gotype, fields)
    return struct_pairs or []


def object_keys(body: bytes, decoded: dict) -> list[str]:
    """The keys of the JSON object ``body`` in document order, a repeated key as often as it
    comes, given the object's ``dict[str, Raw]`` decoding (which keeps only the last of a
    repeated key). For Go's compact output the pairs' lengths add up to the body's and nothing
    more is read; otherwise (whitespace, escapes, repeats) the object is scanned exactly.
    """
    view = memoryview(body).cast("B") if not isinstance(body, memoryview) else body
    start, end = _skip_ws(view, 0), len(view)
    while end > start and view[end - 1] in _WS:
        end -= 1
    return [k for k, _ in _pairs(view[start:end], decoded)]


def envelope_keys(body: bytes) -> list[str]:
    """Top-level keys of an object body as sent (any spelling); [] when not an object/undecodable.

    Useful for diagnostics such as a preempt reply that holds only ``NodeNameToVictims``.
    """
    try:
        raw = _first_value(body)
        if _jkind(raw) != "object":
            return []
        return [k for k, _ in _pairs(raw)]
    except (ProtocolError, msgspec.DecodeError):
        return []
