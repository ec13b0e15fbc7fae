"""A combined call whose replaced backend is down or slow: the scheduler ignores a failed
prioritizer (and an ignorable filter), so the combined call's own outcome stays `ok` and only
that backend's scores go missing. The diff must say which backend's part failed and how,
not only that its nodes were `removed`."""
from __future__ import annotations

from tests.conftest import fixture_bytes, slow
from tests.test_combined import backend, combined_call, post, scores
from tests.test_replay import user_client
from tests.test_replay_pages import logged_in

PRIORITIZE = "prioritize-request.nodecache-true.json"


def recorded_combined_prioritize(backend_server, proxy, write_config, admin_client):
    """Backends a (weight 2) and b (weight 3) behind the combined form, one prioritize recorded."""
    a = backend_server({"prioritize": scores({"node-01": 8, "node-03": 3})})
    b = backend_server({"prioritize": scores({"node-01": 1, "node-03": 2})})
    server = proxy(write_config({"backends": [
        backend("a", a, prioritizeVerb="prioritize", weight=2, nodeCacheCapable=True),
        backend("b", b, prioritizeVerb="prioritize", weight=3, nodeCacheCapable=True),
    ]}))
    totals = {e["Host"]: e["Score"] for e in post(server, "prioritize", fixture_bytes(PRIORITIZE)).json()}
    # The truth, from the backends' own scores: a's x2 plus b's x3.
    assert totals == {"node-01": 8 * 2 + 1 * 3, "node-03": 3 * 2 + 2 * 3}
    return server, combined_call(admin_client, server), b


def replay_replacing_b(server, call_id: int, url: str, **fields) -> dict:
    target = {"kind": "url", "url": url, "prioritizeVerb": "prioritize", "weight": 3, "nodeCacheCapable": True,
              "replaces": "b", **fields}
    response = user_client("developer").post(server.url + "/api/replays/",
                                              json={"call": call_id, "wait": True, "target": target}, timeout=60)
    assert response.status_code == 201, response.text
    return response.json()


def test_a_replaced_backend_that_is_down_shows_as_its_part_failing(backend_server, proxy, write_config, admin_client):
    server, call, b = recorded_combined_prioritize(backend_server, proxy, write_config, admin_client)

    run = replay_replacing_b(server, call["id"], "http://127.0.0.1:9/b")  # nothing listens on port 9

    [item] = run["items"]
    diff = item["diff"]
    assert diff["outcome"] is None  # the scheduler goes on without b's scores
    [part] = diff["parts"]
    assert (part["backend"], part["before"], part["after"]) == ("b", "ok", "error")
    assert part["error_before"] == "" and "Errno 111" in part["error_after"]  # ECONNREFUSED
    assert diff["kinds"]["part:ok->error"] == 1
    assert run["counts"]["part:ok->error"] == 1
    # b's scores are gone from the combined sum: a's x2 only.
    combined = {n["node"]: (n["before"], n["after"]) for n in diff["nodes"]
                if n["backend"] == "combined" and n["kind"] == "score"}
    assert combined == {"node-01": (19, 16), "node-03": (12, 6)}
    # The run's page says it too, beside the nodes.
    page = logged_in("developer").get(f"/replays/{run['id']}/").content.decode()
    assert "backend b: ok → error" in page and "Errno 111" in page


def test_a_replaced_backend_that_is_slow_shows_as_its_part_timing_out(backend_server, proxy, write_config, admin_client):
    server, call, b = recorded_combined_prioritize(backend_server, proxy, write_config, admin_client)
    sluggish = backend_server({"prioritize": slow(3, scores({"node-01": 1, "node-03": 2}))})

    run = replay_replacing_b(server, call["id"], sluggish.url + "/b", httpTimeout="1s")

    [part] = run["items"][0]["diff"]["parts"]
    assert (part["backend"], part["before"], part["after"]) == ("b", "ok", "timeout")
    assert run["counts"]["part:ok->timeout"] == 1


def test_an_unchanged_replay_shows_no_part_change(backend_server, proxy, write_config, admin_client):
    server, call, b = recorded_combined_prioritize(backend_server, proxy, write_config, admin_client)

    run = replay_replacing_b(server, call["id"], b.url + "/b")  # b as it was

    diff = run["items"][0]["diff"]
    assert diff["parts"] == [] and diff["kinds"] == {} and run["changed"] == 0

