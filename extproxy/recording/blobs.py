"""Stored bodies: compression, the Node store's de-duplication, and restoring a stored body.

A stored body is zlib(mark + data). Mark `R`: the bytes as received (not a JSON object, or not
decodable); mark `P`: the same with what looked like a secret replaced by pattern, and marks
saying so (redaction.redact_raw). Mark `C`: a JSON object whose Pod is redacted and whose Node
items are replaced by `{"$node": sha256}` references into `NodeObject`, each distinct Node
stored once. Mark `S` (bodyformat): the spliced form, the usual one.
Pure functions and one in-memory de-duplicator; must not touch the database (the writer stores
what `NodeDeduper.take_batch` returns).
"""
from __future__ import annotations

import hashlib
import zlib
from collections import OrderedDict
from typing import Any, Callable, Iterable

import msgspec

from .. import bodyformat
from ..config import RedactionConfig
from ..protocol import LastObject, RecentBytes, go_key
from ..redaction import (ECHO_MARK, RAW_MARK_TEXT, Echoes, collecting, echo_redactor, needs_redaction, noted,
                         redact_free_text, redact_object, redact_raw, text_needs_redaction)
from .bulk import storable_text
from .caches import BytesBoundedLRU, RedactionCache  # noqa: F401 - RedactionCache: kept importable from here

try:
    from isal.isal_zlib import compress as _compress
except ImportError:  # pragma: no cover - isal is in requirements.txt; zlib writes the same format
    from zlib import compress as _compress

RAW_MARK = b"R"  # body stored as received (not a JSON object, or undecodable)
REDACTED_RAW_MARK = b"P"  # the same with what looked like a secret replaced: msgpack [bytes, marks]
COMPACT_MARK = b"C"  # JSON object with Node items replaced by {"$node": sha256}


def compress(data: bytes) -> bytes:
    # Level 1: most of the ratio on repetitive JSON at a fraction of the CPU of higher levels.
    # ISA-L writes the same zlib format ~6x faster (a 3.7 kB Pod: 18 us against 122 us, and
    # smaller); zlib.decompress reads either.
    return _compress(data, 1)


def decompress(data: bytes) -> bytes:
    return zlib.decompress(data) if data else b""


def raw_form(body: bytes, rules: RedactionConfig, echoes: Echoes | None = None) -> bytes:
    """The stored form of bytes not read as JSON: as received, or with what looked like a
    secret replaced (redaction.redact_raw) and marked so. `echoes`: the values removed from
    the call's request, removed here too where the bytes repeat them."""
    kept, marks = redact_raw(body, rules)
    if echoes is not None and echoes.in_bytes(kept):
        text = kept.decode("utf-8", "surrogateescape")
        scrubbed = echoes.text(text)
        if scrubbed != text:
            kept = scrubbed.encode("utf-8", "surrogateescape")
            marks = (marks or [RAW_MARK_TEXT]) + [f"the body{ECHO_MARK}"]
    if not marks:
        return RAW_MARK + body
    return REDACTED_RAW_MARK + msgspec.msgpack.encode([kept, marks])


def raw_blob(body: bytes, rules: RedactionConfig, echoes: Echoes | None = None) -> bytes:
    """A body stored as received but for secrets (a raw record's)."""
    return compress(raw_form(body, rules, echoes))


class _NodeListRaw(msgspec.Struct):
    items: list[msgspec.Raw] = []
    metadata: msgspec.Raw = msgspec.Raw(b"{}")


# What decoding bytes that are not readable JSON raises (beyond the protocol's own errors).
UNDECODABLE = (msgspec.DecodeError, RecursionError, UnicodeDecodeError)


class _Name(msgspec.Struct, frozen=True):
    name: str = ""


class _NamedObject(msgspec.Struct):
    metadata: _Name = _Name()


REDACTION_CACHE_BYTES = 32 << 20  # redacted Pods remembered, by their size (+ key and marks)
STORED_BODY_CACHE_BYTES = 16 << 20  # stored forms of whole bodies remembered (NodeDeduper.stored_body)
STORED_BODY_MAX = 64 << 10  # a body larger than this is remembered by its bytes, among LARGE_BODIES
LARGE_BODIES = 4  # the large bodies stored last, remembered (with their Node references) by their bytes,
LARGE_BODY_BYTES = 64 << 20  # of this many bytes in all (so 16 MiB each at most, RecentBytes' quarter)


class NodeDeduper:
    """Collects the distinct Node objects of a batch, keyed by the SHA-256 of canonical JSON.

    Canonical (sorted keys, compact) so that the same Node sent with other spacing or key
    order is stored once. Canonicalising costs a decode and an encode, so the hash of the raw
    bytes is mapped to the canonical hash in a bounded cache: a Node that arrives byte for
    byte as before (the common case) costs one SHA-256 of its bytes.
    """

    def __init__(self, rules: RedactionConfig, cache_size: int = 100_000,
                 redaction_cache_bytes: int = REDACTION_CACHE_BYTES,
                 stored_body_bytes: int = STORED_BODY_CACHE_BYTES) -> None:
        self.rules = rules
        self.batch: dict[str, tuple[str, bytes]] = {}  # canonical sha -> (name, json)
        self.used: set[str] = set()  # every canonical sha the batch referred to
        self.refs = 0  # Node references handed out, ever (a caller can tell a body referred to none)
        self._canonical: OrderedDict[bytes, tuple[str, str]] = OrderedDict()  # raw digest -> (sha, name)
        self._exact: OrderedDict[bytes, tuple[str, tuple[str, ...]]] = OrderedDict()  # raw digest -> (key, marks)
        # Node key -> the values its redaction removed (only Nodes it changed; bounded like the
        # caches above): noted again whenever a call refers to the Node without redacting it.
        self._removed: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        self._cache_size = cache_size
        self.stored = BytesBoundedLRU(stored_body_bytes)  # body digest -> stored form (stored_body)
        self.lists = bodyformat.SplicedLists(self._found_again)  # whole NodeLists seen before
        # The node names of the requests' NodeLists read last: full-object requests send the same
        # list again and again, and reading 1,000 names out of it took 1.4 ms (rows.read_request).
        self.request_lists = RecentBytes(keep=4, max_bytes=32 << 20)
        self.envelope = LastObject()  # the request read last for its names: not read again to store it
        self.large_bodies = RecentBytes(LARGE_BODIES, LARGE_BODY_BYTES)  # body -> [blob, form, Node keys]
        self.redact_field = RedactionCache(
            bodyformat.redactor(lambda obj: redact_object(obj, rules), lambda raw: needs_redaction(raw, rules),
                                lambda value, node_keys: redact_free_text(value, rules, node_keys=node_keys),
                                lambda raw: text_needs_redaction(raw, rules)),
            redaction_cache_bytes,
        )

    def add(self, raw: bytes) -> str:
        self.refs += 1
        digest = hashlib.sha256(raw).digest()
        known = self._canonical.get(digest)
        if known is not None:
            self._canonical.move_to_end(digest)
            self.used.add(known[0])
            if self._removed:
                noted(self._removed.get(known[0], ()))
            return known[0]
        node = msgspec.json.decode(raw)
        removed: list[str] = []
        if needs_redaction(raw, self.rules):
            with collecting() as removed:
                redact_object(node, self.rules)
        data = msgspec.json.encode(node, order="sorted")
        sha = hashlib.sha256(data).hexdigest()
        self._note_removed(sha, removed)
        name = ((node.get("metadata") or {}).get("name") or "") if isinstance(node, dict) else ""
        self.batch.setdefault(sha, (storable_text(str(name)[:253]), data))
        self.used.add(sha)
        self._canonical[digest] = (sha, name)
        while len(self._canonical) > self._cache_size:
            self._canonical.popitem(last=False)
        return sha

    def _note_removed(self, sha: str, removed: list[str]) -> None:
        """What redacting Node `sha` removed: noted for the call now, remembered for later ones."""
        if not removed:
            return
        kept = tuple(dict.fromkeys(removed))
        noted(kept)
        self._removed[sha] = kept
        self._removed.move_to_end(sha)
        while len(self._removed) > self._cache_size:
            self._removed.popitem(last=False)

    def _found_again(self, keys: list[str]) -> None:
        """A NodeList spliced before came again: its Nodes are referred to as add_exact would."""
        self.refs += len(keys)
        self.used.update(keys)
        if self._removed:
            for key in keys:
                noted(self._removed.get(key, ()))

    def add_exact(self, raw: bytes) -> tuple[str, list[str]]:
        """Keep a Node object as received (keyed by the SHA-256 of its bytes), so its body can
        be restored byte for byte; one that needs redaction is kept redacted, and the changes
        are returned as marks. A Node seen before byte for byte costs one SHA-256: what it
        was kept as, and its marks, are remembered (bounded, like the canonical cache)."""
        self.refs += 1
        digest = hashlib.sha256(raw).digest()
        known = self._exact.get(digest)
        if known is not None:
            self._exact.move_to_end(digest)
            self.used.add(known[0])
            if self._removed:
                noted(self._removed.get(known[0], ()))
            return known[0], list(known[1])
        with collecting() as removed:
            sha, marks = self._keep_exact(raw, digest)
        self._note_removed(sha, removed)
        self._exact[digest] = (sha, tuple(marks))
        while len(self._exact) > self._cache_size:
            self._exact.popitem(last=False)
        return sha, marks

    def _keep_exact(self, raw: bytes, digest: bytes) -> tuple[str, list[str]]:
        if needs_redaction(raw, self.rules):
            node = msgspec.json.decode(raw)
            kept = redact_object(msgspec.json.decode(raw), self.rules)
            marks = bodyformat.redaction_marks(node, kept)
            if marks:
                return self.add(raw), marks
        sha = digest.hex()
        try:
            name = msgspec.json.decode(raw, type=_NamedObject).metadata.name
        except msgspec.DecodeError:  # not shaped like a Node: kept all the same, without a name
            name = ""
        self.batch.setdefault(sha, (storable_text(name[:253]), raw))
        self.used.add(sha)
        return sha, []

    def stored_body(self, body: bytes) -> bytes:
        """compress(compact_body(body)): the form a body is stored in, remembered.

        The same request bytes arrive again and again: filter and prioritize send one
        ExtenderArgs body, and a Pending Pod's every retry sends it once more. Decoding,
        splicing and compressing it was a third of a names-mode call's recording. A body up to
        STORED_BODY_MAX is remembered by its SHA-256 when it refers to no Node object (bounded by
        `stored_body_bytes`, least recently used out first). A larger one, whatever it refers
        to, among the last few by its bytes: a full-object reply passes on the same list of Node
        objects call after call, and comparing 3 MB costs a tenth of reading its envelope again;
        the Node objects of a body found again are marked in use as cutting it would.
        """
        if len(body) > STORED_BODY_MAX:
            return self._stored_large(body)
        key = hashlib.sha256(body).digest()
        found, known = self.stored.get(key)
        if found:
            noted(known[1])  # what redacting it removed, for the call's echoes (redaction.Echoes)
            return known[0]
        refs = self.refs
        with collecting() as removed:
            blob = compress(compact_body(body, self.rules, self))
        kept = tuple(dict.fromkeys(removed))
        noted(kept)
        if self.refs == refs:
            self.stored.put(key, (blob, kept), len(blob) + 96 + sum(len(v) + 64 for v in kept))
        return blob

    def _stored_large(self, body: bytes) -> bytes:
        known = self.large_bodies.find(body)
        if known is not None:
            if known[2] is None:  # its Node keys, read out of the form when first found again
                known[2] = [piece for piece in msgspec.msgpack.decode(known[1][1:])[0] if piece.__class__ is str]
            self._found_again(known[2])
            noted(known[3])
            return known[0]
        with collecting() as removed:
            form = compact_body(body, self.rules, self)
        kept = tuple(dict.fromkeys(removed))
        noted(kept)
        blob = compress(form)
        if form[:1] == bodyformat.SPLICED_MARK:  # the other forms are rare: not remembered
            # Most large bodies (a full-object request: every Pod's own) never come again: the
            # keys are not read out of the form until one does.
            self.large_bodies.keep(body, [blob, form, None, kept], len(body) + len(blob) + 2 * len(form))
        return blob

    def take_batch(self) -> tuple[dict[str, tuple[str, bytes]], set[str]]:
        """The new nodes and every node referred to since the last call."""
        batch, used, self.batch, self.used = self.batch, self.used, {}, set()
        return batch, used


def compact_body(body: bytes, rules: RedactionConfig, nodes: NodeDeduper, echoes: Echoes | None = None) -> bytes:
    """Redact, move Node objects into `nodes`, and return the form that is stored.

    The spliced form (bodyformat) first: it restores the body byte for byte. The older
    canonical form below only for bodies it cannot splice exactly. `echoes` (a reply's): the
    values removed from the call's request, removed from its free-text fields too.
    """
    redact = nodes.redact_field if echoes is None else echo_redactor(nodes.redact_field, echoes)
    try:
        spliced = bodyformat.compact(body, redact, nodes.add_exact, nodes.lists, nodes.envelope)
    except UNDECODABLE:  # the older form below decides what to keep
        spliced = None
    if spliced is not None:
        return spliced
    # Unreadable where it must be redacted: raises, and the caller stores a raw record with why.
    return _compact_body(body, rules, nodes, redact, echoes)


def _compact_body(body: bytes, rules: RedactionConfig, nodes: NodeDeduper,
                  redact: bodyformat.Redactor | None = None, echoes: Echoes | None = None) -> bytes:
    redact = nodes.redact_field if redact is None else redact
    try:
        envelope = msgspec.json.decode(body, type=dict[str, msgspec.Raw])
    except msgspec.DecodeError:
        return raw_form(body, rules, echoes)
    out: dict[str, Any] = dict(envelope)
    for name in bodyformat.SPECIAL:  # another spelling of a field Go reads once: not kept (it could hold secrets)
        read = go_key(envelope, name)
        for key in envelope:
            if key != read and go_key((key,), name):
                del out[key]
    pod_key = go_key(envelope, "Pod")
    if pod_key is not None:
        out[pod_key] = redact_object(msgspec.json.decode(envelope[pod_key]), rules)
    nodes_key = go_key(envelope, "Nodes")
    if nodes_key is not None and bytes(envelope[nodes_key]).strip() != b"null":
        try:
            node_list = msgspec.json.decode(envelope[nodes_key], type=_NodeListRaw)
            out[nodes_key] = {
                "metadata": node_list.metadata,
                "items": [{"$node": nodes.add(bytes(item))} for item in node_list.items],
            }
        except msgspec.DecodeError:
            pass  # not a NodeList: keep the value as received
    objects = {found for name in ("Nodes",) + bodyformat.OBJECT_FIELDS if (found := go_key(envelope, name))}
    other = 0
    for text_key in out:  # every other field as free text, as the spliced form redacts them
        field = next((n for n in bodyformat.TEXT_FIELDS if go_key((text_key,), n)), None)
        if text_key in objects or bodyformat.is_identity(text_key):
            continue
        value = bytes(envelope[text_key])
        other += 0 if field else len(value)
        if not field and other > bodyformat.OTHER_FIELDS_REDACT_MAX:
            out[text_key] = msgspec.Raw(bodyformat.too_long(value)[0])
        elif redacted := redact(field or text_key, value):
            out[text_key] = msgspec.Raw(redacted[0])
    victims_key = go_key(envelope, "NodeNameToVictims")
    if victims_key is not None:
        victims = msgspec.json.decode(envelope[victims_key])
        if isinstance(victims, dict):
            for entry in victims.values():
                for pod in (entry or {}).get("Pods") or (entry or {}).get("pods") or ():
                    redact_object(pod, rules)
        out[victims_key] = victims
    return COMPACT_MARK + msgspec.json.encode(out)


def nodes_carried(bodies: Iterable[bytes], rules: RedactionConfig) -> dict[str, tuple[str, bytes]]:
    """Every Node object `bodies` carry, keyed and kept as a NodeDeduper that had seen none of
    them would key and keep them (name, bytes to store). A body that cannot be cut is passed
    over: it was stored as received and refers to no Node object."""
    fresh = NodeDeduper(rules)
    for body in bodies:
        try:
            compact_body(bytes(body), rules, fresh)
        except Exception:  # the recorder stored such a body raw: nothing of it is wanted here
            continue
    return fresh.take_batch()[0]


def restore(stored: bytes, load_nodes: Callable[[list[str]], dict[str, bytes]]) -> bodyformat.Restored:
    """A stored body as received (redactions and lost nodes marked), whatever its stored form."""
    data = decompress(stored)
    if data.startswith(bodyformat.SPLICED_MARK):
        return bodyformat.restore(data[1:], load_nodes)
    if data.startswith(COMPACT_MARK):
        marks = ["stored in the canonical form: keys re-ordered and re-encoded"]
        return bodyformat.Restored(restore_body(stored, load_nodes), exact=False, marks=marks)
    if data.startswith(REDACTED_RAW_MARK):
        body, raw_marks = msgspec.msgpack.decode(data[1:])
        return bodyformat.Restored(body, exact=False, marks=list(raw_marks))
    return bodyformat.Restored(data[1:], exact=True)


def restore_body(stored: bytes, load_nodes: Callable[[list[str]], dict[str, bytes]]) -> bytes:
    """The stored body as JSON bytes again, Node references replaced by the objects."""
    data = decompress(stored)
    if data.startswith(bodyformat.SPLICED_MARK):
        return bodyformat.restore(data[1:], load_nodes).body
    if data.startswith(REDACTED_RAW_MARK):
        return msgspec.msgpack.decode(data[1:])[0]
    if not data.startswith(COMPACT_MARK):
        return data[1:]
    envelope = msgspec.json.decode(data[1:])
    refs: list[str] = []
    for value in envelope.values():
        if isinstance(value, dict) and isinstance(value.get("items"), list):
            refs += [i["$node"] for i in value["items"] if isinstance(i, dict) and "$node" in i]
    if refs:
        objects = load_nodes(refs)
        for value in envelope.values():
            if isinstance(value, dict) and isinstance(value.get("items"), list):
                value["items"] = [
                    msgspec.json.decode(objects[i["$node"]]) if isinstance(i, dict) and "$node" in i else i
                    for i in value["items"]
                ]
    return msgspec.json.encode(envelope)


# --- linking calls into scheduling attempts -------------------------------------------
