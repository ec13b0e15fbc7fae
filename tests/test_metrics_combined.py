"""/metrics' `extproxy_backend_duration_seconds` is per backend and verb in the combined form too:
each backend extproxy called for a combined call is observed (the built-in policy as well), and
a backend it did not call (no Node objects for it) is not. Real backends on loopback, the real
proxy, its /metrics."""
from __future__ import annotations

import re
import time

import requests

from tests.conftest import fixture_bytes, pass_all, reply
from tests.test_replay import recorded, replay_one, user_client

NAMES = "captured-kube-scheduler-1.24/filter-request.nodecache-true.json"
PRIORITIZE = "captured-kube-scheduler-1.24/prioritize-request.nodecache-true.json"


def observed(server, backend: str, verb: str) -> float:
    text = requests.get(server.url + "/metrics", timeout=30).text
    found = re.search(rf'extproxy_backend_duration_seconds_count\{{backend="{backend}",verb="{verb}"\}} (\S+)', text)
    return float(found.group(1)) if found else 0.0


def test_each_backend_of_a_combined_call_is_observed_but_one_not_called(backend_server, proxy, write_config):
    zone = backend_server({"filter": pass_all, "prioritize": reply(200, [{"Host": "gpu-node-1", "Score": 5}])})
    full = backend_server({"filter": pass_all})
    server = proxy(write_config({"backends": [
        {"name": "zone", "urlPrefix": zone.url, "filterVerb": "filter", "prioritizeVerb": "prioritize", "weight": 1,
         "nodeCacheCapable": True},
        {"name": "rules", "policy": "default", "nodeCacheCapable": True},
        # full Node objects, which extproxy registered with names does not have: never called
        {"name": "full", "urlPrefix": full.url, "filterVerb": "filter", "ignorable": True},
    ], "policies": {"default": {"rules": [{"kind": "avoidTaints", "effects": ["NoSchedule"]}]}}}))
    series = [("zone", "filter"), ("zone", "prioritize"), ("rules", "filter"), ("full", "filter")]
    before = {s: observed(server, *s) for s in series}

    for _ in range(2):
        assert requests.post(server.url + "/extender/filter", data=fixture_bytes(NAMES), timeout=30).status_code == 200
        assert requests.post(server.url + "/extender/prioritize", data=fixture_bytes(PRIORITIZE), timeout=30).status_code == 200
    assert len(zone.received) == 4 and full.received == []

    expected = {("zone", "filter"): 2, ("zone", "prioritize"): 2, ("rules", "filter"): 2, ("full", "filter"): 0}
    # Observed aside, after the answer (at the latest when the aside's timer fires): polled for.
    deadline = time.monotonic() + 10
    while (grown := {s: observed(server, *s) - before[s] for s in series}) != expected and time.monotonic() < deadline:
        time.sleep(0.05)
    assert grown == expected


def test_a_replayed_combined_call_is_not_counted_as_the_backends_traffic(backend_server, proxy, write_config, admin_client):
    zone = backend_server({"filter": pass_all})
    server = proxy(write_config({"backends": [
        {"name": "zone", "urlPrefix": zone.url, "filterVerb": "filter", "nodeCacheCapable": True}]}))
    start = observed(server, "zone", "filter")  # the registry is the process's: earlier tests' calls are in it
    assert requests.post(server.url + "/extender/filter", data=fixture_bytes(NAMES), timeout=30).status_code == 200
    [call] = recorded(server, admin_client)
    before = grown_to(server, start + 1)

    replay_one(user_client("developer"), server, call["id"], target={"kind": "configured"})
    # One more call of the scheduler's, observed after the replay's would have been: only it counts.
    assert requests.post(server.url + "/extender/filter", data=fixture_bytes(NAMES), timeout=30).status_code == 200

    assert len(zone.received) == 3 and grown_to(server, before + 1) == before + 1


def grown_to(server, count: float) -> float:
    """zone's filter count once it is at least `count` (observations land after the answer)."""
    deadline = time.monotonic() + 10
    while (got := observed(server, "zone", "filter")) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)  # anything observed late lands now, and is seen below
    return observed(server, "zone", "filter")
