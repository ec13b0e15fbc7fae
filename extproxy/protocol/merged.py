"""A Pod's or a Node's JSON as a dict, read as Go decodes it: spellings folded, repeats merged.

json and msgspec keep a repeated key's last value, and each spelling of a key as its own key.
kube-scheduler's encoding/json binds a key to a struct field by its exact name, else by its
case-folded name, and decodes a later occurrence into the field as it stands (decode.go,
``object``): a struct (``metadata``, ``spec``) keeps the earlier occurrence's fields and takes
the later one's; a slice's elements are decoded into one by one (repeats.py); a map takes the
later keys; a string or a number takes the later value. ``null`` sets a map, a pointer or a
slice to nil and leaves anything else as it was. So ``{"metadata":{"name":"a"},"Metadata":
{"namespace":"x"}}`` is a Pod named a in namespace x for the scheduler, and a Pod with no
metadata for a last-wins dict.

Given the object's Go type (kubefields.POD, NODE), keys are folded to the field's name and
``null`` follows the field's type; a map's keys stay as spelled (they are data). Where no type
is described, the rules follow the JSON: an object into an object merges, an array into an
array is decoded element by element (its length the later one's; ``[]`` empties it), ``null``
sets an array to None (a nil slice) and leaves any other value as it was, anything else
replaces. The identity (namespace, name, uid) is also read from the bytes by identity.py, for
the callers that need nothing else.

The usual object (no repeated key) costs one C decode and one C encode: written again
compactly it is as long as it came only if no pair was dropped (nothing the encoder writes is
longer than the JSON it was read from, once floats, the one exception, are refused); then its
described structs' keys are checked to be their fields' names (a set comparison each).

May import: the standard library, msgspec and ``protocol.gojson``, ``protocol.kubefields``.
No Django, no I/O.
"""
from __future__ import annotations

from typing import Any

import msgspec

from .gojson import _Buf, _any_decoder, _jkind, _pairs, _raw_list_decoder, _trim
from .kubefields import NIL_ON_NULL, NODE, Map, Ptr, Shape, Slice, Struct


class _Float(Exception):
    """A float literal: msgspec may write it longer than it came (1e5 -> 100000.0), which could
    hide a dropped pair from the length check; such objects are read pair by pair."""


def _refuse_float(_text: str) -> Any:
    raise _Float


_plain = msgspec.json.Decoder(float_hook=_refuse_float)
_encoder = msgspec.json.Encoder()


def go_object(raw: _Buf, shape: Shape = None) -> Any:
    """The value of ``raw`` (valid JSON), read as described above; ``shape``: its Go type
    (kubefields.POD or NODE), None for the rules of the JSON alone."""
    try:
        value = _plain.decode(raw)
        if len(_encoder.encode(value)) == len(raw):
            return _shaped(value, shape) if shape is not None else value  # compact, no key given twice: the usual object
        compact = msgspec.json.format(raw, indent=-1)  # a Python backend's spaces taken out
        if len(compact) < len(raw):
            return go_object(compact, shape)
    except _Float:
        pass
    return _by_pairs(_trim(raw), shape)


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


def _by_pairs(raw: memoryview, shape: Shape) -> Any:
    kind = _jkind(raw)
    if kind == "object":
        struct = shape.to if isinstance(shape, Ptr) else shape
        out: dict[str, Any] = {}
        for key, val in _pairs(raw):
            if isinstance(struct, Struct):
                key, sub = struct.field(key)
            else:
                sub = None
            value = _by_pairs(_trim(val), sub)
            if isinstance(struct, Map):  # a map's element is a new value each time (mapElem)
                out[key] = "" if value is None and struct.strings else value
            else:
                out[key] = decoded_into(out[key], value, sub) if key in out else value
        return out
    if kind == "array":
        elem = shape.elem if isinstance(shape, Slice) else None
        return [_by_pairs(_trim(item), elem) for item in _raw_list_decoder.decode(raw)]
    return _any_decoder.decode(raw)


def _shaped(value: Any, shape: Shape) -> Any:
    """``value`` (each key given once) with its described structs' keys folded to their fields'
    names, merged in document order where two spellings bind to one field, and a null string
    in a map[string]string made ""; ``value`` itself (no copy) when nothing is to change, the
    usual object: a set comparison for each struct, its inner structs' only."""
    if isinstance(shape, Ptr):
        shape = shape.to
    if isinstance(shape, Struct):
        if type(value) is not dict:
            return value
        if not value.keys() <= shape.exact:
            return _folded(value, shape)
        out = value
        for key, sub in shape.nested:
            inner = value.get(key)
            if inner is not None:
                done = _shaped(inner, sub)
                if done is not inner:
                    out = dict(value) if out is value else out
                    out[key] = done
        return out
    if isinstance(shape, Slice):
        if type(value) is not list:
            return value
        items = [_shaped(item, shape.elem) for item in value]
        return value if all(a is b for a, b in zip(items, value)) else items
    if isinstance(shape, Map) and type(value) is dict and None in value.values():
        return {key: "" if inner is None else inner for key, inner in value.items()}
    return value


def _folded(value: dict, shape: Struct) -> dict:
    folded: dict[str, Any] = {}
    for key, inner in value.items():
        key, typed = shape.field(key)
        inner = _shaped(inner, typed)
        folded[key] = decoded_into(folded[key], inner, typed) if key in folded else inner
    return folded


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


def decoded_into(old: Any, new: Any, shape: Shape = None) -> Any:
    """``old`` after a later occurrence of its key, ``new`` (read with ``shape`` already), is
    decoded into it (see the module); ``shape``: the field's Go type, where described."""
    if new is None:
        return None if isinstance(old, list) or isinstance(shape, NIL_ON_NULL) else old
    if isinstance(old, dict) and isinstance(new, dict):
        out = dict(old)
        if isinstance(shape, Map):  # the later keys' values replace (a map's element is new)
            out.update(new)
            return out
        struct = shape.to if isinstance(shape, Ptr) else shape
        for key, value in new.items():
            sub = struct.fields.get(key) if isinstance(struct, Struct) else None
            out[key] = decoded_into(out[key], value, sub) if key in out else value
        return out
    if isinstance(old, list) and isinstance(new, list):
        elem = shape.elem if isinstance(shape, Slice) else None
        return [decoded_into(old[i], value, elem) if i < len(old) else value for i, value in enumerate(new)]
    return new


def forwardable(raw: bytes) -> bytes:
    """An object to hand on as the scheduler would hand it on: ``raw`` itself when no key in it
    is given twice (its bytes as they came); else the value Go's decoding leaves, written
    compactly, which a reader that keeps a key's last occurrence (a Python backend) reads as Go
    reads ``raw`` (kube-scheduler decodes a reply, then encodes what it holds for the next one)."""
    return _encoder.encode(go_object(raw, NODE)) if has_repeated_key(raw) else raw
