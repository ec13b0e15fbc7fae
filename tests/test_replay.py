"""Replay end to end: real backends on loopback whose behaviour changed between recording and
replay, replayed through the API; each kind of diff; targets; roles; binds; batches."""
from __future__ import annotations

import json
import time

import pytest
import requests
from django.contrib.auth.models import Group, User
from rest_framework.authtoken.models import Token

from tests.conftest import fixture_bytes, pass_all, reply, slow
from tests.test_bodies import CAPTURED, echo_nodes_as_sent
from tests.test_combined import backend as combined_backend
from tests.test_combined import failing, scores
from tests.test_per_backend import config_for, post

FULL = CAPTURED + "filter-request.nodecache-false.json"
NAMES = CAPTURED + "filter-request.nodecache-true.json"
PRIORITIZE = CAPTURED + "prioritize-request.nodecache-true.json"


def user_client(role: str) -> requests.Session:
    user = User.objects.create_user(f"{role}-{User.objects.count()}", password="pw")
    user.groups.add(Group.objects.get(name=role))
    session = requests.Session()
    session.headers["Authorization"] = f"Token {Token.objects.create(user=user).key}"
    session.username = user.username  # type: ignore[attr-defined]
    return session


@pytest.fixture
def developer(transactional_db):
    return user_client("developer")


def gpu_with_filters(backend_server, proxy, write_config, calls: int, behaviours: dict | None = None):
    """A names-only backend `gpu` behind a real proxy, and `calls` filter calls recorded through it:
    (backend, config path, server)."""
    backend = backend_server(behaviours or {"filter": pass_all})
    path = write_config(config_for(backend.url, nodeCacheCapable=True))
    server = proxy(path)
    for _ in range(calls):
        post(server, "/extender/gpu/filter", fixture_bytes(NAMES))
    server.flush()
    return backend, path, server


def recorded(server, admin_client, verb: str | None = None) -> list[dict]:
    server.flush()
    query = f"?verb={verb}" if verb else ""
    return admin_client.get(server.url + "/api/calls/" + query).json()["results"]


def replay_one(client, server, call_id: int, **fields) -> dict:
    response = client.post(server.url + "/api/replays/", json={"call": call_id, "wait": True, **fields}, timeout=60)
    assert response.status_code == 201, response.text
    run = response.json()
    assert run["status"] == "done" and run["total"] == 1 and run["done"] == 1, run
    return run


def only_diff(run: dict) -> dict:
    [item] = run["items"]
    return item["diff"]


def nodes_of_kind(diff: dict, kind: str) -> dict[str, tuple]:
    return {n["node"]: (n["before"], n["after"]) for n in diff["nodes"] if n["kind"] == kind}


def test_it_shows_a_node_that_is_now_filtered(backend_server, proxy, write_config, admin_client, developer):
    backend = backend_server({"filter": pass_all})
    server = proxy(write_config(config_for(backend.url)))
    post(server, "/extender/gpu/filter", fixture_bytes(FULL))  # full Node objects: the default traffic
    [call] = recorded(server, admin_client)
    backend.httpd.behaviours["filter"] = failing({"cpu-node-1": "no GPU on this node"})

    run = replay_one(developer, server, call["id"])

    diff = only_diff(run)
    assert diff["changed"] and diff["kinds"] == {"passed->failed": 1}
    assert nodes_of_kind(diff, "passed->failed") == {"cpu-node-1": (None, "no GPU on this node")}
    assert run["changed"] == 1 and run["counts"] == {"passed->failed": 1}
    replay = admin_client.get(server.url + f"/api/calls/{run['items'][0]['replay']}/").json()
    assert replay["is_replay"] and replay["replay_of"] == call["id"] and replay["failed_count"] == 1
    # The replay went out as the scheduler's call did: the same bytes.
    assert backend.received[-1][1] == fixture_bytes(FULL)


def test_it_keeps_replays_out_of_the_operators_listings(backend_server, proxy, write_config, admin_client, developer):
    backend = backend_server({"filter": pass_all})
    server = proxy(write_config(config_for(backend.url)))
    post(server, "/extender/gpu/filter", fixture_bytes(FULL))
    [call] = recorded(server, admin_client)

    run = replay_one(developer, server, call["id"])

    assert [c["id"] for c in recorded(server, admin_client)] == [call["id"]]
    only = admin_client.get(server.url + "/api/calls/?replays=only").json()["results"]
    assert [c["id"] for c in only] == [run["items"][0]["replay"]]
    assert len(admin_client.get(server.url + "/api/calls/?replays=include").json()["results"]) == 2
    assert admin_client.get(server.url + "/api/calls/?replays=maybe").status_code == 400


def test_it_shows_a_changed_reason(backend_server, proxy, write_config, admin_client, developer):
    backend = backend_server({"filter": failing({"gpu-node-1": "GPU memory full"})})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))
    post(server, "/extender/gpu/filter", fixture_bytes(NAMES))
    [call] = recorded(server, admin_client)
    backend.httpd.behaviours["filter"] = failing({"gpu-node-1": "GPU driver too old"})

    diff = only_diff(replay_one(developer, server, call["id"]))

    assert diff["kinds"] == {"reason": 1}
    assert nodes_of_kind(diff, "reason") == {"gpu-node-1": ("GPU memory full", "GPU driver too old")}


def test_it_shows_changed_scores_ranks_and_the_winner(backend_server, proxy, write_config, admin_client, developer):
    backend = backend_server({"prioritize": scores({"gpu-node-1": 9, "gpu-node-2": 4})})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))
    post(server, "/extender/gpu/prioritize", fixture_bytes(PRIORITIZE))
    [call] = recorded(server, admin_client)
    backend.httpd.behaviours["prioritize"] = scores({"gpu-node-1": 2, "gpu-node-2": 4})

    diff = only_diff(replay_one(developer, server, call["id"]))

    assert nodes_of_kind(diff, "score") == {"gpu-node-1": (9, 2)}
    assert nodes_of_kind(diff, "weighted_score") == {"gpu-node-1": (180, 40)}  # weight 2, x10
    assert nodes_of_kind(diff, "rank") == {"gpu-node-1": (1, 2), "gpu-node-2": (2, 1)}
    assert diff["winner"] == {"before": ["gpu-node-1"], "after": ["gpu-node-2"]}


@pytest.mark.parametrize(
    "now, outcome",
    [(reply(500, b"internal error"), "outcome:ok->error"), (slow(3, pass_all), "outcome:ok->timeout")],
)
def test_it_shows_a_backend_that_now_fails_or_times_out(backend_server, proxy, write_config, admin_client, developer, now, outcome):
    backend = backend_server({"filter": pass_all})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True, httpTimeout="1s")))
    post(server, "/extender/gpu/filter", fixture_bytes(NAMES))
    [call] = recorded(server, admin_client)
    backend.httpd.behaviours["filter"] = now

    run = replay_one(developer, server, call["id"])

    diff = only_diff(run)
    assert outcome in diff["kinds"] and diff["outcome"]["before"] == "ok"
    assert run["counts"][outcome] == 1


def test_it_replays_a_combined_call_by_the_schedulers_rules(backend_server, proxy, write_config, admin_client, developer):
    one = backend_server({"filter": pass_all})
    two = backend_server({"filter": pass_all})
    server = proxy(write_config({"backends": [
        combined_backend("one", one, filterVerb="filter", nodeCacheCapable=True),
        combined_backend("two", two, filterVerb="filter", nodeCacheCapable=True),
    ]}))
    post(server, "/extender/filter", fixture_bytes(NAMES))
    [call] = recorded(server, admin_client)
    two.httpd.behaviours["filter"] = failing({}, unresolvable={"gpu-node-2": "zone drained"})

    diff = only_diff(replay_one(developer, server, call["id"]))

    changes = {(n["backend"], n["node"]): n["kind"] for n in diff["nodes"]}
    assert changes == {("combined", "gpu-node-2"): "passed->unresolvable", ("two", "gpu-node-2"): "passed->unresolvable"}


def test_it_replays_against_another_url_in_its_own_mode(backend_server, proxy, write_config, admin_client, developer):
    original = backend_server({"filter": pass_all})
    candidate = backend_server({"check": failing({"gpu-node-3": "new version: too small"})})
    server = proxy(write_config(config_for(original.url)))
    post(server, "/extender/gpu/filter", fixture_bytes(FULL))
    [call] = recorded(server, admin_client)

    target = {"kind": "url", "url": candidate.url + "/v2", "filterVerb": "check", "nodeCacheCapable": True}
    diff = only_diff(replay_one(developer, server, call["id"], target=target))

    path, body = candidate.received[-1]
    assert path == "/v2/check" and json.loads(body)["Nodes"] is None  # converted to names for it
    assert json.loads(body)["NodeNames"] == [n["metadata"]["name"] for n in json.loads(fixture_bytes(FULL))["Nodes"]["items"]]
    assert nodes_of_kind(diff, "passed->failed") == {"gpu-node-3": (None, "new version: too small")}


def test_it_replays_against_policy_rules_given_inline(backend_server, proxy, write_config, admin_client, developer):
    backend = backend_server({"filter": pass_all})
    server = proxy(write_config(config_for(backend.url)))
    post(server, "/extender/gpu/filter", fixture_bytes(FULL))
    [call] = recorded(server, admin_client)

    rules = {"rules": [{"kind": "requiredLabels", "selector": "example.com/gpu.product"}]}
    diff = only_diff(replay_one(developer, server, call["id"], target={"kind": "policy", "rules": rules}))

    assert set(nodes_of_kind(diff, "passed->unresolvable")) == {"cpu-node-1"}  # a required label is unresolvable


def test_it_refuses_a_bad_target_with_the_field(backend_server, proxy, write_config, admin_client, developer):
    backend = backend_server({"filter": pass_all})
    server = proxy(write_config(config_for(backend.url)))
    post(server, "/extender/gpu/filter", fixture_bytes(FULL))
    [call] = recorded(server, admin_client)

    for target, field in [
        ({"kind": "url", "url": "ftp://x"}, "target.urlPrefix"),
        ({"kind": "url"}, "target.url"),
        ({"kind": "policy", "rules": {"rules": [{"kind": "nope"}]}}, "target.rules: rules[0].kind"),
        ({"kind": "teleport"}, "target.kind"),
    ]:
        response = developer.post(server.url + "/api/replays/", json={"call": call["id"], "target": target})
        assert response.status_code == 400 and field in json.dumps(response.json()), (target, response.text)


def test_it_lets_only_the_developer_role_replay(backend_server, proxy, write_config, admin_client, developer):
    backend = backend_server({"filter": pass_all})
    server = proxy(write_config(config_for(backend.url)))
    post(server, "/extender/gpu/filter", fixture_bytes(FULL))
    [call] = recorded(server, admin_client)
    body = {"call": call["id"], "target": {"kind": "url", "url": "http://127.0.0.1:9/"}}

    for role in ("viewer", "auditor"):
        response = user_client(role).post(server.url + "/api/replays/", json=body)
        assert response.status_code == 403 and "replay_calls" in response.text
    assert requests.post(server.url + "/api/replays/", json=body).status_code == 401
    assert developer.post(server.url + "/api/replays/", json=body).status_code == 201


def test_it_does_not_replay_a_bind_unless_asked(backend_server, proxy, write_config, admin_client, developer):
    backend = backend_server({"bind": reply(200, b'{"Error":""}')})
    server = proxy(write_config(config_for(backend.url)))
    post(server, "/extender/gpu/bind", fixture_bytes(CAPTURED + "bind-request.nodecache-false.json"))
    [call] = recorded(server, admin_client)
    before = len(backend.received)

    skipped = replay_one(developer, server, call["id"])
    assert skipped["skipped"] == 1 and "bind" in skipped["items"][0]["error"] and len(backend.received) == before

    asked = replay_one(developer, server, call["id"], allow_bind=True)
    assert asked["skipped"] == 0 and len(backend.received) == before + 1 and not only_diff(asked)["changed"]


def wait_for(client, server, run_id: int, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = client.get(server.url + f"/api/replays/{run_id}/").json()
        if run["status"] in ("done", "failed"):
            return run
        time.sleep(0.1)
    raise AssertionError(f"replay {run_id} did not finish: {run}")


def test_it_replays_a_filtered_batch_in_the_background_with_counts_and_links(
    backend_server, proxy, write_config, admin_client, developer
):
    backend = backend_server({"filter": pass_all, "prioritize": scores({"gpu-node-1": 5})})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))
    for _ in range(6):
        post(server, "/extender/gpu/filter", fixture_bytes(NAMES))
    post(server, "/extender/gpu/prioritize", fixture_bytes(PRIORITIZE))
    calls = recorded(server, admin_client)
    backend.httpd.behaviours["filter"] = failing({"gpu-node-2": "cordoned"})

    started = developer.post(server.url + "/api/replays/", json={"filters": {"verb": "filter", "backend": "gpu"}, "rate": 50})
    assert started.status_code == 201 and started.json()["status"] in ("queued", "running", "done")
    run = wait_for(developer, server, started.json()["id"])

    assert run["total"] == 6 and run["done"] == 6 and run["changed"] == 6 and run["errors"] == 0
    assert run["counts"] == {"passed->failed": 6}
    originals = {i["original"] for i in run["items"]}
    assert originals == {c["id"] for c in calls if c["verb"] == "filter"}
    item = run["items"][0]
    detail = developer.get(server.url + item["links"]["diff"]).json()
    assert nodes_of_kind(detail["diff"], "passed->failed") == {"gpu-node-2": (None, "cordoned")}
    assert developer.get(server.url + item["links"]["replay"]).json()["replay_of"] == item["original"]


def test_it_refuses_bad_selectors_and_rates(backend_server, proxy, write_config, developer):
    server = proxy(write_config(config_for(backend_server({}).url)))
    for body, field in [
        ({}, "selector"),
        ({"call": 1, "pod": "a/b"}, "selector"),
        ({"filters": {"verb": "dance"}}, "verb"),
        ({"filters": {"colour": "red"}}, "filters"),
        ({"call": 1, "rate": 10_000}, "rate"),
        ({"filters": {}, "wait": True}, "wait"),
    ]:
        response = developer.post(server.url + "/api/replays/", json=body)
        assert response.status_code == 400 and field in response.text, (body, response.text)

