"""The live feed's `node` filter finds the calls the API's `node` filter finds: those whose
request involved the node, also when they came to no verdict on it (an error, a timeout). The
calls an operator filters by node for are often exactly those. Real backends on loopback, the
real proxy and recorder, the feed's own endpoint (which the page also asks for calls arriving on
the stream)."""
from __future__ import annotations

import json

import requests
from django.contrib.auth.models import User
from django.test import Client

from tests.conftest import fixture_json, pass_all, slow

NAMES = "captured-kube-scheduler-1.24/filter-request.nodecache-true.json"


def names_request(nodes: list[str]) -> bytes:
    args = fixture_json(NAMES)
    args["NodeNames"] = nodes
    return json.dumps(args).encode()


def test_the_feed_node_filter_keeps_the_calls_that_failed_or_timed_out_on_the_node(
    backend_server, proxy, write_config, admin_client
):
    zone = backend_server({"filter": pass_all})
    gpu = backend_server({"filter": pass_all})
    stuck = backend_server({"filter": slow(1.0, pass_all)})
    server = proxy(write_config({"backends": [
        {"name": "zone", "urlPrefix": zone.url, "filterVerb": "filter", "nodeCacheCapable": True},
        # full Node objects, which extproxy registered with names does not have: not called, an error
        {"name": "gpu", "urlPrefix": gpu.url, "filterVerb": "filter"},
        {"name": "stuck", "urlPrefix": stuck.url, "filterVerb": "filter", "nodeCacheCapable": True,
         "httpTimeout": "300ms"},
    ]}))
    both = names_request(["cpu-node-1", "gpu-node-1"])
    answers = {
        "error": requests.post(server.url + "/extender/filter", data=both, timeout=30),
        "timeout": requests.post(server.url + "/extender/stuck/filter", data=both, timeout=30),
        "ok": requests.post(server.url + "/extender/zone/filter", data=both, timeout=30),
        "elsewhere": requests.post(server.url + "/extender/zone/filter", data=names_request(["cpu-node-1"]), timeout=30),
    }
    assert "was not called" in answers["error"].json()["Error"]
    assert "no answer within" in answers["timeout"].json()["Error"]
    server.flush()

    api = admin_client.get(server.url + "/api/calls/", params={"node": "gpu-node-1"}, timeout=30).json()["results"]
    assert sorted((c["backend"], c["outcome"]) for c in api) == [("combined", "error"), ("stuck", "timeout"), ("zone", "ok")]

    User.objects.create_superuser("op", "", "pw")
    client = Client()
    assert client.login(username="op", password="pw")
    feed = client.get("/feed/calls/", {"node": "gpu-node-1"}).json()["results"]
    assert [c["id"] for c in feed] == [c["id"] for c in api]
    # as the page asks for calls arriving on the stream: which of these involve the node
    every = ",".join(str(c["id"]) for c in client.get("/feed/calls/").json()["results"])
    arriving = client.get("/feed/calls/", {"node": "gpu-node-1", "ids": every}).json()["results"]
    assert sorted(c["id"] for c in arriving) == sorted(c["id"] for c in api)
