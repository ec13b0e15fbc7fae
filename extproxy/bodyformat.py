"""The stored form of a recorded body that gives the body back byte for byte.

Owns one format (mark `S`, "spliced"): the body cut into pieces, in order. A piece is either
literal bytes (the JSON between the big values, the Pod) or the SHA-256 of a Node object kept
once in the node store. Joining the pieces, with each Node's stored bytes put back, gives the
body exactly as it was received. Only what redaction changed differs, and every such change
is named in the stored `marks` (e.g. `Pod.spec.containers[0].env[1].value redacted`).

`compact` checks its own work: it joins the pieces with the original Node bytes and compares
with the body; when they differ (duplicate keys and other oddities that defeat the search for
a value's place) it returns None and the caller stores the body its older way.

Pure: no Django, no I/O. It does not decide what is redacted (the redaction package) nor where Node
objects are kept (the recorder's NodeDeduper and the NodeObject table).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import msgspec

from .protocol import LastObject, RecentBytes, go_key, object_keys, raw_object
from .protocol.gojson import _fold

SPLICED_MARK = b"S"
# A reply's free text: a backend writes it, and it can echo what the Pod holds (an env value in
# a FailedNodes reason). A string, or a map of node name to string.
TEXT_FIELDS = ("Error", "FailedNodes", "FailedAndUnresolvableNodes")
# the fields whose values are redacted or cut into Node objects
SPECIAL = ("Pod", "Nodes", "NodeNameToVictims") + TEXT_FIELDS
# the fields that hold Pods (redacted as Pods); the value of any other field of a body but Nodes
# is redacted as free text, every string in it: a backend may add a field of its own
# ({"Debug": "token=..."}) and it is stored as the rest of the reply is.
OBJECT_FIELDS = ("Pod", "NodeNameToVictims")
# Of a body's other fields (not SPECIAL), bytes redacted at most, all together: a backend may
# fill a 64 MiB reply with fields of its own, and the patterns cost 0.1-0.5 s a MiB. A field past
# the bound is not kept, and says so (too_long).
OTHER_FIELDS_REDACT_MAX = 1 << 20
# The fields that name nodes and pods, the scheduler's own words that replay sends again and the
# pages link by: kept as they came, never read as free text (a name is no secret, and a pattern
# must not turn `tokenserver01` into `token[redacted]`). Nor do they count towards the bound.
IDENTITY_FIELDS = ("NodeNames", "Node", "PodName", "PodNamespace", "PodUID")


def is_identity(key: str) -> bool:
    return any(go_key((key,), name) for name in IDENTITY_FIELDS)


def too_long(value: bytes) -> tuple[bytes, list[str]]:
    """What is kept of a field past OTHER_FIELDS_REDACT_MAX, and its mark."""
    return msgspec.json.encode(f"[{len(value)} bytes not kept: too long to redact]"), [" not kept: too long to redact"]

Redactor = Callable[[str, bytes], "tuple[bytes, list[str]] | None"]
"""Redacts the JSON of one field ("Pod", "NodeNameToVictims", a text field): None when nothing
needs redacting, else (new JSON, marks)."""

NodeAdder = Callable[[bytes], "tuple[str, list[str]]"]
"""Keeps one Node object; returns its key and what redaction changed in the kept copy."""


class _NodeListRaw(msgspec.Struct):
    items: list[msgspec.Raw] = []


def compact(body: bytes, redact: Redactor, add_node: NodeAdder, lists: "SplicedLists | None" = None,
            last: LastObject | None = None) -> bytes | None:
    """The spliced stored form of `body`, or None when it cannot be made exact.

    `lists`, when given, remembers the NodeLists spliced last, so that the same list arriving
    again is not cut apart again (SplicedLists); `last`, the envelope of the bytes read last
    (the recorder has just read a request's for its names: protocol.LastObject)."""
    try:
        envelope = raw_object(body, last)
    except msgspec.DecodeError:
        return None
    special: dict[str, str] = {}
    keys = object_keys(body, envelope)
    if len(set(keys)) != len(keys):
        return None  # a repeated key: the earlier value would be kept among the literal bytes
    for name in SPECIAL:
        given = [key for key in keys if go_key((key,), name)]
        if len(given) > 1:
            # Go reads the last; an earlier one would be kept among the literal bytes, unredacted.
            # The older form keeps only the one Go reads.
            return None
        if given:
            special[given[0]] = name
    pieces: list[bytes | str] = []
    originals: list[bytes] = []  # the bytes each piece stands for in `body`, for the check
    marks: list[str] = []
    cursor = 0
    other = 0  # bytes of the other fields so far
    for key, raw in envelope.items():
        value = bytes(raw)
        if key not in special and (value in (b"null", b"true", b"false", b"[]", b"{}", b'""') or is_identity(key)):
            continue  # nothing to redact: stays among the literal bytes
        start = _value_at(body, key, value, cursor)
        if start < 0:
            return None
        _literal(pieces, originals, body[cursor:start])
        cursor = start + len(value)
        name = special.get(key, key)
        if name == "Nodes":
            spliced = lists.find(value) if lists is not None else None
            if spliced is None:
                spliced = _splice_nodes(value, add_node)
                if spliced is None:
                    return None
                if lists is not None:
                    lists.keep(value, spliced)
            first = 0
            if spliced.pieces and spliced.pieces[0] is spliced.originals[0]:  # a literal: joins one before it
                _literal(pieces, originals, spliced.originals[0])
                first = 1
            pieces += spliced.pieces[first:]  # no two literals are neighbours in a spliced list
            originals += spliced.originals[first:]
            marks += spliced.marks
        else:
            if key not in special:  # the bound is on the other fields: the protocol's own are always read
                other += len(value)
            past = key not in special and other > OTHER_FIELDS_REDACT_MAX
            redacted = too_long(value) if past else redact(name, value)
            if redacted is None or not redacted[1]:
                _literal(pieces, originals, value)
            else:
                pieces.append(redacted[0])
                originals.append(value)
                marks += [f"{name}{mark}" for mark in redacted[1]]
    _literal(pieces, originals, body[cursor:])
    if b"".join(originals) != body:
        return None
    return SPLICED_MARK + msgspec.msgpack.encode([pieces, marks])


def _value_at(body: bytes, key: str, value: bytes, cursor: int) -> int:
    """Where `value` (the bytes of `key`'s value) starts in `body` at or after cursor, or -1.

    Looked for right after the key first: a search for a multi-megabyte value costs
    milliseconds even where it matches at once. Anything unusual (escapes in the key) falls back
    to the search; compact's final check catches a wrong place either way.
    """
    at = body.find(msgspec.json.encode(key), cursor)
    if at >= 0:
        at += len(msgspec.json.encode(key))
        while at < len(body) and body[at] in b" \t\r\n":
            at += 1
        if at < len(body) and body[at] == 0x3A:  # ':'
            at += 1
            while at < len(body) and body[at] in b" \t\r\n":
                at += 1
            if body.startswith(value, at):
                return at
    return body.find(value, cursor)


def _literal(pieces: list[bytes | str], originals: list[bytes], data: bytes) -> None:
    if not data:
        return
    if pieces and isinstance(pieces[-1], bytes) and pieces[-1] == originals[-1]:
        pieces[-1] += data  # neighbouring literals become one piece
        originals[-1] += data
    else:
        pieces.append(data)
        originals.append(data)


@dataclass
class _Spliced:
    """A NodeList value cut into pieces on its own: literal bytes (the same object in `pieces`
    and `originals`) and Node keys (their original bytes in `originals`); the keys; the marks."""

    pieces: list[bytes | str]
    originals: list[bytes]
    keys: list[str]
    marks: list[str]
    size: int


def _splice_nodes(value: bytes, add_node: NodeAdder) -> _Spliced | None:
    """Cut a NodeList's items out of `value` into node references; None when they cannot be found."""
    pieces: list[bytes | str] = []
    originals: list[bytes] = []
    keys: list[str] = []
    marks: list[str] = []
    done = _Spliced(pieces, originals, keys, marks, 2 * len(value))
    if value.strip() == b"null":
        pieces.append(value)
        originals.append(value)
        return done
    try:
        items = msgspec.json.decode(value, type=_NodeListRaw).items
    except msgspec.DecodeError:  # not a NodeList: keep it as it came
        pieces.append(value)
        originals.append(value)
        return done
    cursor, end = 0, len(value)
    for index, raw in enumerate(items):
        item = bytes(raw)
        # The item nearly always starts right after the `[` or `,` at cursor: one compare, no search.
        at = cursor + 1
        if not (at + len(item) <= end and value.startswith(item, at)):
            at = value.find(item, cursor, end)
        if at < 0:
            return None
        _literal_piece(pieces, originals, value[cursor:at])
        key, node_marks = add_node(item)
        pieces.append(key)
        originals.append(item)
        keys.append(key)
        marks += [f"Nodes.items[{index}]{mark}" for mark in node_marks]
        cursor = at + len(item)
    _literal_piece(pieces, originals, value[cursor:end])
    return done


def _literal_piece(pieces: list[bytes | str], originals: list[bytes], data: bytes) -> None:
    """A literal piece of a NodeList: one object in both lists, so that `compact` knows it."""
    if data:
        pieces.append(data)
        originals.append(data)


class SplicedLists:
    """The NodeLists spliced last, by their bytes, and what splicing each gave.

    A cluster's scheduler sends the same list of Node objects in call after call (every candidate
    node, on every filter and prioritize) until a node changes, and a filter's answer passes on
    the same list while the same nodes fit. Cutting a list apart costs a SHA-256 and a lookup per
    Node (most of recording a full-object call); comparing it with a list seen before costs one
    comparison of its bytes. Bounded: the `keep` lists used last, of `max_bytes` at most in all;
    a list larger than a quarter of that is not kept. `touch` is told the Node keys of a list
    found again, as each `add_node` would have been (the node store marks them in use).
    """

    def __init__(self, touch: Callable[[list[str]], None], keep: int = 4, max_bytes: int = 64 << 20) -> None:
        self._touch = touch
        self._recent = RecentBytes(keep, max_bytes)
        self.hits = self.misses = 0

    def find(self, value: bytes) -> _Spliced | None:
        spliced = self._recent.find(value)
        if spliced is None:
            self.misses += 1
            return None
        self._touch(spliced.keys)
        self.hits += 1
        return spliced

    def keep(self, value: bytes, spliced: _Spliced) -> None:
        if spliced.keys:
            self._recent.keep(value, spliced, spliced.size)


@dataclass
class Restored:
    body: bytes
    exact: bool  # True: these are the bytes that were received
    marks: list[str] = field(default_factory=list)  # what differs, and why


def restore(stored: bytes, load_nodes: Callable[[list[str]], dict[str, bytes]]) -> Restored:
    """The body of a spliced stored form (without its mark), Node objects put back."""
    pieces, marks = msgspec.msgpack.decode(stored)
    marks = list(marks)
    shas = sorted({p for p in pieces if isinstance(p, str)})
    nodes = load_nodes(shas) if shas else {}
    out: list[bytes] = []
    for piece in pieces:
        if isinstance(piece, bytes):
            out.append(piece)
        elif piece in nodes:
            out.append(nodes[piece])
        else:  # removed from the node store (retention): say so where the object was
            out.append(msgspec.json.encode({"$missing-node": piece}))
            marks.append(f"node object {piece} is no longer stored")
    return Restored(b"".join(out), exact=not marks, marks=marks)


# --- redaction marks -----------------------------------------------------------------------


def redaction_marks(before: Any, after: Any, path: str = "") -> list[str]:
    """Where `after` (a redacted copy) differs from `before`: removed keys and replaced values."""
    if before == after:  # one C-level comparison skips every subtree redaction left alone
        return []
    if isinstance(before, dict) and isinstance(after, dict):
        marks = []
        for key, value in before.items():
            if key not in after:
                marks.append(f"{_where(path, key)} removed")
            elif value != after[key]:
                marks += redaction_marks(value, after[key], _where(path, key))
        return marks
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        return [m for i, (b, a) in enumerate(zip(before, after)) if b != a for m in redaction_marks(b, a, f"{path}[{i}]")]
    return [f"{path} redacted"]


def _where(path: str, key: Any) -> str:
    return f"{path}.{key}" if _plain(key) else f"{path}[{key!r}]"


def _plain(key: Any) -> bool:
    return isinstance(key, str) and key.replace("_", "a").isalnum()


# The fields whose own keys are node names (not read as names of secrets: a node named
# `tokenserver01` keeps its reason, its victims).
NODE_KEYED_FIELDS = ("FailedNodes", "FailedAndUnresolvableNodes", "NodeNameToMetaVictims")


def is_node_keyed(name: str) -> bool:
    return any(go_key((name,), field) for field in NODE_KEYED_FIELDS)


def redactor(redact_object: Callable[[Any], Any], needs: Callable[[bytes], bool],
             redact_texts: Callable[[Any, bool], Any], text_needs: Callable[[bytes], bool]) -> Redactor:
    """A Redactor from an in-place Pod redaction and a text field's redaction (its decoded
    value and whether its keys are node names in, the value to keep out), each with its cheap
    byte test (victims: each Pod). Every field but the OBJECT_FIELDS is a text field."""

    def redact(name: str, value: bytes) -> tuple[bytes, list[str]] | None:
        text = name not in OBJECT_FIELDS
        if not (text_needs if text else needs)(value):
            return None
        original = msgspec.json.decode(value)
        changed = msgspec.json.decode(value)  # a second decode: several times cheaper than deepcopy
        if text:
            changed = redact_texts(changed, is_node_keyed(name))
        else:
            for pod in _victim_pods(changed) if name == "NodeNameToVictims" else [changed]:
                redact_object(pod)
        marks = redaction_marks(original, changed)
        if marks and msgspec.json.encode(original) != value:
            marks.append(" re-encoded after redaction: spacing and escapes may differ")
        return (msgspec.json.encode(changed), marks) if marks else None

    return redact


def _victim_pods(victims: Any) -> list[Any]:
    if not isinstance(victims, dict):
        return []
    entries = [e for e in victims.values() if isinstance(e, dict)]
    # Every key Go's decoder binds to Victims.Pods (exact, or folded: "pods", "PODS"): each is redacted.
    return [pod for e in entries for key in e if _fold(key) == "PODS" for pod in (e[key] or ())]
