"""A key given twice inside a Pod or Node object, read as kube-scheduler's decoder reads it.

Go's encoding/json decodes a later occurrence into the field as it stands (decode.go,
``object``): ``{"metadata":{"name":"a"},"metadata":{"namespace":"x"}}`` is one ObjectMeta named
a in namespace x; a string keeps its value on ``null``; a slice's elements are decoded into. A
dict built by json or msgspec keeps the last occurrence only: that Pod had no name, so every
reader of the dict (the pod memory, the bind guard, the policies, the recorder's
``pod_identity``) saw another pod than the scheduler. Written from Go's source, not run.
"""
from __future__ import annotations

import json

import pytest

from extproxy import protocol as p
from extproxy.protocol.merged import go_object, has_repeated_key

REPEATED_POD = b'{"metadata":{"name":"a","uid":"u1"},"metadata":{"namespace":"x"},"spec":{"containers":[]}}'
NODE = b'{"metadata":{"name":"n1"},"metadata":{"labels":{"zone":"z1"}}}'


def args(pod: bytes) -> bytes:
    return b'{"Pod":' + pod + b',"Nodes":{"metadata":{},"items":[' + NODE + b']},"NodeNames":null}'


def test_a_pod_with_metadata_twice_is_read_merged_by_every_reader():
    expected = ("x", "a", "u1")
    assert p.pod_identity(p.split_extender_args(args(REPEATED_POD)).pod) == expected
    assert p.pod_identity(p.decode_extender_args(args(REPEATED_POD)).pod) == expected
    preempt = b'{"Pod":' + REPEATED_POD + b',"NodeNameToVictims":null,"NodeNameToMetaVictims":{}}'
    assert p.pod_identity(p.decode_preemption_args(preempt).pod) == expected


def test_node_objects_built_from_a_filter_reply_are_merged():
    reply = b'{"Nodes":{"metadata":{},"items":[' + NODE + b']},"NodeNames":null,"Error":""}'
    [node] = p.decode_filter_result(reply).nodes
    assert node["metadata"] == {"name": "n1", "labels": {"zone": "z1"}}
    [node] = p.decode_extender_args(args(REPEATED_POD)).nodes
    assert node["metadata"] == {"name": "n1", "labels": {"zone": "z1"}}


CASES = [  # (JSON, what Go's decoding into a Pod leaves, as a dict)
    ('{"metadata":{"name":"a"},"metadata":{"name":null}}', {"metadata": {"name": "a"}}),
    ('{"metadata":{"name":"a"},"metadata":null}', {"metadata": {"name": "a"}}),
    ('{"spec":{"containers":[{"name":"c","image":"i"}]},"spec":{"containers":[{"image":"j"}]}}',
     {"spec": {"containers": [{"name": "c", "image": "j"}]}}),
    ('{"spec":{"containers":[{"name":"c"},{"name":"d"}]},"spec":{"containers":[{"image":"j"}]}}',
     {"spec": {"containers": [{"name": "c", "image": "j"}]}}),
    ('{"spec":{"containers":[{"name":"c"}]},"spec":{"containers":[]}}', {"spec": {"containers": []}}),
    ('{"spec":{"containers":[{"name":"c"}]},"spec":{"containers":null}}', {"spec": {"containers": None}}),
    ('{"metadata": {"name": "a"}, "metadata": {"uid": "u"}}', {"metadata": {"name": "a", "uid": "u"}}),
    ('{"metadata":{"name":"\\u0061"},"metadata":{"uid":"u"}}', {"metadata": {"name": "a", "uid": "u"}}),
    ('{"x":1.5,"metadata":{"name":"a"},"metadata":{"uid":"u"}}', {"x": 1.5, "metadata": {"name": "a", "uid": "u"}}),
]


@pytest.mark.parametrize("raw, expected", CASES, ids=[c[0] for c in CASES])
def test_a_repeated_key_is_decoded_into_what_the_earlier_one_filled(raw, expected):
    assert go_object(raw.encode()) == expected
    assert has_repeated_key(raw.encode())


PLAIN = [
    '{"metadata":{"name":"a","uid":"u"},"spec":{"containers":[{"name":"c"}]}}',
    '{"metadata": {"name": "a", "uid": "u"}, "spec": {"containers": [{"name": "c"}]}}',
    '{"metadata":{"name":"\\u0061"},"x":[1e5,2.5,-0]}',
    '{"a":{"k":1},"b":{"k":1}}',
]


@pytest.mark.parametrize("raw", PLAIN)
def test_an_object_without_a_repeated_key_is_what_json_reads(raw):
    assert go_object(raw.encode()) == json.loads(raw)
    assert not has_repeated_key(raw.encode())


POD_TWICE = [  # (the request's Pod pairs, the Pod's identity as the scheduler holds it)
    ('"Pod":{"metadata":{"name":"a","uid":"u1"}},"Pod":{"metadata":{"namespace":"x"}}', ("x", "a", "u1")),
    ('"Pod":{"metadata":{"name":"a","uid":"u1"}},"pod":{"spec":{}}', ("", "a", "u1")),
    ('"Pod":{"metadata":{"name":"a"}},"Pod":null,"Pod":{"metadata":{"uid":"u2"}}', ("", "", "u2")),
    ('"Pod":{"metadata":{"name":"a"}},"Pod":null', ("", "", "")),
]


@pytest.mark.parametrize("pairs, expected", POD_TWICE, ids=[c[0] for c in POD_TWICE])
def test_a_pod_given_twice_in_a_request_is_decoded_into_the_same_pod(pairs, expected):
    """ExtenderArgs.Pod and ExtenderPreemptionArgs.Pod are *v1.Pod: a later Pod is decoded into
    the Pod the pointer holds (the fields merge), null sets the pointer to nil."""
    request = ("{" + pairs + ',"Nodes":null,"NodeNames":["n1"]}').encode()
    assert p.read_extender_args(request).pod_identity == expected
    assert p.pod_identity(p.split_extender_args(request).pod) == expected
    assert p.pod_identity(p.decode_extender_args(request).pod) == expected
    preempt = ("{" + pairs + ',"NodeNameToMetaVictims":{}}').encode()
    assert p.pod_identity(p.decode_preemption_args(preempt).pod) == expected
