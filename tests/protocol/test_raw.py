"""Tests for extproxy.protocol.raw: the hot path's split of ExtenderArgs, checked against the full decoder."""

from __future__ import annotations

import json

import pytest

from extproxy import protocol as p
from extproxy.protocol import ProtocolError
from tests.conftest import FIXTURES as FIX

CAP = FIX / "captured-kube-scheduler-1.24"


def fx(name: str) -> bytes:
    return (FIX / name).read_bytes()


CAPTURED_SPLITS = [
    ("filter-request.nodecache-false.json", "default", "web-nc-false",
     "6c1b7b2c-f2d0-44f4-954a-937573bbe942", ["gpu-node-2", "gpu-node-3", "cpu-node-1", "gpu-node-1"], "objects"),
    ("prioritize-request.nodecache-false.json", "default", "web-nc-false",
     "6c1b7b2c-f2d0-44f4-954a-937573bbe942", ["gpu-node-2", "gpu-node-3", "cpu-node-1", "gpu-node-1"], "objects"),
    ("filter-request.nodecache-true.json", "default", "web-nc-true",
     "6b3e5f20-f54b-482a-8a6c-1b413be0c911", ["cpu-node-1", "gpu-node-2", "gpu-node-3", "gpu-node-1"], "names"),
    ("prioritize-request.nodecache-true.json", "default", "web-nc-true",
     "6b3e5f20-f54b-482a-8a6c-1b413be0c911", ["cpu-node-1", "gpu-node-2", "gpu-node-3", "gpu-node-1"], "names"),
]


def mode(split: p.RawArgs) -> str:
    return "names" if split.names_mode else "objects"


@pytest.mark.parametrize("name, ns, pod, uid, nodes, expected_mode", CAPTURED_SPLITS)
def test_it_splits_captured_requests_like_the_full_decoder(name, ns, pod, uid, nodes, expected_mode):
    body = (CAP / name).read_bytes()
    s = p.split_extender_args(body)
    assert (s.pod_identity, s.node_names, mode(s)) == ((ns, pod, uid), nodes, expected_mode)
    args = p.decode_extender_args(body)
    assert args.pod == s.pod and p.pod_identity(args.pod) == (ns, pod, uid)
    full_names = args.node_names if expected_mode == "names" else [n["metadata"]["name"] for n in args.nodes]
    assert full_names == nodes
    if s.items is not None:  # each item is the request's own bytes, and decodes to the full decoder's Node
        assert [json.loads(i) for i in s.items] == args.nodes and all(i in body for i in s.items)
    names_only = p.split_extender_args(body, keep_items=False)  # the recorder's reading
    assert (names_only.node_names, names_only.names_mode, names_only.items) == (s.node_names, s.names_mode, None)


@pytest.mark.parametrize(
    "name, nodes, expected_mode",
    [
        ("filter-request.nodecache-false.json", ["node-01", "node-02", "node-03", "node-04", "node-05"], "objects"),
        ("filter-request.nodecache-true.json", ["node-01", "node-02", "node-03", "node-04", "node-05"], "names"),
        ("prioritize-request.nodecache-true.json", ["node-01", "node-03"], "names"),
    ],
)
def test_it_splits_generated_requests(name, nodes, expected_mode):
    s = p.split_extender_args(fx(name))
    assert s.pod_identity == ("ml-team", "trainer-7d9c5b6f8-b4x2s", "6e1f1eb2-6544-5d63-a9e7-fba83e12a409")
    assert (s.node_names, mode(s)) == (nodes, expected_mode)


@pytest.mark.parametrize(
    "body, identity, names, items",
    [
        (b'{"pod":{"metadata":{"name":"p","namespace":"n","uid":"u"}},"nodenames":["a"]}', ("n", "p", "u"), ["a"], None),
        (b'{"Pod":null,"Nodes":null,"NodeNames":null}', ("", "", ""), [], None),
        (b'{"Pod":{},"Nodes":{"items":[{"metadata":{"name":"x"}},{},null]}}', ("", "", ""), ["x", "", ""],
         [b'{"metadata":{"name":"x"}}', b"{}", b"null"]),
        (b'{"Pod":{},"Nodes":{"ITEMS":[{"metadata":{"name":"x"}}]}}', ("", "", ""), ["x"], [b'{"metadata":{"name":"x"}}']),
        (b'{"Pod":{"metadata":null},"NodeNames":[],"Nodes":{"items":[{"metadata":{"name":"x"}}]}}', ("", "", ""), [], None),
        (b'{"NodeNames":["a"],"NodeNames":["b"]}', ("", "", ""), ["b"], None),
        (b'{"NodeNames":["a"]} trailing', ("", "", ""), ["a"], None),
    ],
)
def test_it_splits_edge_cases(body, identity, names, items):
    s = p.split_extender_args(body)
    assert (s.pod_identity, s.node_names, s.items) == (identity, names, items)


@pytest.mark.parametrize(
    "body", [b'{"NodeNames":"a"}', b'{"NodeNames":[1]}', b'{"Nodes":[]}', b'{"Pod":"x"}',
             b'{"Pod":{"metadata":{"name":5}}}', b'{"Nodes":{"items":[5]}}', b'{"Nodes":{"items":{}}}',
             b'{"Nodes":{"items":[{"metadata":{"name":5}}]}}', b'{"Nodes":"x","Nodes":null}']
)
def test_it_rejects_what_the_full_decoder_rejects(body):
    with pytest.raises(ProtocolError) as split_error:
        p.split_extender_args(body)
    with pytest.raises(ProtocolError) as full_error:
        p.decode_extender_args(body)
    with pytest.raises(ProtocolError) as names_error:
        p.split_extender_args(body, keep_items=False)
    assert str(split_error.value) == str(full_error.value)
    assert str(names_error.value) == str(split_error.value)


@pytest.mark.parametrize(
    "pod, expected",
    [
        ({"metadata": {"namespace": "n", "name": "p", "uid": "u"}}, ("n", "p", "u")),
        ({"metadata": {"name": "p"}}, ("", "p", "")),
        ({}, ("", "", "")),
        ({"metadata": None}, ("", "", "")),
        ({"metadata": {"name": 5}}, ("", "", "")),
    ],
)
def test_it_extracts_pod_identity(pod, expected):
    assert p.pod_identity(pod) == expected


def test_it_decodes_preemption_requests_in_both_modes():
    a = p.decode_preemption_args(fx("preempt-request.nodecache-true.json"))
    assert a.node_to_victims is None
    assert {k: v.pods for k, v in a.node_to_meta_victims.items()} == {
        "node-02": ["e22bba58-41e9-514f-be15-cdca249f41b7"],
        "node-03": ["bbf3e57f-9c21-526d-bc7b-764060222c6c", "fafeac27-3212-55d0-95df-9ad338e018fe"],
    }
    b = p.decode_preemption_args(fx("preempt-request.nodecache-false.json"))
    assert b.node_to_meta_victims is None
    assert {k: [pod["metadata"]["uid"] for pod in v.pods] for k, v in b.node_to_victims.items()} == {
        k: v.pods for k, v in a.node_to_meta_victims.items()
    }
    assert p.pod_identity(a.pod)[:2] == ("serving", "inference-critical-0")


def test_it_lists_envelope_keys_as_sent():
    assert p.envelope_keys(b'{"a":1,"A":2,"a":3}') == ["a", "A", "a"]
    assert p.envelope_keys(b"[]") == []
    assert p.envelope_keys(b"") == []


@pytest.mark.parametrize("body, expected", [
    (b'{"Pod":{"a":1},"NodeNames":["n"]}', ["Pod", "NodeNames"]),  # Go's compact output: no scan
    (b'{"Pod":{},"pod":{},"Pod":[1]}', ["Pod", "pod", "Pod"]),  # a key repeated, in any case
    (b' {\n  "Pod": {},\n  "Pod": null\n}\n', ["Pod", "Pod"]),  # whitespace around and inside
    (b'{"\\u0050od":1,"Pod":2}', ["Pod", "Pod"]),  # an escaped spelling of the same key
    (b"{}", []),
])
def test_it_lists_an_objects_keys_with_repeats_from_its_decoding(body, expected):
    import msgspec

    assert p.object_keys(body, msgspec.json.decode(body, type=dict[str, msgspec.Raw])) == expected


def test_the_same_bytes_object_read_twice_in_a_row_by_one_owner_is_decoded_once(monkeypatch):
    from extproxy.protocol import envelope
    from tests.protocol.counting import count_decodes

    decoded = count_decodes(monkeypatch, envelope, "_raw_dict_decoder")
    last = p.LastObject()
    body = fx("filter-request.nodecache-false.json").strip()
    names = p.read_extender_args(body, keep_items=False, last=last).nodes.names  # the recorder reads the names,
    assert {"Pod", "Nodes"} <= p.raw_object(body, last).keys() and len(decoded) == 1  # then stores the body
    assert names and p.raw_object(bytes(bytearray(body)), last) == p.raw_object(body, last)  # equal bytes, another object
    assert len(decoded) == 3
    p.raw_object(body)
    p.read_extender_args(body, keep_items=False)
    assert len(decoded) == 5 and last.body is body  # without an owner's slot: read each time, nothing kept
    view = bytearray(body)
    p.raw_object(view, last)
    view[view.index(b"Pod")] = ord("X")  # a mutable buffer may change: never taken from the slot
    assert "Pod" not in p.raw_object(view, last) and len(decoded) == 7
