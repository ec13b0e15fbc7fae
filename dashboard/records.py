"""Reading what the recorder stored, for the pages: request envelopes without their Node objects,
Node objects from the node store when a page really needs them, the pod and bound node a
request names.

Read-only, and never trusting a body: a raw (undecodable) record, a body that is not a JSON
object, or a Node reference whose object retention already dropped all give "nothing here",
never an exception. Must not decode a whole range of calls: callers pass the few they show.
"""
from __future__ import annotations

import json
import zlib
from typing import Any

from extproxy.protocol.gostrings import SURROGATE_ESCAPE, go_strings
from extproxy.recording import restore_body

PRUNED_NODE = b'{"$node": "pruned"}'


class _References(dict):
    """A node loader's answer that maps every reference to a stand-in, never to a KeyError."""

    def __missing__(self, sha: str) -> bytes:
        return json.dumps({"$node": sha}).encode()


def load_nodes(refs: list[str]) -> dict[str, bytes]:
    """The stored Node objects for these references; a reference retention dropped is marked."""
    from extproxy.models import NodeObject

    found = _Pruned()
    wanted = sorted(set(refs))
    for start in range(0, len(wanted), 500):
        for sha, data in NodeObject.objects.filter(sha256__in=wanted[start : start + 500]).values_list("sha256", "data"):
            found[sha] = zlib.decompress(bytes(data))
    return found


class _Pruned(dict):
    def __missing__(self, sha: str) -> bytes:
        return PRUNED_NODE


def _read(stored: bytes | memoryview | None) -> tuple[dict[str, Any], str]:
    """(the stored body as a JSON object, Node items left as references; why not one, or "")."""
    if not stored:
        return {}, ""
    try:
        raw = restore_body(bytes(stored), lambda refs: _References())
        if SURROGATE_ESCAPE.search(raw):  # half a pair would reach a page UTF-8 cannot encode:
            raw = go_strings(raw) or raw  # U+FFFD, as kube-scheduler read it
        data = json.loads(raw)
    except RecursionError:
        # The recorder keeps a body nested just under its decoder's limit as an ok call; a
        # page decodes it further down the stack, where the same depth is past the limit.
        return {}, "nested too deep to decode here"
    except (ValueError, TypeError, zlib.error):
        return {}, "not readable as JSON"
    return (data, "") if isinstance(data, dict) else ({}, "not a JSON object")


def envelope(stored: bytes | memoryview | None) -> dict[str, Any]:
    """A stored request or reply as a JSON object, Node items left as references ({} if not one)."""
    return _read(stored)[0]


def unreadable(stored: bytes | memoryview | None) -> str:
    """Why a stored request or reply cannot be read as a JSON object here ("" when it can)."""
    return _read(stored)[1]


def read_request(call) -> tuple[dict[str, Any], str]:
    """`_read` of a call's stored request (loaded with it), kept on the call: the pod page reads
    each request up to three times (the pod's labels, the binder's interest, whether it is
    readable), and restoring a 5,000-node request takes about 12 ms each time. Kept with the
    body it came from, so a body set afresh is read afresh, and freed with the call. Only calls
    loaded with their requests are read here, which the listings (feed, pending pods) never
    load. Callers only read what they get."""
    stored = call.request_body
    kept = call.__dict__.get("_read_request")
    if kept is None or kept[0] is not stored:
        kept = call.__dict__["_read_request"] = (stored, _read(stored))
    return kept[1]


def decisions_of(call) -> list[dict]:
    """`call.decisions()`, decoded once per call for the pages of one call or one pod: the pod
    page asks a call for them several times (the reason summary, the node table, the score
    matrix), and a 5,000-node call's blob takes milliseconds each time. Kept with the blob it
    came from and freed with the call. Not for what walks many calls (the story told for each of
    the feed's or the pending list's attempts, the replay runner's pages of 100 calls): kept
    there, every call's decoded decisions would be held at once. Callers only read the list."""
    blob = call.decisions_blob
    kept = call.__dict__.get("_decoded_decisions")
    if kept is None or kept[0] is not blob:
        kept = call.__dict__["_decoded_decisions"] = (blob, call.decisions())
    return kept[1]


def decisions_reusing(call) -> list[dict]:
    """The decisions `decisions_of` kept for this call, else decoded and not kept: for what is
    told of every attempt of a listing and of the pod page alike (story.py), so that the pod
    page decodes each call once and a listing keeps none."""
    kept = call.__dict__.get("_decoded_decisions")
    return kept[1] if kept is not None and kept[0] is call.decisions_blob else call.decisions()


def unreadable_requests(calls: list) -> list[dict[str, Any]]:
    """The calls (with their stored requests loaded) whose request cannot be read here, and why:
    the pod page says so, since what it reads from them (labels, the binder's interest) is
    missing."""
    found = []
    for call in calls:
        if "request_body" not in call.get_deferred_fields() and (why := read_request(call)[1]):
            found.append({"call": call, "why": why})
    return found


def full_body(stored: bytes | memoryview | None) -> bytes:
    """A stored body as it was received, with every Node object loaded from the node store."""
    if not stored:
        return b""
    try:
        return restore_body(bytes(stored), load_nodes)
    except (ValueError, TypeError, zlib.error, RecursionError):  # RecursionError: as in _read
        return b""


def _pick(data: dict[str, Any], name: str) -> Any:
    """The value Go would bind to field `name`: exact key first, then case-insensitive."""
    if name in data:
        return data[name]
    folded = name.casefold()
    return next((v for k, v in data.items() if k.casefold() == folded), None)


def pod_labels(request: dict[str, Any]) -> dict[str, str] | None:
    """The pod's labels as a filter, prioritize or preempt request (`envelope`, `read_request`)
    carried them (None: no pod)."""
    pod = _pick(request, "Pod")
    if not isinstance(pod, dict):
        return None
    labels = (pod.get("metadata") or {}).get("labels") if isinstance(pod.get("metadata"), dict) else None
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


def bind_node(request: dict[str, Any]) -> str | None:
    """The node an ExtenderBindingArgs (`envelope`, `read_request`) names."""
    node = _pick(request, "Node")
    return node if isinstance(node, str) and node else None
