"""A null victim in a preempt exchange, in the combined form.

kube-scheduler's HTTPExtender.convertToVictims (pkg/scheduler/extender.go) reads each node's
``metaVictims.NumPDBViolations`` and passes each of its Pods to convertPodUIDToPod, which reads
``metaPod.UID`` for every pod on the node: a null there is a nil pointer dereferenced, and the
scheduler panics. extproxy read such a victim as UID "" (and a null MetaVictims as a node
without victims, which an ignorable backend may drop). In the combined form extproxy stands
in for the scheduler: it fails that backend's call with a finding that says why, and never
answers a null victim. A request whose victims hold a null pod comes from no scheduler (its
convertToMetaVictims would dereference it too): refused. Real backends on loopback."""
from __future__ import annotations

import json

import pytest

from tests.conftest import fixture_json, reply
from tests.test_combined import backend, combined_call, post

META = "preempt-request.nodecache-true.json"


@pytest.mark.parametrize("victims", [
    {"Pods": [{"UID": "e22bba58-41e9-514f-be15-cdca249f41b7"}, None], "NumPDBViolations": 0},
    None,
], ids=["null MetaPod", "null MetaVictims"])
@pytest.mark.parametrize("ignorable", [False, True])
def test_a_null_victim_fails_the_backend_call_and_never_reaches_the_scheduler(
        backend_server, proxy, write_config, admin_client, victims, ignorable):
    request = fixture_json(META)
    given = request["NodeNameToMetaVictims"]
    a = backend_server({"preempt": reply(200, {"NodeNameToMetaVictims": {"node-02": victims}})})
    server = proxy(write_config({"backends": [
        backend("a", a, preemptVerb="preempt", nodeCacheCapable=True, ignorable=ignorable),
    ]}))

    response = post(server, "preempt", json.dumps(request).encode())

    if ignorable:  # skipped, the map unchanged: what the scheduler had before this extender
        assert response.status_code == 200 and response.json()["NodeNameToMetaVictims"] == given
    else:
        assert response.status_code != 200 and "null" in response.text and "panics" in response.text
    call = combined_call(admin_client, server)
    [child] = call["backend_calls"]
    [nil] = [f for f in child["findings"] if f["kind"] == "nil-victim"]
    assert "node-02" in nil["detail"] and "convertToVictims" in nil["detail"] and "panics" in nil["detail"]


def test_a_request_whose_victims_hold_a_null_pod_is_refused(backend_server, proxy, write_config):
    request = fixture_json("preempt-request.nodecache-false.json")
    node = sorted(request["NodeNameToVictims"])[0]
    request["NodeNameToVictims"][node]["Pods"].append(None)
    a = backend_server({"preempt": reply(200, {"NodeNameToMetaVictims": {}})})
    server = proxy(write_config({"backends": [backend("a", a, preemptVerb="preempt", nodeCacheCapable=True)]}))

    response = post(server, "preempt", json.dumps(request).encode())

    assert response.status_code == 400 and "null victim" in response.text and a.received == []
