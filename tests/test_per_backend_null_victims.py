"""The per-backend form forwards a preempt reply with a null victim as it came (extproxy is not
the scheduler there), and records on the call what the scheduler will do with it: panic in
convertToVictims (pkg/scheduler/extender.go), a nil *MetaPod dereferenced. It was recorded as
a victim with UID "" (a pod not given), which named another problem. Real backend on loopback."""
from __future__ import annotations

import json

import pytest

from tests.conftest import fixture_bytes, reply
from tests.test_dashboard_pages import viewer
from tests.test_per_backend import config_for, only_call, post


def test_a_reply_with_a_null_victim_is_forwarded_and_named_for_what_it_does(
        backend_server, proxy, write_config, admin_client):
    request = json.loads(fixture_bytes("preempt-request.nodecache-true.json"))
    uid = request["NodeNameToMetaVictims"]["node-02"]["Pods"][0]["UID"]
    answer = {"NodeNameToMetaVictims": {"node-02": {"Pods": [{"UID": uid}, None], "NumPDBViolations": 0}}}
    backend = backend_server({"*": reply(200, answer)})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))

    response = post(server, "/extender/gpu/preempt", json.dumps(request).encode())

    assert response.status_code == 200 and response.json() == answer
    call = only_call(admin_client, server)
    [nil] = [f for f in call["findings"] if f["kind"] == "nil-victim"]
    assert "node-02" in nil["detail"] and "nil *MetaPod" in nil["detail"] and "panics" in nil["detail"]
    assert call["outcome"] == "error"


@pytest.mark.parametrize("fixture,field", [
    ("preempt-request.nodecache-false.json", "NodeNameToVictims"),
    ("preempt-request.nodecache-true.json", "NodeNameToMetaVictims"),
])
def test_a_request_with_a_null_victim_is_recorded_with_a_finding_that_says_so(
        backend_server, proxy, write_config, admin_client, fixture, field):
    # kube-scheduler never sends a null victim (convertToMetaVictims, pkg/scheduler/extender.go,
    # would dereference it): the record said "a victim with UID ''" and nothing else
    request = json.loads(fixture_bytes(fixture))
    node = sorted(request[field])[0]
    request[field][node]["Pods"].append(None)
    backend = backend_server({"*": reply(200, {"NodeNameToMetaVictims": {}})})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=field == "NodeNameToMetaVictims")))

    response = post(server, "/extender/gpu/preempt", json.dumps(request).encode())

    assert response.status_code == 200 and len(backend.received) == 1  # forwarded as it came
    call = only_call(admin_client, server)
    [nil] = [f for f in call["findings"] if f["kind"] == "nil-victim"]
    assert f"{field}[{node!r}]" in nil["detail"] and "request" in nil["detail"] and "null" in nil["detail"]
    page = viewer().get(f"/calls/{call['id']}/").content.decode()  # the call page shows it
    assert "nil-victim" in page and f"{field}[{node!r}]".replace("'", "&#x27;") in page
