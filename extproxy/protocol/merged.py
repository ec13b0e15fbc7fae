"""A Pod's or a Node's JSON as a dict, a key given twice decoded as Go decodes it: merged.

json and msgspec keep a repeated key's last value. kube-scheduler's encoding/json decodes the
later occurrence into the field as it stands (decode.go, ``object``): a struct (``metadata``,
``spec``) keeps the earlier occurrence's fields and takes the later one's; a slice's elements
are decoded into one by one (repeats.py); a string or a number takes the later value, and
``null`` leaves it as it was. So ``{"metadata":{"name":"a"},"metadata":{"namespace":"x"}}`` is
a Pod named a in namespace x for the scheduler, and a Pod with no name for a last-wins dict.

The proxy's Pods and Nodes are dicts without Go's types, so the rules follow the JSON: an
object into an object merges, an array into an array is decoded element by element (its length
the later one's; ``[]`` empties it), ``null`` sets an array to None (a nil slice) and leaves any
other value as it was (as Go does for a string or a struct; a map or a pointer Go would set to
nil), anything else replaces. Keys merge as spelled: a field spelled two ways (``metadata``,
``Metadata``) stays two keys here; the identity (namespace, name, uid) is read from the bytes
by identity.py, which folds them as Go does.

The usual object (no repeated key) costs one C decode and one C encode: written again
compactly it is as long as it came only if no pair was dropped (nothing the encoder writes is
longer than the JSON it was read from, once floats, the one exception, are refused).

May import: the standard library, msgspec and ``protocol.gojson``. No Django, no I/O.
"""
from __future__ import annotations

from typing import Any

import msgspec

from .gojson import _Buf, _any_decoder, _jkind, _pairs, _raw_list_decoder, _trim


class _Float(Exception):
    """A float literal: msgspec may write it longer than it came (1e5 -> 100000.0), which could
    hide a dropped pair from the length check; such objects are read pair by pair."""


def _refuse_float(_text: str) -> Any:
    raise _Float


_plain = msgspec.json.Decoder(float_hook=_refuse_float)
_encoder = msgspec.json.Encoder()


def go_object(raw: _Buf) -> Any:
    """The value of ``raw`` (valid JSON), each repeated key merged as described above."""
    try:
        value = _plain.decode(raw)
        if len(_encoder.encode(value)) == len(raw):
            return value  # compact, no key given twice: the usual object
        compact = msgspec.json.format(raw, indent=-1)  # a Python backend's spaces taken out
        if len(compact) < len(raw):
            return go_object(compact)
    except _Float:
        pass
    return _by_pairs(_trim(raw))


def has_repeated_key(raw: _Buf) -> bool:
    """Whether some object in ``raw`` (valid JSON) gives a key twice (exact; the usual object
    is cleared by its length, as in go_object)."""
    try:
        if len(_encoder.encode(_plain.decode(raw))) == len(raw):
            return False
        compact = msgspec.json.format(raw, indent=-1)
        if len(compact) < len(raw):
            return has_repeated_key(compact)
    except _Float:
        pass
    return _repeats(_trim(raw))


def _by_pairs(raw: memoryview) -> Any:
    kind = _jkind(raw)
    if kind == "object":
        out: dict[str, Any] = {}
        for key, val in _pairs(raw):
            value = _by_pairs(_trim(val))
            out[key] = decoded_into(out[key], value) if key in out else value
        return out
    if kind == "array":
        return [_by_pairs(_trim(item)) for item in _raw_list_decoder.decode(raw)]
    return _any_decoder.decode(raw)


def _repeats(raw: memoryview) -> bool:
    kind = _jkind(raw)
    if kind == "object":
        pairs = _pairs(raw)
        if len({key for key, _ in pairs}) < len(pairs):
            return True
        return any(_repeats(_trim(val)) for _, val in pairs)
    if kind == "array":
        return any(_repeats(_trim(item)) for item in _raw_list_decoder.decode(raw))
    return False


def decoded_into(old: Any, new: Any) -> Any:
    """``old`` after a later occurrence of its key, ``new``, is decoded into it (see the module)."""
    if new is None:
        return None if isinstance(old, list) else old
    if isinstance(old, dict) and isinstance(new, dict):
        out = dict(old)
        for key, value in new.items():
            out[key] = decoded_into(out[key], value) if key in out else value
        return out
    if isinstance(old, list) and isinstance(new, list):
        return [decoded_into(old[i], value) if i < len(old) else value for i, value in enumerate(new)]
    return new


def forwardable(raw: bytes) -> bytes:
    """An object to hand on as the scheduler would hand it on: ``raw`` itself when no key in it
    is given twice (its bytes as they came); else the value Go's decoding leaves, written
    compactly, which a reader that keeps a key's last occurrence (a Python backend) reads as Go
    reads ``raw`` (kube-scheduler decodes a reply, then encodes what it holds for the next one)."""
    return _encoder.encode(go_object(raw)) if has_repeated_key(raw) else raw
