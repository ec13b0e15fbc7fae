"""The call page: decisions, bodies (pretty, cut when large, redactions named; loaded when
opened when they hold Node objects or are large), each backend's part of a combined call,
copy-out; text from pods rendered as text; login and a role required."""
from __future__ import annotations

import json
import time

import pytest
from django.contrib.auth.models import User
from django.test import Client

from extproxy.models import Call
from tests.conftest import fixture_bytes
from tests.test_bodies import CAPTURED, echo_nodes_as_sent
from tests.test_combined import backend as combined_backend
from tests.test_dashboard_pages import XSS_POD, extender_args, record, trace, viewer
from tests.test_per_backend import config_for, post

pytestmark = pytest.mark.django_db(transaction=True)


def test_it_needs_login_and_a_role():
    record([trace("filter", extender_args(), {"NodeNames": ["node-01"], "Error": ""})])
    pk = Call.objects.get().pk
    assert Client().get(f"/calls/{pk}/")["Location"].startswith("/accounts/login/")
    User.objects.create_user("nobody", password="pw")
    client = Client()
    client.login(username="nobody", password="pw")
    assert client.get(f"/calls/{pk}/").status_code == 403


def test_it_shows_a_full_object_call_with_its_bodies_and_curl(backend_server, proxy, write_config):
    backend = backend_server({"filter": echo_nodes_as_sent})
    server = proxy(write_config(config_for(backend.url)))
    request = json.loads(fixture_bytes(CAPTURED + "filter-request.nodecache-false.json"))
    request["Pod"]["spec"]["containers"][0]["env"] = [{"name": "TOKEN", "value": "s3cr3t"}]
    post(server, "/extender/gpu/filter", json.dumps(request).encode())
    server.flush()
    pk = Call.objects.get().pk

    client = viewer()
    page = client.get(f"/calls/{pk}/").content.decode()
    # Node objects are loaded when the request is opened (a full-object call carries thousands)
    shown = client.get(f"/calls/{pk}/?body=request").content.decode()

    assert "&quot;Pod&quot;: {" in shown and "cpu-node-1" in shown  # pretty, with the Node objects back
    assert "Pod.spec.containers[0].env[0].value redacted" in shown and "s3cr3t" not in page + shown
    assert f"/api/calls/{pk}/request?download=1" in page and f"/api/calls/{pk}/fixture" in page
    assert f'href="/api/calls/{pk}/curl"' in page and "take the curl command from the link above" in page
    curl = client.get(f"/api/calls/{pk}/curl").content.decode()
    assert "curl -sS -X POST" in curl and f"{backend.url}/scheduler/filter" in curl and "s3cr3t" not in curl


def test_it_shows_each_backends_part_of_a_combined_call(backend_server, proxy, write_config):
    one = backend_server({"filter": echo_nodes_as_sent})
    server = proxy(write_config({"backends": [combined_backend("one", one, filterVerb="filter", nodeCacheCapable=True)]}))
    requests_body = fixture_bytes(CAPTURED + "filter-request.nodecache-true.json")
    post(server, "/extender/filter", requests_body)
    server.flush()
    call = Call.objects.get()
    part = call.backend_calls.get()

    page = viewer().get(f"/calls/{call.pk}/").content.decode()

    assert "Backend one · filter · ok" in page
    assert f"/api/calls/{call.pk}/backend-calls/{part.pk}/request?download=1" in page


def test_it_renders_pod_text_as_text_and_cuts_a_large_body():
    nodes = [f"node-{i:05d}-{'x' * 40}" for i in range(8000)]  # over 256 KiB of request
    record([trace("filter", extender_args(name=XSS_POD, nodes=nodes), {"NodeNames": nodes, "Error": ""}, at=time.time())])
    pk = Call.objects.get().pk

    client = viewer()
    page = client.get(f"/calls/{pk}/").content.decode()
    request = client.get(f"/calls/{pk}/?body=request").content.decode()  # large: loaded when opened

    assert XSS_POD not in page + request and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in request and "download the whole body" in request
    assert "node-07999" not in request  # the request was cut


def test_it_shows_a_full_object_reply_with_a_secret_in_a_reason(backend_server, proxy, write_config, admin_client):
    """The stored reply: Node objects cut out and put back, beside a FailedNodes reason that was
    redacted. The page, the reply's download and the decisions all show it redacted."""
    request = json.loads(fixture_bytes(CAPTURED + "filter-request.nodecache-false.json"))
    items = request["Nodes"]["items"]
    failed = items[-1]["metadata"]["name"]

    def answer(handler, body):
        args = json.loads(body)
        result = {"Nodes": dict(args["Nodes"], items=args["Nodes"]["items"][:-1]), "NodeNames": None,
                  "FailedNodes": {failed: "DB_PASSWORD=hunter2 is not accepted on this node"}, "Error": ""}
        handler.answer(200, json.dumps(result).encode())

    backend = backend_server({"filter": answer})
    server = proxy(write_config(config_for(backend.url)))
    sent = post(server, "/extender/gpu/filter", json.dumps(request).encode())
    server.flush()
    pk = Call.objects.get().pk

    client = viewer()
    page = client.get(f"/calls/{pk}/")
    shown = client.get(f"/calls/{pk}/?body=response").content.decode()  # Node objects: loaded when opened
    reply = admin_client.get(f"{server.url}/api/calls/{pk}/response")
    call = admin_client.get(f"{server.url}/api/calls/{pk}/").json()

    assert "hunter2" in sent.text  # the scheduler got the reason as the backend wrote it
    assert page.status_code == 200 and "hunter2" not in page.content.decode() + shown
    assert "DB_PASSWORD=[redacted]" in page.content.decode()  # the node's verdict, in the decisions
    assert "DB_PASSWORD=[redacted]" in shown and "FailedNodes" in shown
    kept = json.loads(reply.content)
    assert kept["Nodes"] == json.loads(sent.content)["Nodes"]  # every Node object back as it was
    assert kept["FailedNodes"] == {failed: "DB_PASSWORD=[redacted] is not accepted on this node"}
    assert reply.headers["X-Extproxy-Exact"] == "false"
    assert {d["node"]: d["reason"] for d in call["decisions"] if d["result"] == "failed"} == {failed: kept["FailedNodes"][failed]}


def test_what_it_loads_on_demand_or_searches_is_asked_for_clearly_or_refused_with_the_reason():
    nodes = [f"node-{i:05d}" for i in range(3000)]  # over the inline bound: loaded when opened
    record([trace("filter", extender_args(nodes=nodes), {"NodeNames": nodes[1:], "FailedNodes": {nodes[0]: "busy"},
                                                          "Error": ""}, at=time.time())])
    pk = Call.objects.get().pk
    client = viewer()

    page = client.get(f"/calls/{pk}/").content.decode()
    assert f'hx-get="/calls/{pk}/?body=request"' in page and "node-02999" not in page
    loaded = client.get(f"/calls/{pk}/?body=request").content.decode()
    assert "node-02999" in loaded and f"/api/calls/{pk}/request?download=1" in loaded
    found = client.get(f"/calls/{pk}/?node=node-00000", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="call-nodes")
    assert found.content.decode().startswith('<div id="call-nodes">') and "busy" in found.content.decode()

    for query, status, reason in (("?body=all", 400, "body: request or response"),
                                  ("?node=" + "x" * 254, 400, "node: at most 253 characters"),
                                  ("?part=abc&body=request", 404, ""), ("?part=99999999999999999999&body=request", 404, ""),
                                  ("?part=1&body=request", 404, "")):  # a per-backend call has no parts
        answer = client.get(f"/calls/{pk}/{query}")
        assert answer.status_code == status and reason in answer.content.decode(), query
    # The pod page's node search takes the same names, and says what it refuses.
    pod = "/pods/ml-team/trainer-7d9c5b6f8-b4x2s/"
    assert "1 of 3000 node(s) match" in client.get(pod + "?node=node-00000").content.decode()
    too_long = client.get(pod + "?node=" + "x" * 254)
    assert too_long.status_code == 400 and "node: at most 253 characters" in too_long.content.decode()
