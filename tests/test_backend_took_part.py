"""`backend=X` in the combined form: the calls backend X took part in (its own per-backend calls,
and the `combined` calls with a part by X), the same wherever the calls filters are taken: the
API's listing (and its `unindexed` answer), exports (records and manifest), fixture sets, replay
selection by the API and by `manage.py replay`. Real backends on loopback, a real proxy and
recorder."""
from __future__ import annotations

import json

import pytest

from extproxy.models import ReplayRun
from tests.conftest import fixture_bytes, pass_all
from tests.test_combined import backend as combined_backend
from tests.test_combined import failing, scores
from tests.test_export import fetch, token_client, whole_up_to_now
from tests.test_per_backend import post
from tests.test_replay import NAMES, PRIORITIZE, recorded, user_client, wait_for
from tests.test_replay_command import replay

NODE = "gpu-node-1"  # in every request below


@pytest.fixture
def scene(backend_server, proxy, write_config, admin_client):
    """Backends a (filters only) and b (prioritizes only) behind the combined entry: a combined
    filter has a part by a and none by b, a combined prioritize a part by b and none by a. And
    one per-backend filter call of a."""
    a, b = backend_server({"filter": pass_all}), backend_server({"prioritize": scores({NODE: 5})})
    path = write_config({"backends": [
        combined_backend("a", a, filterVerb="filter", nodeCacheCapable=True),
        combined_backend("b", b, prioritizeVerb="prioritize", weight=1, nodeCacheCapable=True),
    ]})
    server = proxy(path)
    for _ in range(2):
        assert post(server, "/extender/filter", fixture_bytes(NAMES)).status_code == 200
    for _ in range(3):
        assert post(server, "/extender/prioritize", fixture_bytes(PRIORITIZE)).status_code == 200
    assert post(server, "/extender/a/filter", fixture_bytes(NAMES)).status_code == 200
    calls = recorded(server, admin_client)
    assert len(calls) == 6
    took_part = {
        "a": {c["id"] for c in calls if c["verb"] == "filter"},  # two combined, one its own
        "b": {c["id"] for c in calls if c["verb"] == "prioritize"},
        "combined": {c["id"] for c in calls if c["backend"] == "combined"},
    }
    assert len(took_part["a"]) == 3 and len(took_part["b"]) == 3 and len(took_part["combined"]) == 5
    return server, path, a, took_part


def listed(admin_client, server, query: str) -> tuple[set[int], dict]:
    answer = admin_client.get(server.url + "/api/calls/?page_size=500&" + query).json()
    return {c["id"] for c in answer["results"]}, answer


def test_the_listing_exports_and_fixtures_select_the_calls_a_backend_took_part_in(scene, admin_client):
    server, _, _, took_part = scene
    developer, auditor = user_client("developer"), token_client("auditor", "audrey")
    for name, expected in took_part.items():
        ids, _ = listed(admin_client, server, f"backend={name}")
        assert ids == expected, name

        body, manifest = fetch(auditor, f"format=ndjson&backend={name}")
        records = [json.loads(line) for line in body.splitlines()]
        assert {r["call"] for r in records} == expected, name
        assert manifest["calls"] == len(expected) and manifest["records"] == len(records), name
        assert manifest["filters"]["backend"] == name and whole_up_to_now(body, manifest), name

        fixtures = developer.get(server.url + f"/api/fixtures/?backend={name}")
        assert fixtures.status_code == 200, fixtures.text
        assert {json.loads(line)["call"]["id"] for line in fixtures.content.splitlines()} == expected, name

    # With the node filter too: the index finds them, and nothing is left unaccounted for.
    for name in ("a", "b"):
        ids, answer = listed(admin_client, server, f"backend={name}&node={NODE}")
        assert ids == took_part[name] and answer["unindexed"]["calls"] == 0, (name, answer["unindexed"])
        body, manifest = fetch(auditor, f"format=csv&backend={name}&node={NODE}")
        assert manifest["calls"] == 3 and manifest["unindexed"] is None and whole_up_to_now(body, manifest), name
    assert listed(admin_client, server, "backend=nobody")[0] == set()


def test_a_replay_selected_by_backend_replays_the_calls_it_took_part_in(scene, backend_server):
    server, path, a, took_part = scene
    developer = user_client("developer")
    new_build = backend_server({"filter": failing({NODE: "a v2 says no"})})
    target = {"kind": "url", "url": new_build.url, "replaces": "a"}

    started = developer.post(server.url + "/api/replays/", json={"filters": {"backend": "a"}, "target": target})
    assert started.status_code == 201, started.text
    run = wait_for(developer, server, started.json()["id"])

    assert (run["status"], run["total"], run["done"], run["errors"], run["changed"]) == ("done", 3, 3, 0, 3), run
    assert {item["original"] for item in run["items"]} == took_part["a"]
    assert all(item["kinds"] == ["passed->failed"] for item in run["items"]), run["items"]
    assert len(new_build.received) == 3

    started = developer.post(server.url + "/api/replays/", json={"filters": {"backend": "b"}})
    run = wait_for(developer, server, started.json()["id"])
    assert (run["total"], run["errors"], run["changed"]) == (3, 0, 0), run
    assert {item["original"] for item in run["items"]} == took_part["b"]

    for name in ("a", "b"):
        code, out, err = replay("--config", path, "--backend", name, "--json")
        assert code == 0, out + err
        assert json.loads(out)["replayed"] == 3
        assert set(ReplayRun.objects.latest("pk").items.values_list("original_id", flat=True)) == took_part[name]


def test_a_url_target_stands_in_for_the_backend_the_selection_names(scene, backend_server):
    """Selected by backend a, a URL target without `replaces` replaces a in the combined calls too
    (without it they were errors: which backend does the URL stand in for?); a `replaces` given
    is kept, and a selection by `combined` names no backend to replace."""
    server, path, _, took_part = scene
    developer = user_client("developer")
    new_build = backend_server({"filter": failing({NODE: "a v2 says no"})})
    target = {"kind": "url", "url": new_build.url}

    started = developer.post(server.url + "/api/replays/", json={"filters": {"backend": "a"}, "target": target})
    assert started.status_code == 201, started.text
    assert started.json()["target"]["replaces"] == "a"
    run = wait_for(developer, server, started.json()["id"])
    assert (run["total"], run["errors"], run["changed"]) == (3, 0, 3), run
    assert {item["original"] for item in run["items"]} == took_part["a"] and len(new_build.received) == 3

    code, out, err = replay("--config", path, "--backend", "a", "--url", new_build.url, "--json")
    assert code == 1, out + err  # changed, no error
    assert (json.loads(out)["replayed"], json.loads(out)["errors"]) == (3, 0) and len(new_build.received) == 6
    assert ReplayRun.objects.latest("pk").target["replaces"] == "a"

    started = developer.post(server.url + "/api/replays/", json={"filters": {"backend": "a"},
                                                                 "target": dict(target, replaces="b")})
    assert started.json()["target"]["replaces"] == "b"
    wait_for(developer, server, started.json()["id"])
    started = developer.post(server.url + "/api/replays/", json={"filters": {"backend": "combined"}, "target": target})
    assert "replaces" not in started.json()["target"]
    wait_for(developer, server, started.json()["id"])
