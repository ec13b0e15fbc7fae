"""A list field given more than once, read as kube-scheduler's decoder reads it.

Go's encoding/json (decode.go) decodes a repeated key into the field as it stands. A slice is
reused (``(*decodeState).array``): element i of the later array is decoded into element i
(``d.value(v.Index(i))``), the length becomes the later array's (``v.SetLen(i)``), and the
elements past it stay in the backing array, to be decoded into again by a longer array later
(``SetLen`` within the capacity, and ``reflect.Value.Grow``, whose runtime ``reflect_growslice``
"preserve[s] memory of old[old.len:old.cap]"). ``null`` sets the slice to nil and ``[]`` makes a
new empty one (``literalStore``: ``v.SetZero()`` for a slice or pointer; ``array``:
``reflect.MakeSlice(v.Type(), 0, 0)``). Into an element: a string takes a new string and is left
as it was by ``null`` ("ignore null for primitives/string"); a struct element (``v1.Node``) is
decoded into, so the two objects' fields merge (ObjectMeta's too: identity.py), and ``null``
leaves it; a pointer element (``*MetaPod``) is set to nil by ``null`` and otherwise the struct it
points to is decoded into (``indirect``). A pointer field (``NodeNames *[]string``, ``Nodes
*v1.NodeList``) is reused, so a later ``Nodes`` without ``items`` keeps the earlier items.
No Go toolchain was at hand: these expectations are written from that source, not run.
"""
from __future__ import annotations

import json

import pytest

from extproxy import protocol as p
from extproxy.protocol.objects import identity_of

NAMES = [
    ('"NodeNames":["a","b"],"NodeNames":["c"]', ["c"]),
    ('"NodeNames":["a","b"],"NodeNames":[null]', ["a"]),
    ('"NodeNames":["a","b"],"NodeNames":["c"],"NodeNames":["d",null]', ["d", "b"]),
    ('"NodeNames":["a"],"NodeNames":null,"NodeNames":[null]', [""]),
    ('"NodeNames":["a"],"NodeNames":[],"NodeNames":[null]', [""]),
    ('"NodeNames":["a"],"nodenames":[null,"b"]', ["a", "b"]),
    ('"NodeNames":["a",null]', ["a", ""]),
]


@pytest.mark.parametrize("pairs, expected", NAMES, ids=[c[0] for c in NAMES])
def test_repeated_node_names_are_decoded_into_the_same_slice(pairs, expected):
    body = ("{" + pairs + "}").encode()
    assert p.decode_filter_result(body).node_names == expected
    assert p.decode_filter_result(body, names_only=True).node_names == expected
    assert p.read_extender_args(body).node_names == expected


A = '{"metadata":{"name":"a","uid":"u"}}'
B = '{"metadata":{"name":"b"}}'
C = '{"metadata":{"name":"c"}}'

NODES = [  # (the reply's pairs, each item's identity as the scheduler holds it)
    ('"Nodes":{"items":[%s]},"Nodes":{"items":[%s]}' % (A, B), [("", "b", "u")]),
    ('"Nodes":{"items":[%s]},"Nodes":{}' % A, [("", "a", "u")]),
    ('"Nodes":{"items":[%s]},"Nodes":{"metadata":{}}' % A, [("", "a", "u")]),
    ('"Nodes":{"items":[%s]},"Nodes":{"items":[null]}' % A, [("", "a", "u")]),
    ('"Nodes":{"items":[%s,%s]},"Nodes":{"items":[null]},"Nodes":{"items":[null,null]}' % (A, C),
     [("", "a", "u"), ("", "c", "")]),
    ('"Nodes":{"items":[%s]},"Nodes":null,"Nodes":{"items":[null]}' % A, [("", "", "")]),
    ('"Nodes":{"items":[%s]},"Nodes":{"items":[]},"Nodes":{"items":[%s]}' % (A, B), [("", "b", "")]),
    ('"Nodes":{"items":[%s],"items":[{"metadata":{"uid":"v"}}]}' % A, [("", "a", "v")]),
    ('"Nodes":{"items":[%s], "Items":[%s, %s]}' % (A, B, C), [("", "b", "u"), ("", "c", "")]),
    ('"Nodes":{"items":[%s,%s]},"nodes":{"items":[%s]}' % (A, C, B), [("", "b", "u")]),
]


def _reading(body: bytes):
    """Each reader's names and, where it keeps them, the items' bytes."""
    kept = p.decode_filter_result(body, names_only=True, keep_items=True)
    full = p.decode_filter_result(body)
    args = p.read_extender_args(body)
    names_only = p.read_extender_args(body, keep_items=False)
    return kept, full, args, names_only


@pytest.mark.parametrize("pairs, expected", NODES, ids=[c[0] for c in NODES])
def test_repeated_nodes_are_decoded_into_the_same_objects(pairs, expected):
    body = ("{" + pairs + "}").encode()
    kept, full, args, names_only = _reading(body)
    names = [identity[1] for identity in expected]
    assert kept.node_item_names == args.nodes.names == names_only.nodes.names == names
    # the bytes kept to forward are one JSON object each, read as the scheduler holds it
    assert [identity_of(item) for item in kept.node_items] == expected
    assert [identity_of(item) for item in args.nodes.items] == expected
    assert all(isinstance(json.loads(item), (dict, type(None))) for item in kept.node_items)  # one value each
    assert len(full.nodes) == len(expected)


VICTIMS = [  # one MetaVictims' Pods given more than once: []*MetaPod, decoded into the same slice
    ('"Pods":[{"UID":"a"},{"UID":"b"}],"Pods":[{}]', ["a"]),
    ('"Pods":[{"UID":"a"}],"Pods":[{"uid":"c"}]', ["c"]),
    ('"Pods":[{"UID":"a"},{"UID":"b"}],"Pods":[{"UID":"c"}],"Pods":[{},{}]', ["c", "b"]),
    ('"Pods":[{"UID":"a"}],"Pods":[null],"Pods":[{}]', [""]),
    ('"Pods":[{"UID":"a"}],"Pods":null,"Pods":[{}]', [""]),
]


@pytest.mark.parametrize("pairs, expected", VICTIMS, ids=[c[0] for c in VICTIMS])
def test_repeated_victims_pods_are_decoded_into_the_same_pods(pairs, expected):
    body = ('{"NodeNameToMetaVictims":{"n":{' + pairs + '}}}').encode()
    assert p.decode_preemption_result(body).node_to_meta_victims["n"].pods == expected


def test_repeated_maps_are_merged_key_by_key_and_each_value_replaced():
    """A map is reused (object: ``if v.IsNil() { v.Set(reflect.MakeMap(t)) }``, else kept), and
    each key's value is decoded into a zeroed ``mapElem`` and stored with ``SetMapIndex``: the
    maps merge key by key, a key's value is replaced, not decoded into (a *MetaVictims too)."""
    failed = p.decode_filter_result(b'{"FailedNodes":{"a":"1","b":"2"},"FailedNodes":{"b":null,"c":"3"}}')
    assert failed.failed_nodes == {"a": "1", "b": "", "c": "3"}
    victims = p.decode_preemption_result(
        b'{"NodeNameToMetaVictims":{"n":{"Pods":[{"UID":"a"}],"NumPDBViolations":2},"m":null},'
        b'"NodeNameToMetaVictims":{"n":{"Pods":[{}]}}}')
    assert victims.node_to_meta_victims == {"n": p.MetaVictims([""], 0), "m": None}
