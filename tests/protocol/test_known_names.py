"""A filter reply's returned Nodes named from the objects the proxy sent (``known``).

The combined form tells the decoder which objects it sent and their names, so that a returned
object with the same bytes is not decoded again for its name. The reading must be the one
without them, item for item, error for error: these replies are the edges where it could
differ (objects left out, reordered, repeated, changed under the same name, never sent,
null, malformed, keys in other spellings)."""
from __future__ import annotations

import json

import pytest

from extproxy import protocol as p
from extproxy.protocol import ProtocolError

SENT = [json.dumps({"metadata": {"name": f"node-{i}", "uid": f"u{i}"}, "spec": {}}, separators=(",", ":")).encode()
        for i in range(12)]
NAMES = [f"node-{i}" for i in range(12)]
CHANGED = json.dumps({"metadata": {"name": "node-3", "labels": {"x": "y"}}}).encode()  # same name, other bytes
STRANGER = b'{"metadata":{"name":"node-99"}}'


def reply(items: list[bytes], key: str = "items") -> bytes:
    return b'{"Nodes":{"metadata":{},"' + key.encode() + b'":[' + b",".join(items) + b']},"NodeNames":null}'


REPLIES = {
    "echo": reply(SENT),
    "some left out": reply([SENT[i] for i in (0, 1, 5, 6, 11)]),  # gaps wider than the look-ahead
    "reversed": reply(SENT[::-1]),
    "repeated": reply([SENT[2], SENT[2], SENT[1], SENT[2]]),
    "changed under the same name": reply([SENT[2], CHANGED, SENT[4]]),
    "never sent": reply([SENT[0], STRANGER, SENT[1]]),
    "null item": reply([SENT[0], b"null", SENT[1]]),
    "no name": reply([SENT[0], b'{"metadata":{}}', b"{}"]),
    "whitespace inside an item": reply([SENT[0], b'{ "metadata" : { "name" : "node-1" } }']),
    "other spelling of items": reply([SENT[0], SENT[1]], key="Items"),
    "a name that is a number": reply([SENT[0], b'{"metadata":{"name":7}}']),
    "an item that is a string": reply([SENT[0], b'"node-1"', b'{"metadata":{"name":7}}']),
    "empty": reply([]),
}


def read(body: bytes, known) -> tuple:
    try:
        r = p.decode_filter_result(body, names_only=True, keep_items=True, known=known)
    except ProtocolError as exc:
        return ("error", str(exc))
    return (r.node_item_names, r.node_items, r.nodes_metadata)


@pytest.mark.parametrize("case", sorted(REPLIES))
@pytest.mark.parametrize("known", [(SENT, NAMES), (SENT[:3], NAMES[:3]), ([], [])], ids=["all", "some", "none"])
def test_named_from_the_sent_objects_as_when_each_is_decoded(case, known):
    assert read(REPLIES[case], known) == read(REPLIES[case], None)


def test_names_come_from_the_bytes_not_the_position():
    names, items, _ = read(REPLIES["changed under the same name"], (SENT, NAMES))
    assert names == ["node-2", "node-3", "node-4"] and items[1] == CHANGED
    names, _, _ = read(REPLIES["never sent"], (SENT, NAMES))
    assert names == ["node-0", "node-99", "node-1"]
