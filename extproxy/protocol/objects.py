"""Kubernetes objects inside extender messages: their identity, and NodeLists.

Pod and Node objects are kept as received (dicts, or bytes to forward); only what the proxy
needs of them is read: metadata's namespace, name and uid, typed like Go's ObjectMeta. The one
NodeList reader serves every message that carries one, with one set of checks.

May import: the standard library, msgspec and ``protocol.gojson``. No Django, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import msgspec

from .identity import identity, plain_node_names
from .repeats import GoSlice, object_into
from .gojson import (
    ProtocolError,
    _Buf,
    _Fields,
    _jkind,
    _object,
    _raw_list_decoder,
    _struct_pairs,
    _trim,
    _type_error,
)

_F_NODELIST = _Fields(["metadata", "items"])  # json tags match case-insensitively too


def identity_of(raw: _Buf, path: str = "Nodes.items", gotype: str = "Node") -> tuple[str, str, str]:
    """(namespace, name, uid) of one Pod or Node object's JSON; '' for absent fields or null.

    Read as kube-scheduler reads them (identity.identity): ``path`` is the object's place in the
    message as a Go type error names it (``Pod``, ``Nodes.items``), ``gotype`` its Go struct.
    """
    return identity(raw, path, gotype)


def node_name_of(item: _Buf) -> str:
    """metadata.name of one Node object's JSON in a NodeList ('' when absent or when null)."""
    return identity(item, "Nodes.items", "Node")[1]


@dataclass(slots=True)
class NodeListParts:
    """A *v1.NodeList: its items' names, and the items as bytes (each an object or null).

    ``items`` is None when the reader asked for names only.
    """

    items: list[bytes] | None
    names: list[str]
    metadata: dict


class RecentBytes:
    """What was made of each of the last few byte strings, found again by their bytes.

    A reader that meets the same bytes again and again (the recorder: the scheduler sends the
    same Node objects in call after call until one of them changes, and a backend answers them
    alike) compares the bytes, one `memcmp`, instead of reading them again. `find`'s `matches`
    says whether what was made also fits what else the caller depends on (the same bytes can be
    kept more than once, each with its own). Bounded: the `keep` entries used last, of
    `max_bytes` in all as each entry's size says; an entry larger than a quarter of that is not
    kept. For one thread.
    """

    def __init__(self, keep: int = 4, max_bytes: int = 64 << 20) -> None:
        self._keep = keep
        self._max_bytes = max_bytes
        self._entries: list[tuple[bytes, Any, int]] = []  # (bytes, what was made, size); used last at the end

    def find(self, value: bytes, matches: Callable[[Any], bool] | None = None) -> Any | None:
        for index in range(len(self._entries) - 1, -1, -1):
            known, made, _ = self._entries[index]
            if len(known) == len(value) and known == value and (matches is None or matches(made)):
                self._entries.append(self._entries.pop(index))
                return made
        return None

    def keep(self, value: bytes, made: Any, size: int) -> None:
        if size > self._max_bytes // 4:
            return
        self._entries.append((value, made, size))
        while len(self._entries) > self._keep or sum(entry[2] for entry in self._entries) > self._max_bytes:
            self._entries.pop(0)


class _ExactNodeList(msgspec.Struct, forbid_unknown_fields=True):
    """A NodeList whose keys are spelled exactly as Go's tags: read in one pass (the usual case)."""

    items: list[msgspec.Raw] | None | msgspec.UnsetType = msgspec.UNSET
    metadata: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET


_exact_node_list = msgspec.json.Decoder(_ExactNodeList)


Known = tuple[list[bytes], list[str]]  # Node objects' bytes and, in the same order, their names


def _node_list(raw: _Buf, where: str, keep_items: bool = True, recent: RecentBytes | None = None,
               known: Known | None = None, into: GoSlice[bytes] | None = None,
               before: NodeListParts | None = None) -> NodeListParts | None:
    """*v1.NodeList -> its parts; None for null. The one reader of NodeLists, in every message.

    ``keep_items=False``: names only (a reader of verdicts needs no more, and the items' bytes
    cost a copy and a decode each); the checks are the same. ``recent``, with names only: the
    names of a list read before are taken from it (copies: the caller may change them).
    ``known``, with the items kept: objects whose names were read before (those the proxy sent);
    an item with the same bytes takes that name instead of being decoded again (_match_known).
    ``into``, ``before``: the field given again (repeats.py): the items and the metadata it holds
    from the earlier occurrences, decoded into (then no shortcut is taken).
    """
    if recent is not None and not keep_items and into is None:
        value = bytes(raw)
        parts = recent.find(value)
        if parts is None:
            parts = _node_list(value, where, keep_items=False)
            if parts is None:
                return None
            size = len(value) + sum(64 + len(name) for name in parts.names)  # the list's bytes, its names
            recent.keep(value, parts, size)
        return NodeListParts(None, list(parts.names), dict(parts.metadata))
    k = _jkind(raw)
    if k == "null":
        if into is not None:  # the pointer set to nil: a later occurrence starts afresh
            into.reset(nil=True)
        return None
    if k != "object":
        raise _type_error(k, where, "v1.NodeList")
    # Go names a NodeList's own fields by the path from the message down (decode.go,
    # addErrorContext): NodeList.Nodes.items, not NodeList.items
    in_list = "NodeList." + where.split(".", 1)[1]
    items_at, meta_at = in_list + ".items", in_list + ".metadata"
    if into is not None:
        return _node_list_pairs(raw, items_at, meta_at, keep_items, known, into, before)
    if b" " in bytes(raw[:64]):  # written with spaces (Python's json.dumps)
        spaced = _spaced_list(raw, items_at, meta_at, keep_items)
        if spaced is not None:
            return spaced
    if not keep_items:
        plain = plain_node_names(raw)  # the usual list: names only, one pass
        if plain is not None:
            names, list_meta = plain
            meta = _object(_trim(list_meta), meta_at, "v1.ListMeta") or {} if list_meta is not None else {}
            return NodeListParts(None, names, meta)
    try:  # keys exactly "items"/"metadata", each once: one C pass
        exact = _exact_node_list.decode(raw)
    except msgspec.ValidationError:  # other spellings or wrong types
        return _node_list_pairs(raw, items_at, meta_at, keep_items, known, None, None)
    if _written_length(exact) != len(raw):  # a key twice (or only spaces): msgspec kept the last
        return _node_list_pairs(raw, items_at, meta_at, keep_items, known, None, None)
    items, matched = _match_known(exact.items or (), known)
    items = _checked_items(items, items_at, "v1.Node")
    meta = _object(_trim(exact.metadata), meta_at, "v1.ListMeta") or {} if exact.metadata else {}
    return NodeListParts(items if keep_items else None, _names(items, matched, known), meta)


def _written_length(exact: _ExactNodeList) -> int:
    """The length of ``exact`` written compactly: a NodeList's length is this when each key came
    once, unescaped, without spaces (else Go's reading may differ from msgspec's)."""
    size, keys = 2, 0
    if exact.items is not msgspec.UNSET:
        keys += 1
        items = exact.items
        size += 8 + (4 if items is None else 2 + sum(map(len, items)) + max(len(items) - 1, 0))
    if exact.metadata is not msgspec.UNSET:
        keys += 1
        size += 11 + len(exact.metadata)
    return size + max(keys - 1, 0)


def _spaced_list(raw: _Buf, items_at: str, meta_at: str, keep_items: bool) -> NodeListParts | None:
    """A list written with spaces, read in one pass all the same: its names from the same JSON
    without the spaces between tokens (msgspec.json.format keeps strings, escapes and numbers as
    written; Go skips those spaces), where the lengths can prove that no key came twice; its
    items kept as they came. None when that cannot be proved (then Go's rules, pair by pair)."""
    try:
        compact = msgspec.json.format(raw, indent=-1)
    except msgspec.DecodeError:  # what is wrong with it is said by Go's reading
        return None
    plain = plain_node_names(compact) if len(compact) < len(raw) else None
    if plain is None:
        return None
    names, list_meta = plain
    meta = _object(_trim(list_meta), meta_at, "v1.ListMeta") or {} if list_meta is not None else {}
    if not keep_items:
        return NodeListParts(None, names, meta)
    exact = _exact_node_list.decode(raw)  # the same keys, each once (proved above): the items' own bytes
    items = exact.items if isinstance(exact.items, list) else []
    return NodeListParts(_checked_items([bytes(item) for item in items], items_at, "v1.Node"), names, meta)


def _node_list_pairs(raw: _Buf, items_at: str, meta_at: str, keep_items: bool, known: Known | None,
                     into: GoSlice[bytes] | None, before: NodeListParts | None) -> NodeListParts:
    """A NodeList's pairs in turn, by Go's key rules (other spellings, a key given twice, spaces,
    wrong types). ``items`` given once, into nothing: its objects as they came, the known ones
    matched; more than once, or in a field given again (``into``, ``before``): decoded into the
    items before (repeats.py)."""
    pairs = _struct_pairs(raw, "v1.NodeList", _F_NODELIST) or []
    if into is None and sum(name == "items" for name, _ in pairs) > 1:
        into = GoSlice()
    items: list[bytes] = (into.value() or []) if into is not None else []
    matched = [-1] * len(items)
    meta = dict(before.metadata) if before is not None else {}
    for name, val in pairs:
        if name == "metadata":
            meta = {**meta, **(_object(val, meta_at, "v1.ListMeta") or {})}
        elif into is None:
            items, matched = _match_known(_raw_items(val, items_at, "v1.Node"), known)
        else:  # null and [] leave no element; otherwise each is decoded into the one before
            into.decode(_raw_items(val, items_at, "v1.Node"), object_into)
            items = into.value() or []
            matched = [-1] * len(items)
    return NodeListParts(items if keep_items else None, _names(items, matched, known), meta)


#: How many of the known objects after the last one matched an item is compared with before the
#: known objects are looked up by their bytes: a filter usually returns what it was sent, in that
#: order, with some left out.
_LOOK_AHEAD = 4


def _match_known(items: Sequence[_Buf], known: Known | None) -> tuple[list[bytes], list[int]]:
    """Each item as bytes, and the position of a known object with the same bytes (-1: none).

    A matched item is the known bytes object itself: its copy is dropped at once (the memory is
    used again for the next one, where keeping 15 MB of fresh copies costs more than the reading).
    The known objects are walked in order beside the items (a backend's usual answer: what it was
    sent, some left out), and only when that fails are they indexed by their bytes, once.
    """
    if not known or not known[0]:
        return [bytes(item) for item in items], [-1] * len(items)
    sent = known[0]
    count = len(sent)
    index: dict[bytes, int] | None = None
    out: list[bytes] = []
    where: list[int] = []
    at = 0  # the known object after the last one matched
    for raw_item in items:
        item = bytes(raw_item)
        found = -1
        if at < count and sent[at] == item:  # the usual case first: one comparison
            found = at
        else:
            for pos in range(at + 1, min(at + _LOOK_AHEAD, count)):
                if sent[pos] == item:
                    found = pos
                    break
        if found < 0:
            if index is None:
                index = {}
                for pos, obj in enumerate(sent):
                    index.setdefault(obj, pos)
            found = index.get(item, -1)
        if found >= 0:
            item, at = sent[found], found + 1
        out.append(item)
        where.append(found)
    return out, where


def _names(items: list[bytes], where: list[int], known: Known | None) -> list[str]:
    """metadata.name of each item, as node_name_of reads it: a name is a function of the
    object's bytes, so a matched item takes the known object's name instead of a decode (which
    was most of the per-backend time of a combined filter with full objects)."""
    if not known:
        return [node_name_of(item) for item in items]
    names = known[1]
    return [names[pos] if pos >= 0 else node_name_of(item) for item, pos in zip(items, where)]


def _raw_items(raw: _Buf, where: str, gotype: str) -> list[bytes]:
    """A []T of objects as each item's bytes (null list: [])."""
    k = _jkind(raw)
    if k == "null":
        return []
    if k != "array":
        raise _type_error(k, where, "[]" + gotype)
    return _checked_items([bytes(item) for item in _raw_list_decoder.decode(raw)], where, gotype)


def _checked_items(items: list[bytes], where: str, gotype: str) -> list[bytes]:
    """``items``, each checked to be an object or null, as Go's decoder requires of a []T.

    Go decodes the elements in order and names the first error it meets: the objects before a
    wrong one are read for their identity first (whose types may be wrong before)."""
    for index, item in enumerate(items):
        if item[0] not in (0x7B, 0x6E):  # '{' or 'n'
            for earlier in items[:index]:
                node_name_of(earlier)
            raise _type_error(_jkind(item), where, gotype)
    return items
