"""Recorded bodies read back through the API: byte for byte, redactions marked, every call kind.

End to end: real backend servers on loopback, the real proxy, real recording, the API.
"""
from __future__ import annotations

import json

import msgspec
import pytest

from tests.conftest import fixture_bytes, pass_all, reply
from tests.test_combined import backend as combined_backend
from tests.test_combined import combined_call, scores
from tests.test_per_backend import config_for, only_call, post

CAPTURED = "captured-kube-scheduler-1.24/"


def echo_nodes_as_sent(handler, body: bytes) -> None:
    """A Go-like extender: compact JSON, every node passes, Node objects echoed as sent."""
    envelope = msgspec.json.decode(body, type=dict[str, msgspec.Raw])
    if bytes(envelope.get("Nodes", b"null")) != b"null":
        handler.answer(200, b'{"Nodes":' + bytes(envelope["Nodes"]) + b',"NodeNames":null,"FailedNodes":{},"Error":""}')
    else:
        handler.answer(200, b'{"Nodes":null,"NodeNames":' + bytes(envelope["NodeNames"]) + b',"FailedNodes":{},"Error":""}')


def get(admin_client, server, path: str):
    response = admin_client.get(server.url + path, timeout=30)
    assert response.status_code == 200, (path, response.status_code, response.text[:300])
    return response


@pytest.mark.parametrize(
    "name, verb, behaviour",
    [
        ("filter-request.nodecache-false.json", "filter", echo_nodes_as_sent),
        ("filter-request.nodecache-true.json", "filter", echo_nodes_as_sent),
        ("prioritize-request.nodecache-false.json", "prioritize", reply(200, b'[{"Host":"cpu-node-1","Score":3}]')),
        ("preempt-request.nodecache-false.json", "preempt", reply(200, b'{"NodeNameToMetaVictims":{}}')),
        ("bind-request.nodecache-false.json", "bind", reply(200, b'{"Error":""}')),
    ],
)
def test_it_gives_back_the_request_and_response_byte_for_byte(
    backend_server, proxy, write_config, admin_client, name, verb, behaviour
):
    backend = backend_server({verb: behaviour})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable="nodecache-true" in name)))
    request = fixture_bytes(CAPTURED + name)
    answer = post(server, f"/extender/gpu/{verb}", request)
    call = only_call(admin_client, server)

    got_request = get(admin_client, server, f"/api/calls/{call['id']}/request")
    got_response = get(admin_client, server, f"/api/calls/{call['id']}/response")

    assert got_request.content == request
    assert got_request.headers["X-Extproxy-Exact"] == "true"
    assert json.loads(got_request.headers["X-Extproxy-Marks"]) == []
    assert got_response.content == answer.content == backend_sent(backend)
    assert got_response.headers["X-Extproxy-Backend-Status"] == "200"


def backend_sent(backend) -> bytes:
    """What the test backend answered to its last request (re-run, as it is deterministic)."""
    import requests

    path, body = backend.received[-1]
    return requests.post(backend.url + path, data=body, timeout=10).content


def test_it_keeps_redacted_values_out_and_says_what_was_redacted(backend_server, proxy, write_config, admin_client):
    backend = backend_server({"filter": echo_nodes_as_sent})
    server = proxy(write_config(config_for(backend.url)))
    request = json.loads(fixture_bytes(CAPTURED + "filter-request.nodecache-false.json"))
    request["Pod"]["spec"]["containers"][0]["env"] = [{"name": "TOKEN", "value": "s3cr3t-value"}]
    body = json.dumps(request, separators=(",", ":")).encode()
    post(server, "/extender/gpu/filter", body)
    call = only_call(admin_client, server)

    got = get(admin_client, server, f"/api/calls/{call['id']}/request")

    assert b"s3cr3t-value" not in got.content
    assert got.headers["X-Extproxy-Exact"] == "false"
    assert "Pod.spec.containers[0].env[0].value redacted" in json.loads(got.headers["X-Extproxy-Marks"])
    restored = json.loads(got.content)
    assert restored["Pod"]["spec"]["containers"][0]["env"][0] == {"name": "TOKEN", "value": "[redacted]"}
    assert restored["Nodes"] == request["Nodes"]  # the Node objects are untouched
    # Outside the redacted Pod, the bytes are the ones received.
    assert got.content.endswith(body[body.index(b',"Nodes":'):])


def test_it_marks_node_objects_that_retention_removed(backend_server, proxy, write_config, admin_client):
    from extproxy.models import NodeObject

    backend = backend_server({"filter": echo_nodes_as_sent})
    server = proxy(write_config(config_for(backend.url)))
    post(server, "/extender/gpu/filter", fixture_bytes(CAPTURED + "filter-request.nodecache-false.json"))
    call = only_call(admin_client, server)
    NodeObject.objects.all().delete()

    got = get(admin_client, server, f"/api/calls/{call['id']}/request")

    assert got.headers["X-Extproxy-Exact"] == "false"
    items = json.loads(got.content)["Nodes"]["items"]
    assert items and all("$missing-node" in item for item in items)
    assert any("no longer stored" in m for m in json.loads(got.headers["X-Extproxy-Marks"]))


def test_it_gives_each_backends_part_of_a_combined_call(backend_server, admin_client, proxy, write_config):
    one = backend_server({"filter": echo_nodes_as_sent, "prioritize": scores({"cpu-node-1": 4})})
    two = backend_server({"filter": pass_all})
    server = proxy(write_config({"backends": [
        combined_backend("one", one, filterVerb="filter", prioritizeVerb="prioritize", weight=1),
        combined_backend("two", two, filterVerb="filter"),
    ]}))
    request = fixture_bytes(CAPTURED + "filter-request.nodecache-false.json")
    answer = post(server, "/extender/filter", request)
    call = combined_call(admin_client, server)

    assert get(admin_client, server, f"/api/calls/{call['id']}/request").content == request
    assert get(admin_client, server, f"/api/calls/{call['id']}/response").content == answer.content
    parts = {bc["backend"]: bc for bc in call["backend_calls"]}
    for name, backend in (("one", one), ("two", two)):
        base = f"/api/calls/{call['id']}/backend-calls/{parts[name]['id']}"
        assert get(admin_client, server, base + "/request").content == backend.received[-1][1]
        assert get(admin_client, server, base + "/response").content == backend_sent(backend)


def test_it_offers_a_pretty_form_and_a_download(backend_server, proxy, write_config, admin_client):
    backend = backend_server({"filter": echo_nodes_as_sent})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))
    request = fixture_bytes(CAPTURED + "filter-request.nodecache-true.json")
    post(server, "/extender/gpu/filter", request)
    call = only_call(admin_client, server)

    pretty = get(admin_client, server, f"/api/calls/{call['id']}/request?pretty=1")
    download = get(admin_client, server, f"/api/calls/{call['id']}/request?download=1")

    assert pretty.text.startswith('{\n  "Pod": {') and json.loads(pretty.content) == json.loads(request)
    assert download.content == request
    assert download.headers["Content-Disposition"] == f'attachment; filename="call-{call["id"]}-request.json"'


def test_it_answers_404_for_a_call_that_does_not_exist(admin_client, proxy):
    server = proxy()
    assert admin_client.get(server.url + "/api/calls/999999/request").status_code == 404
    assert admin_client.get(server.url + "/api/calls/999999/backend-calls/1/response").status_code == 404
