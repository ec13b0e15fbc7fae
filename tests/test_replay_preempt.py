"""Preempt calls replayed in the target's own mode, as kube-scheduler sends them: a call recorded
with full victim Pods goes to a nodeCacheCapable target as the victims' UIDs and PDB violation
counts (NodeNameToMetaVictims); one recorded with UIDs only cannot go to a full-mode target."""
from __future__ import annotations

import json

from tests.conftest import fixture_bytes
from tests.test_per_backend import config_for, post
from tests.test_replay import recorded, replay_one, user_client

FULL = "captured-kube-scheduler-1.24/preempt-request.nodecache-false.json"
UIDS = "captured-kube-scheduler-1.24/preempt-request.nodecache-true.json"


def keeps_every_victim(handler, body: bytes) -> None:
    """An extender that accepts every proposed victim, in whichever form it came."""
    args = json.loads(body)
    if args["NodeNameToMetaVictims"] is not None:
        out = args["NodeNameToMetaVictims"]
    else:
        out = {node: {"Pods": [{"UID": pod["metadata"]["uid"]} for pod in v["Pods"]],
                      "NumPDBViolations": v["NumPDBViolations"]} for node, v in args["NodeNameToVictims"].items()}
    handler.answer(200, json.dumps({"NodeNameToMetaVictims": out}).encode())


def reads_uids_only(handler, body: bytes) -> None:
    """A nodeCacheCapable extender: it reads NodeNameToMetaVictims, all kube-scheduler sends it."""
    out = json.loads(body)["NodeNameToMetaVictims"] or {}
    handler.answer(200, json.dumps({"NodeNameToMetaVictims": out}).encode())


def test_a_full_mode_preempt_goes_to_a_node_cache_capable_target_as_uids(backend_server, proxy, write_config, admin_client):
    backend = backend_server({"preempt": keeps_every_victim})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=False)))
    assert post(server, "/extender/gpu/preempt", fixture_bytes(FULL)).status_code == 200
    [call] = recorded(server, admin_client)
    target = backend_server({"preempt": reads_uids_only})

    run = replay_one(user_client("developer"), server, call["id"],
                     target={"kind": "url", "url": target.url + "/scheduler", "nodeCacheCapable": True})

    assert run["items"][0]["kinds"] == [] and run["changed"] == 0, run["items"]
    sent = json.loads(target.received[-1][1])
    recorded_args = json.loads(fixture_bytes(FULL))
    assert sent["NodeNameToVictims"] is None
    assert sent["NodeNameToMetaVictims"] == {
        node: {"Pods": [{"UID": pod["metadata"]["uid"]} for pod in v["Pods"]], "NumPDBViolations": v["NumPDBViolations"]}
        for node, v in recorded_args["NodeNameToVictims"].items()
    }
    assert sent["Pod"] == recorded_args["Pod"]


def test_a_preempt_recorded_with_uids_only_is_an_item_error_for_a_full_mode_target(
        backend_server, proxy, write_config, admin_client):
    backend = backend_server({"preempt": keeps_every_victim})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))
    assert post(server, "/extender/gpu/preempt", fixture_bytes(UIDS)).status_code == 200
    [call] = recorded(server, admin_client)
    target = backend_server({"preempt": keeps_every_victim})

    response = user_client("developer").post(server.url + "/api/replays/", timeout=60, json={
        "call": call["id"], "wait": True,
        "target": {"kind": "url", "url": target.url + "/scheduler", "nodeCacheCapable": False}})

    run = response.json()
    assert response.status_code == 201 and (run["status"], run["errors"]) == ("done", 1), run
    assert "full Pod objects" in run["items"][0]["error"] and "not in the record" in run["items"][0]["error"]
    assert target.received == []


def test_a_changed_pdb_violation_count_is_a_change(
        backend_server, proxy, write_config, admin_client):
    backend = backend_server({"preempt": keeps_every_victim})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))
    assert post(server, "/extender/gpu/preempt", fixture_bytes(UIDS)).status_code == 200
    [call] = recorded(server, admin_client)
    developer = user_client("developer")
    given = json.loads(fixture_bytes(UIDS))["NodeNameToMetaVictims"]

    def answers(more_violations: int):
        """The victims it was given, in reverse order, with more PDB violations than it was told."""
        def behave(handler, body: bytes) -> None:
            metas = json.loads(body)["NodeNameToMetaVictims"]
            out = {node: {"Pods": list(reversed(v["Pods"])), "NumPDBViolations": v["NumPDBViolations"] + more_violations} for node, v in metas.items()}
            handler.answer(200, json.dumps({"NodeNameToMetaVictims": out}).encode())
        return behave

    backend.httpd.behaviours["preempt"] = answers(2)
    [item] = replay_one(developer, server, call["id"])["items"]
    assert item["kinds"] == ["reason"] and item["diff"]["kinds"] == {"reason": len(given)}
    after = {n["node"]: n["after"] for n in item["diff"]["nodes"]}
    assert after["gpu-node-2"] == f"victims: {given['gpu-node-2']['Pods'][0]['UID']}; PDB violations: 3"


def test_victims_in_another_order_are_no_change(backend_server, proxy, write_config, admin_client):
    """Recorded and replayed with two victims on a node, listed the other way round."""
    def victims_in_order(reverse: bool):
        def behave(handler, body: bytes) -> None:
            metas = json.loads(body)["NodeNameToMetaVictims"]
            out = {}
            for node, v in metas.items():
                pods = v["Pods"] + [{"UID": "0-first-" + node}]
                out[node] = {"Pods": list(reversed(pods)) if reverse else pods, "NumPDBViolations": v["NumPDBViolations"]}
            handler.answer(200, json.dumps({"NodeNameToMetaVictims": out}).encode())
        return behave

    backend = backend_server({"preempt": victims_in_order(False)})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))
    request = json.loads(fixture_bytes(UIDS))
    for node, v in request["NodeNameToMetaVictims"].items():  # the second victim must be one the scheduler gave
        v["Pods"].append({"UID": "0-first-" + node})
    assert post(server, "/extender/gpu/preempt", json.dumps(request).encode()).status_code == 200
    [call] = recorded(server, admin_client)
    backend.httpd.behaviours["preempt"] = victims_in_order(True)

    [item] = replay_one(user_client("developer"), server, call["id"])["items"]
    assert item["kinds"] == [], item["diff"]


def test_an_unchanged_combined_preempt_of_two_backends_replays_unchanged(backend_server, proxy, write_config,
                                                                       admin_client):
    """The first backend keeps one node's victims, the second (full mode) gets only that node.
    The recording judged the second backend's reply against the request it got; the replay
    judged it by the chain's verdict, which also named the node the first had dropped: an
    `added` change on a call where nothing changed."""
    from tests.test_combined import backend, fixture_json
    from tests.test_combined import post as post_combined

    request = fixture_json("preempt-request.nodecache-false.json")
    keep = sorted(request["NodeNameToVictims"])[0]

    def keeps_the_first(handler, body: bytes) -> None:
        meta = json.loads(body)["NodeNameToMetaVictims"]
        handler.answer(200, json.dumps({"NodeNameToMetaVictims": {keep: meta[keep]}}).encode())

    first, second = backend_server({"preempt": keeps_the_first}), backend_server({"preempt": keeps_every_victim})
    server = proxy(write_config({"backends": [backend("a", first, preemptVerb="preempt", nodeCacheCapable=True),
                                              backend("b", second, preemptVerb="preempt")]}))
    assert post_combined(server, "preempt", json.dumps(request).encode()).status_code == 200
    [call] = recorded(server, admin_client)
    assert call["form"] == "combined" and call["outcome"] == "ok"

    run = replay_one(user_client("developer"), server, call["id"])

    assert (run["changed"], run["errors"], run["counts"]) == (0, 0, {}), run
    assert len(json.loads(second.received[-1][1])["NodeNameToVictims"]) == 1  # the replay's chain as the call's
