"""The redaction rules of now, applied to fields stored under earlier ones.

An operator who adds a `namePatterns` entry (or any rule) after a secret reached the record needs
what is already kept redacted as new calls will be. Each function here takes one stored value and
returns what to store instead, or None when the current rules change nothing in it. What was
redacted before stays so (`[redacted]` redacted again is `[redacted]`), a body keeps the marks it
had and gains the new ones, and no bound is applied twice (a note of what was cut stays one note).

Node objects are kept once and referred to by key from many bodies, so they are redacted in place,
under their old key: `NodeChanges` says which change and how, and a body that refers to one gains
the marks (`Nodes.items[3].metadata.annotations.x redacted`) as if it had been redacted when stored.
Pure: no database (redact_stored.py reads and writes).
"""
from __future__ import annotations

import zlib
from typing import Any

import msgspec

from .. import bodyformat
from ..config import RedactionConfig
from ..protocol import go_key
from ..redaction import (bounded_text, needs_redaction, redact_object, redact_raw, redact_reply_strings,
                         redact_strings, text_needs_redaction)
from .blobs import (COMPACT_MARK, RAW_MARK, REDACTED_RAW_MARK, REDACTION_CACHE_BYTES, RedactionCache,
                    compress, decompress)
from .rows import MAX_FINDING_TEXT, stored_decisions
from ..semantics import Decision

# The fields of a body that are redacted where they stand (Nodes are cut out into the node store).
_REDACTED_FIELDS = tuple(name for name in bodyformat.SPECIAL if name != "Nodes")


def _merged(old: list[str], new: list[str]) -> list[str]:
    return old + [mark for mark in new if mark not in old]


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def text(value: str, rules: RedactionConfig, limit: int) -> str | None:
    """An error text or an event's note (already cut to `limit` when stored)."""
    if not value or not text_needs_redaction(_utf8(value), rules):
        return None
    redacted = bounded_text(value, rules, limit)
    return None if redacted == value else redacted


def findings(items: Any, rules: RedactionConfig) -> list[dict[str, Any]] | None:
    """A call's findings with each detail redacted; their number and kinds as they were."""
    if not isinstance(items, list):
        return None
    out, changed = [], False
    for item in items:
        detail = item.get("detail") if isinstance(item, dict) else None
        new = text(detail, rules, MAX_FINDING_TEXT) if isinstance(detail, str) else None
        if new is not None:
            item, changed = dict(item, detail=new), True
        out.append(item)
    return out if changed else None


_DECISIONS = msgspec.json.Decoder(list[Decision])


def decisions(blob: bytes, rules: RedactionConfig) -> bytes | None:
    """A decisions blob with its reasons redacted (rows.stored_decisions, as when stored)."""
    if not blob:
        return None
    stored = _DECISIONS.decode(decompress(bytes(blob)))
    kept = stored_decisions(stored, rules)
    if kept is stored or kept == stored:
        return None
    return compress(msgspec.json.encode(kept))


def replay_diff(blob: bytes, rules: RedactionConfig) -> bytes | None:
    """A replay's stored diff (compressed JSON) with every string in it redacted."""
    if not blob:
        return None
    data = zlib.decompress(bytes(blob))
    if not text_needs_redaction(data, rules):
        return None
    before = msgspec.json.decode(data)
    after = redact_strings(before, rules)
    return None if after == before else compress(msgspec.json.encode(after))


def node(data: bytes, rules: RedactionConfig) -> tuple[bytes, list[str]] | None:
    """A stored Node object (compressed JSON) redacted: the new stored data, sorted as the node
    store keeps redacted ones, and the marks relative to the object (`.metadata.labels.x
    redacted`); None when the rules change nothing."""
    raw = decompress(bytes(data))
    if not needs_redaction(raw, rules):
        return None
    before = msgspec.json.decode(raw)
    after = redact_object(msgspec.json.decode(raw), rules)
    marks = bodyformat.redaction_marks(before, after)
    return (compress(msgspec.json.encode(after, order="sorted")), marks) if marks else None


class NotANodeReference(ValueError):
    """A spliced body's Node list held an item that is not one of its own references."""


class Bodies:
    """Stored bodies (every stored form: blobs.py) redacted by `rules`.

    `node_marks`: the Node objects that the same run redacts in place, by key, with their marks.
    """

    def __init__(self, rules: RedactionConfig, node_marks: dict[str, list[str]]) -> None:
        self.rules = rules
        self.node_marks = node_marks
        # A reply's text fields were cut to a budget when stored (redaction.redact_free_text), with
        # a note of what was cut: redacted whole now, so that the note is not cut and noted again.
        # What is stored is bounded by that budget already.
        self._redact = RedactionCache(
            bodyformat.redactor(lambda obj: redact_object(obj, rules), lambda raw: needs_redaction(raw, rules),
                                lambda value, node_keys: redact_reply_strings(value, rules, node_keys),
                                lambda raw: text_needs_redaction(raw, rules)),
            REDACTION_CACHE_BYTES,
        )

    def body(self, stored: bytes) -> bytes | None:
        """The new stored blob, or None when the rules change nothing in it."""
        if not stored:
            return None
        data = decompress(bytes(stored))
        mark, form = data[:1], data[1:]
        if mark == bodyformat.SPLICED_MARK:
            new = self._spliced(form)
        elif mark == COMPACT_MARK:
            new = self._canonical(form)
        elif mark == REDACTED_RAW_MARK:
            kept, marks = msgspec.msgpack.decode(form)
            new = self._raw(kept, list(marks))
        elif mark == RAW_MARK:
            new = self._raw(form, [])
        else:
            return None
        return None if new is None or new == data else compress(new)

    def _raw(self, body: bytes, marks: list[str]) -> bytes | None:
        kept, more = redact_raw(body, self.rules)
        if not more:
            return None
        return REDACTED_RAW_MARK + msgspec.msgpack.encode([kept, _merged(marks, more)])

    def _spliced(self, form: bytes) -> bytes | None:
        pieces, marks = msgspec.msgpack.decode(form)
        literals = [piece for piece in pieces if isinstance(piece, bytes)]
        keys = [piece for piece in pieces if isinstance(piece, str)]
        joined = b"".join(literals)
        if not (needs_redaction(joined, self.rules) or text_needs_redaction(joined, self.rules)
                or any(key in self.node_marks for key in keys)):
            return None
        # Cut apart again, as when it was stored: each Node reference stands in the body as a small
        # object naming its key, and is kept as that key, with the marks of its redaction in place.
        body = _joined(pieces)
        spliced = bodyformat.compact(body, self._redact, self._node_reference)
        if spliced is None:
            raise ValueError("the stored body could not be cut apart again")
        new_pieces, new_marks = msgspec.msgpack.decode(spliced[1:])
        if _joined(new_pieces) == body and all(mark in marks for mark in new_marks):
            # The same body and no new mark, though maybe cut into other pieces (a field redacted
            # before is no longer a piece apart). Not the marks alone: one names a place, and a
            # second secret in a field redacted before gives the same mark again.
            return None
        return bodyformat.SPLICED_MARK + msgspec.msgpack.encode([new_pieces, _merged(list(marks), new_marks)])

    def _node_reference(self, item: bytes) -> tuple[str, list[str]]:
        try:
            key = msgspec.json.decode(item, type=_Reference).ref
        except msgspec.DecodeError as exc:
            raise NotANodeReference(item[:80]) from exc
        return key, list(self.node_marks.get(key, ()))

    def _canonical(self, form: bytes) -> bytes | None:
        # The older form keeps the body as decoded JSON with Node items as {"$node": key}; it keeps
        # no marks (it says it was re-encoded), and neither does this.
        envelope = msgspec.json.decode(form, type=dict[str, msgspec.Raw])
        changed = False
        for key, value in envelope.items():
            name = next((n for n in _REDACTED_FIELDS if go_key((key,), n)), None)
            answer = self._redact(name, bytes(value)) if name is not None else None
            if answer is not None:
                envelope[key] = msgspec.Raw(answer[0])
                changed = True
        return COMPACT_MARK + msgspec.json.encode(envelope) if changed else None


class _Reference(msgspec.Struct, forbid_unknown_fields=True):
    ref: str = msgspec.field(name="$extproxy-node-ref")


def _reference(key: str) -> bytes:
    return msgspec.json.encode(_Reference(key))


def _joined(pieces: list[bytes | str]) -> bytes:
    """A spliced form's body with each Node reference standing as a small object naming its key."""
    return b"".join(_reference(piece) if isinstance(piece, str) else piece for piece in pieces)
