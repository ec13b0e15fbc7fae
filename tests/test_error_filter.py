"""`error=` finds the calls whose error text holds the words, the combined form's included: there
an ignorable backend's failure is its part's error, while the combined answer (the scheduler
went on without it) has none, so matching the call's own error alone never found it. Real
backends on loopback, the real proxy and recorder, the API and an export."""
from __future__ import annotations

import json

from tests.conftest import fixture_bytes, pass_all
from tests.test_combined import backend as combined_backend
from tests.test_combined import post
from tests.test_export import fetch, token_client, whole_up_to_now
from tests.test_per_backend import post as post_to
from tests.test_replay import NAMES, recorded


def says(words: str):
    def behave(handler, body):
        handler.answer(200, json.dumps({"NodeNames": None, "FailedNodes": {}, "Error": words}).encode())
    return behave


def test_the_error_filter_finds_a_backends_failure_inside_a_combined_call(backend_server, proxy, write_config,
                                                                        admin_client):
    broken, fine = backend_server({"filter": says("disk quota exceeded on gpu-db")}), backend_server({"filter": pass_all})
    server = proxy(write_config({"backends": [
        combined_backend("broken", broken, filterVerb="filter", nodeCacheCapable=True, ignorable=True),
        combined_backend("fine", fine, filterVerb="filter", nodeCacheCapable=True),
    ]}))
    assert post(server, "filter", fixture_bytes(NAMES)).json()["Error"] == ""  # the scheduler went on without it
    assert post_to(server, "/extender/broken/filter", fixture_bytes(NAMES)).status_code == 200
    assert post_to(server, "/extender/fine/filter", fixture_bytes(NAMES)).status_code == 200
    calls = {(c["backend"]): c["id"] for c in recorded(server, admin_client)}
    assert set(calls) == {"combined", "broken", "fine"}

    listed = admin_client.get(server.url + "/api/calls/?error=QUOTA+exceeded").json()["results"]
    assert {c["id"] for c in listed} == {calls["combined"], calls["broken"]}
    body, manifest = fetch(token_client("auditor", "audrey"), "format=ndjson&error=quota+exceeded")
    assert {json.loads(line)["call"] for line in body.splitlines()} == {calls["combined"], calls["broken"]}
    assert manifest["calls"] == 2 and whole_up_to_now(body, manifest)
