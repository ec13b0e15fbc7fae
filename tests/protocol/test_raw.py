"""Tests for extproxy.protocol.raw: the hot path's summary and split of ExtenderArgs."""

from __future__ import annotations

import pytest

from extproxy import protocol as p
from extproxy.protocol import ProtocolError
from tests.conftest import FIXTURES as FIX

CAP = FIX / "captured-kube-scheduler-1.24"


def fx(name: str) -> bytes:
    return (FIX / name).read_bytes()


CAPTURED_SUMMARIES = [
    ("filter-request.nodecache-false.json", "default", "web-nc-false",
     "6c1b7b2c-f2d0-44f4-954a-937573bbe942", ["gpu-node-2", "gpu-node-3", "cpu-node-1", "gpu-node-1"], "objects"),
    ("prioritize-request.nodecache-false.json", "default", "web-nc-false",
     "6c1b7b2c-f2d0-44f4-954a-937573bbe942", ["gpu-node-2", "gpu-node-3", "cpu-node-1", "gpu-node-1"], "objects"),
    ("filter-request.nodecache-true.json", "default", "web-nc-true",
     "6b3e5f20-f54b-482a-8a6c-1b413be0c911", ["cpu-node-1", "gpu-node-2", "gpu-node-3", "gpu-node-1"], "names"),
    ("prioritize-request.nodecache-true.json", "default", "web-nc-true",
     "6b3e5f20-f54b-482a-8a6c-1b413be0c911", ["cpu-node-1", "gpu-node-2", "gpu-node-3", "gpu-node-1"], "names"),
]


@pytest.mark.parametrize("name, ns, pod, uid, nodes, mode", CAPTURED_SUMMARIES)
def test_it_summarizes_captured_requests(name, ns, pod, uid, nodes, mode):
    body = (CAP / name).read_bytes()
    s = p.summarize_extender_args(body)
    assert (s.pod_namespace, s.pod_name, s.pod_uid, s.node_names, s.mode) == (ns, pod, uid, nodes, mode)
    args = p.decode_extender_args(body)
    assert p.pod_identity(args.pod) == (ns, pod, uid)
    full_names = args.node_names if mode == "names" else [n["metadata"]["name"] for n in args.nodes]
    assert full_names == nodes


@pytest.mark.parametrize(
    "name, nodes, mode",
    [
        ("filter-request.nodecache-false.json", ["node-01", "node-02", "node-03", "node-04", "node-05"], "objects"),
        ("filter-request.nodecache-true.json", ["node-01", "node-02", "node-03", "node-04", "node-05"], "names"),
        ("prioritize-request.nodecache-true.json", ["node-01", "node-03"], "names"),
    ],
)
def test_it_summarizes_generated_requests(name, nodes, mode):
    s = p.summarize_extender_args(fx(name))
    assert (s.pod_namespace, s.pod_name, s.pod_uid) == (
        "ml-team", "trainer-7d9c5b6f8-b4x2s", "6e1f1eb2-6544-5d63-a9e7-fba83e12a409")
    assert (s.node_names, s.mode) == (nodes, mode)


@pytest.mark.parametrize(
    "body, expected",
    [
        (b'{"pod":{"metadata":{"name":"p","namespace":"n","uid":"u"}},"nodenames":["a"]}',
         p.ArgsSummary("n", "p", "u", ["a"], "names")),
        (b'{"Pod":null,"Nodes":null,"NodeNames":null}', p.ArgsSummary("", "", "", [], "none")),
        (b'{"Pod":{},"Nodes":{"items":[{"metadata":{"name":"x"}},{},null]}}',
         p.ArgsSummary("", "", "", ["x", "", ""], "objects")),
        (b'{"Pod":{"metadata":null},"NodeNames":[],"Nodes":{"items":[{"metadata":{"name":"x"}}]}}',
         p.ArgsSummary("", "", "", [], "names")),
        (b'{"NodeNames":["a"],"NodeNames":["b"]}', p.ArgsSummary("", "", "", ["b"], "names")),
        (b'{"NodeNames":["a"]} trailing', p.ArgsSummary("", "", "", ["a"], "names")),
    ],
)
def test_it_summarizes_edge_cases(body, expected):
    assert p.summarize_extender_args(body) == expected


@pytest.mark.parametrize(
    "body", [b'{"NodeNames":"a"}', b'{"NodeNames":[1]}', b'{"Nodes":[]}', b'{"Pod":"x"}',
             b'{"Pod":{"metadata":{"name":5}}}']
)
def test_it_rejects_bad_summaries(body):
    with pytest.raises(ProtocolError):
        p.summarize_extender_args(body)


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
