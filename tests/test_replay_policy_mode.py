"""A policy target standing in for a nodeCacheCapable extender gets full Node objects (the request
converted from names, by the stored Node objects), as a policy needs them."""
from __future__ import annotations

from tests.conftest import fixture_bytes, pass_all
from tests.test_per_backend import post
from tests.test_replay import FULL, NAMES, recorded, replay_one, user_client


def test_a_policy_stands_in_for_a_node_cache_capable_extender(backend_server, proxy, write_config, admin_client):
    backend = backend_server({"filter": pass_all})
    server = proxy(write_config({"backends": [
        {"name": "gpu", "urlPrefix": backend.url, "filterVerb": "filter", "nodeCacheCapable": True, "httpTimeout": "2s"},
        # Its calls bring the Node objects that names are converted from.
        {"name": "full", "urlPrefix": backend.url, "filterVerb": "filter", "nodeCacheCapable": False, "httpTimeout": "2s"},
    ]}))
    post(server, "/extender/full/filter", fixture_bytes(FULL))
    post(server, "/extender/gpu/filter", fixture_bytes(NAMES))
    [call] = [c for c in recorded(server, admin_client) if c["backend"] == "gpu"]

    rules = {"rules": [{"kind": "requiredLabels", "selector": "example.com/gpu.product"}]}
    run = replay_one(user_client("developer"), server, call["id"], target={"kind": "policy", "rules": rules})

    [item] = run["items"]
    assert item["error"] == "" and item["diff"]["outcome"] is None, item
    assert item["kinds"] == ["passed->unresolvable"]  # cpu-node-1 has no GPU label: the policy's own verdict
    replay = admin_client.get(server.url + f"/api/calls/{item['replay']}/").json()
    assert replay["outcome"] == "ok" and replay["error"] == ""


def test_a_policy_standing_in_takes_a_preempt_recorded_with_uids_only():
    """The built-in policy reads victims by UID: forced to full Nodes, it must not be refused the
    preempt calls of the nodeCacheCapable extender it stands in for (an HTTP backend is)."""
    from extproxy.config import BackendConfig
    from extproxy.replay.modes import preempt_in_mode

    body = fixture_bytes("captured-kube-scheduler-1.24/preempt-request.nodecache-true.json")
    policy = BackendConfig(name="gpu", policy="replay-rules", preempt_verb="preempt", node_cache_capable=False)
    http = BackendConfig(name="gpu", url_prefix="http://gpu", preempt_verb="preempt", node_cache_capable=False)
    assert preempt_in_mode(body, policy) == body
    assert "victims' UIDs only" in preempt_in_mode(body, http)


def test_a_policy_target_with_a_value_json_cannot_hold_is_refused():
    import math

    import pytest

    from extproxy.replay.targets import TargetError, check

    rules = {"description": math.nan, "rules": [{"kind": "requiredLabels", "selector": "a"}]}
    with pytest.raises(TargetError, match="not JSON"):
        check({"kind": "policy", "rules": rules}, {})
