"""The combined form hands the next backend a Node returned with a key given twice as the
scheduler would hand it on: merged.

kube-scheduler, chaining extenders itself, decodes a filter reply (a key given twice is decoded
into the field as it stands: ObjectMeta's fields merge) and encodes the Nodes it holds for the
next extender. extproxy forwarded the returned object's bytes as they came; a Go backend reads
them as the scheduler would, but a Python backend keeps a key's last occurrence, so it read a
Node without the name the first ``metadata`` gave. Objects without a repeated key are still
forwarded byte for byte. Two real backends on loopback; the second is Python's json, recording
what it received."""
from __future__ import annotations

import json

import pytest

from extproxy import protocol as p
from tests.conftest import fixture_json
from tests.test_combined import backend, post

FULL = "captured-kube-scheduler-1.24/filter-request.nodecache-false.json"


def first_node_metadata_twice(handler, body):
    """Passes every node; the first one's metadata written twice (its identity, then the rest)."""
    items = p.split_extender_args(body).items
    first = json.loads(items[0])
    meta = first.pop("metadata")
    ident = {key: meta.pop(key) for key in ("name", "uid") if key in meta}
    repeated = '{"metadata":%s,%s,"metadata":%s}' % (json.dumps(ident), json.dumps(first)[1:-1], json.dumps(meta))
    nodes = b",".join([repeated.encode(), *items[1:]])
    handler.answer(200, b'{"Nodes":{"metadata":{},"items":[' + nodes + b']},"NodeNames":null,"FailedNodes":{},"Error":""}')


def nodes_list_twice(handler, body):
    """The first node, then a second Nodes whose one object names it as the second node."""
    items = p.split_extender_args(body).items
    again = json.dumps({"metadata": {"name": json.loads(items[1])["metadata"]["name"]}}).encode()
    handler.answer(200, b'{"Nodes":{"metadata":{},"items":[' + items[0] + b']},"Nodes":{"items":[' + again
                   + b']},"NodeNames":null,"FailedNodes":{},"Error":""}')


def python_pass_all(handler, body):
    """A Python backend: json.loads keeps a key's last occurrence."""
    args = json.loads(body)
    handler.answer(200, json.dumps({"Nodes": args["Nodes"], "NodeNames": None, "FailedNodes": {}, "Error": ""}).encode())


@pytest.mark.parametrize("first, held", [
    (first_node_metadata_twice, lambda sent: [(n["metadata"]["name"], n["metadata"]["uid"]) for n in sent]),
    (nodes_list_twice, lambda sent: [(sent[1]["metadata"]["name"], sent[0]["metadata"]["uid"])]),
])
def test_the_next_backend_gets_the_node_the_scheduler_would_hand_it(backend_server, proxy, write_config, first, held):
    a = backend_server({"filter": first})
    b = backend_server({"filter": python_pass_all})
    server = proxy(write_config({"backends": [
        backend("a", a, filterVerb="filter"), backend("b", b, filterVerb="filter"),
    ]}))
    request = fixture_json(FULL)
    body = json.dumps(request, separators=(",", ":")).encode()
    sent = request["Nodes"]["items"]

    answer = post(server, "filter", body)

    assert answer.json()["Error"] == ""
    [(_, to_b)] = b.received
    got = json.loads(to_b)["Nodes"]["items"]  # as a Python backend reads them
    assert [(n["metadata"]["name"], n["metadata"].get("uid")) for n in got] == held(sent)
    if first is first_node_metadata_twice:
        assert got[0]["metadata"].get("labels") == sent[0]["metadata"].get("labels")
        for item in p.split_extender_args(body).items[1:]:  # no repeated key: byte for byte
            assert item in to_b
