"""The identity of a Kubernetes object (metadata's namespace, name and uid) as Go reads it.

kube-scheduler decodes a reply's objects with encoding/json: ``Metadata``, ``NAME`` or a key
spelled with escapes binds to ``metadata``/``name`` as well (gojson._Fields), a key given twice
is decoded into the same field again (ObjectMeta merges, a string's last value wins, ``null``
changes nothing), and a wrong type fails with Go's text. A backend's reply is untrusted, so the
identity the proxy acts on must be the one the scheduler would have read.

The usual object is read in one pass of msgspec's C decoder: its keys, as decoded, show every
spelling (escapes included), and the lengths of its pairs adding up to the object's own length
shows that no key was given twice (_plain). Anything else (another spelling, a repeated key,
whitespace, a wrong type) is read pair by pair by Go's rules (_by_go_rules).

May import: the standard library, msgspec and ``protocol.gojson``. No Django, no I/O.
"""

from __future__ import annotations

import msgspec

from .gojson import ProtocolError, _Buf, _Fields, _jkind, _pairs, _trim

_F_OBJECT = _Fields(["metadata"])
_F_META = _Fields(["name", "namespace", "uid"])
_GO_TYPES = {"name": "string", "namespace": "string", "uid": "types.UID"}  # ObjectMeta's fields

_raw_dict = msgspec.json.Decoder(dict[str, msgspec.Raw])
_str = msgspec.json.Decoder(str | None)
_encoder = msgspec.json.Encoder()

#: Keys known to bind as spelled, per struct: the field names themselves, and keys met before
#: that bind to none of them. A Node's keys are the same from one object to the next, so each
#: is folded once. Bounded: emptied (but for the field names) when full.
_AS_SPELLED: dict[int, set[str]] = {id(_F_OBJECT): {"metadata"}, id(_F_META): {"name", "namespace", "uid"}}
_AS_SPELLED_MAX = 4096


def identity(raw: _Buf, path: str, gotype: str) -> tuple[str, str, str]:
    """(namespace, name, uid) of one object's JSON (an object or null); '' where absent or null.

    ``path`` is the object's place in the message as Go names it in a type error (the json
    names of the fields from the message down: ``Nodes.items``, ``Pod``); ``gotype`` its Go
    struct (``Node``, ``Pod``). Only these three fields are typed like Go's ObjectMeta; the
    rest of the object is neither built nor type-checked.
    """
    try:
        found = _plain(raw)
    except (msgspec.DecodeError, UnicodeDecodeError):  # a wrong type, or text msgspec refuses
        found = None
    return found if found is not None else _by_go_rules(raw, path, gotype)


def _plain(raw: _Buf) -> tuple[str, str, str] | None:
    """The identity, or None when Go's reading could differ from a plain one (see the module)."""
    if bytes(raw[:1]) != b"{":
        return None
    top = _raw_dict.decode(raw)
    if not _as_spelled(top, _F_OBJECT) or not _once_each(top, raw):
        return None
    meta = top.get("metadata")
    if meta is None:
        return "", "", ""
    first = bytes(memoryview(meta)[:1])
    if first == b"n":
        return "", "", ""
    if first != b"{":
        return None
    fields = _raw_dict.decode(meta)
    if not _as_spelled(fields, _F_META) or not _once_each(fields, meta):
        return None
    name, namespace, uid = fields.get("name"), fields.get("namespace"), fields.get("uid")
    # a wrong type raises: the object is read again by Go's rules, for Go's text
    return (_str.decode(namespace) or "" if namespace is not None else "",
            _str.decode(name) or "" if name is not None else "",
            _str.decode(uid) or "" if uid is not None else "")


def _as_spelled(pairs: dict[str, msgspec.Raw], fields: _Fields) -> bool:
    """Whether each key of ``pairs`` is a field's own name or binds to none of ``fields``."""
    known = _AS_SPELLED[id(fields)]
    if known.issuperset(pairs):
        return True
    for key in pairs:
        if key not in known:
            if fields.match(key) is not None:  # another spelling of a field
                return False
            if len(known) >= _AS_SPELLED_MAX:
                known.intersection_update(fields.exact)
            known.add(key)
    return True


def _once_each(pairs: dict[str, msgspec.Raw], raw: _Buf | msgspec.Raw) -> bool:
    """Whether the object ``raw`` decoded to ``pairs`` holds each key once.

    Encoded again, the pairs give back the very bytes read only if no pair was dropped (a key
    given twice keeps one value in the dict); an escaped key or whitespace also differs, and is
    read by Go's rules too.
    """
    again = _encoder.encode(pairs)
    return len(again) == len(raw) and again == (raw if isinstance(raw, bytes) else bytes(raw))


def _by_go_rules(raw: _Buf, path: str, gotype: str) -> tuple[str, str, str]:
    """The identity read pair by pair, as encoding/json's ``object`` binds and decodes them."""
    raw = _trim(raw)
    if _jkind(raw) != "object":  # null; the callers rejected every other kind
        return "", "", ""
    out = {"name": "", "namespace": "", "uid": ""}
    for key, meta in _pairs(raw):
        if _F_OBJECT.match(key) is None:
            continue
        kind = _jkind(meta)
        if kind == "null":  # a struct: null leaves it as it was
            continue
        if kind != "object":
            raise _error(kind, gotype, f"{path}.metadata", "v1.ObjectMeta")
        for name, value in _pairs(_trim(meta)):  # into the same ObjectMeta: a merge
            field = _F_META.match(name)
            if field is None:
                continue
            kind = _jkind(value)
            if kind == "string":
                out[field] = _str.decode(value) or ""
            elif kind != "null":  # null leaves a string as it was
                raise _error(kind, "ObjectMeta", f"{path}.metadata.{field}", _GO_TYPES[field])
    return out["namespace"], out["name"], out["uid"]


def _error(kind: str, struct: str, fields: str, gotype: str) -> ProtocolError:
    # encoding/json's UnmarshalTypeError.Error: the innermost struct, then the field path
    return ProtocolError(f"json: cannot unmarshal {kind} into Go struct field {struct}.{fields} of type {gotype}")

