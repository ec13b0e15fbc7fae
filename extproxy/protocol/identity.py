"""The identity of a Kubernetes object (metadata's namespace, name and uid) as Go reads it.

kube-scheduler decodes a reply's objects with encoding/json: ``Metadata``, ``NAME`` or a key
spelled with escapes binds to ``metadata``/``name`` as well (gojson._Fields), a key given twice
is decoded into the same field again (ObjectMeta merges, a string's last value wins, ``null``
changes nothing), and a wrong type fails with Go's text. A backend's reply is untrusted, so the
identity the proxy acts on must be the one the scheduler would have read.

The usual object is read in one pass of msgspec's C decoder, into structs that take only the
keys Node and Pod objects and their ObjectMeta have, spelled as Go's tags are (any other key,
``Metadata`` or ``NAME`` or ``"n\\u0061me"`` included, fails the pass). What msgspec cannot
say is whether a key came twice (it keeps the last); encoded again, the struct gives the pairs
it kept in their shortest form, and the values' bytes as they came (``Raw``), so the encoding is
as long as the object only if no pair was dropped, no key was escaped and no whitespace was
skipped. An object with whitespace (a Python backend's) is cleared instead by its bytes when
no key can be a field's name twice (_once_literally). Anything else (another spelling, a
repeated key, an escaped one, an unknown key, a wrong type) is read pair by pair by Go's rules
(_by_go_rules), and so is every object whose reading could differ: the checks can refuse a
plain object, never pass one that is not.

May import: the standard library, msgspec and ``protocol.gojson``. No Django, no I/O.
"""

from __future__ import annotations

import msgspec

from .gojson import ProtocolError, _Buf, _Fields, _jkind, _pairs, _trim

_F_OBJECT = _Fields(["metadata"])
_F_META = _Fields(["name", "namespace", "uid"])
_GO_TYPES = {"name": "string", "namespace": "string", "uid": "types.UID"}  # ObjectMeta's fields

_str = msgspec.json.Decoder(str | None)
_encoder = msgspec.json.Encoder()

_Seen = msgspec.Raw | msgspec.UnsetType  # a value's bytes as they came; UNSET: no such key


class _PlainObject(msgspec.Struct, forbid_unknown_fields=True):
    """A Node's or a Pod's keys, as Go's tags spell them (TypeMeta's inline, then the fields)."""

    apiVersion: _Seen = msgspec.UNSET
    kind: _Seen = msgspec.UNSET
    metadata: _Seen = msgspec.UNSET
    spec: _Seen = msgspec.UNSET
    status: _Seen = msgspec.UNSET


class _PlainMeta(msgspec.Struct, forbid_unknown_fields=True):
    """ObjectMeta's keys, as its json tags spell them (clusterName: until Kubernetes 1.25)."""

    name: _Seen = msgspec.UNSET
    generateName: _Seen = msgspec.UNSET
    namespace: _Seen = msgspec.UNSET
    selfLink: _Seen = msgspec.UNSET
    uid: _Seen = msgspec.UNSET
    resourceVersion: _Seen = msgspec.UNSET
    generation: _Seen = msgspec.UNSET
    creationTimestamp: _Seen = msgspec.UNSET
    deletionTimestamp: _Seen = msgspec.UNSET
    deletionGracePeriodSeconds: _Seen = msgspec.UNSET
    labels: _Seen = msgspec.UNSET
    annotations: _Seen = msgspec.UNSET
    ownerReferences: _Seen = msgspec.UNSET
    finalizers: _Seen = msgspec.UNSET
    clusterName: _Seen = msgspec.UNSET
    managedFields: _Seen = msgspec.UNSET


class _PlainNode(msgspec.Struct, forbid_unknown_fields=True):
    """_PlainObject with its ObjectMeta read in the same pass (a NodeList's names, at once)."""

    apiVersion: _Seen = msgspec.UNSET
    kind: _Seen = msgspec.UNSET
    metadata: _PlainMeta | None | msgspec.UnsetType = msgspec.UNSET
    spec: _Seen = msgspec.UNSET
    status: _Seen = msgspec.UNSET


class _PlainNodeList(msgspec.Struct, forbid_unknown_fields=True):
    items: list[_PlainNode | None] | None | msgspec.UnsetType = msgspec.UNSET
    metadata: _Seen = msgspec.UNSET


_plain_object = msgspec.json.Decoder(_PlainObject)
_plain_meta = msgspec.json.Decoder(_PlainMeta)
_plain_node_list = msgspec.json.Decoder(_PlainNodeList)
_plain_node = msgspec.json.Decoder(_PlainNode)


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


def plain_node_names(raw: _Buf) -> tuple[list[str], msgspec.Raw | None] | None:
    """A NodeList's items' names and its metadata's bytes (None: absent), read in one pass, as
    identity() reads each item; None when Go's reading could differ (then read each item)."""
    try:
        nodes = _plain_node_list.decode(raw)
        if len(_encoder.encode(nodes)) != len(raw):
            return None
        names = []
        for node in nodes.items or ():
            meta = node.metadata if node is not None else None
            if meta is None or meta is msgspec.UNSET:
                names.append("")
            else:  # the namespace and uid are type-checked as Go checks them, and dropped
                _text(meta.namespace), _text(meta.uid)
                names.append(_text(meta.name))
    except (msgspec.DecodeError, UnicodeDecodeError):  # a wrong type, or text msgspec refuses
        return None
    return names, (None if nodes.metadata is msgspec.UNSET else nodes.metadata)


def _plain(raw: _Buf) -> tuple[str, str, str] | None:
    """The identity, or None when Go's reading could differ from this one (see the module)."""
    node = _plain_node.decode(raw)  # the usual (compact) object: its ObjectMeta in the same pass
    if len(_encoder.encode(node)) == len(raw):
        read = node.metadata
        if read is msgspec.UNSET or read is None:
            return "", "", ""
        return _text(read.namespace), _text(read.name), _text(read.uid)
    obj = _plain_object.decode(raw)
    if len(_encoder.encode(obj)) != len(raw) and not _once_literally(raw, _OBJECT_KEYS):
        return None
    meta = obj.metadata
    if meta is msgspec.UNSET or bytes(memoryview(meta)[:1]) == b"n":
        return "", "", ""
    fields = _plain_meta.decode(meta)
    if len(_encoder.encode(fields)) != len(meta) and not _once_literally(meta, _META_KEYS):
        return None
    # a wrong type raises: the object is read again by Go's rules, for Go's text
    return _text(fields.namespace), _text(fields.name), _text(fields.uid)


_OBJECT_KEYS = (b'"metadata"',)
_META_KEYS = (b'"name"', b'"namespace"', b'"uid"')


def _once_literally(raw: _Buf | msgspec.Raw, keys: tuple[bytes, ...]) -> bool:
    """Whether each of ``keys`` (quoted) can be a key of the object ``raw`` once at most: a
    second check, for objects with whitespace (a Python backend's ``json.dumps``), which the
    lengths cannot clear. Without a ``\\u`` escape no key can spell a letter but as itself
    (JSON's other escapes are no letters), so a key that decodes to a field's name is that name,
    quoted, in the bytes; the struct already refused every other spelling."""
    view = raw if isinstance(raw, (bytes, memoryview)) else memoryview(raw)
    data = bytes(view)
    escaped = b"\\" in data and b"\\u" in data  # the first test is a memchr; the second, a search
    return not escaped and all(data.count(key) <= 1 for key in keys)


def _text(value: _Seen) -> str:
    return "" if value is msgspec.UNSET else _str.decode(value) or ""


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

