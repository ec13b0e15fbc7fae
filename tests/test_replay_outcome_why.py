"""A replay whose call went from ok to error says why: the error text the target's answer (or
its absence) gave, and in a combined call which backend's part failed. Before, the diff held
only `outcome ok -> error`, and the developer had to open the replayed call to learn the cause."""
from __future__ import annotations

from tests.conftest import fixture_bytes, pass_all
from tests.test_combined import backend, combined_call, failing
from tests.test_combined import post as post_combined
from tests.test_per_backend import config_for, post
from tests.test_replay import FULL, recorded, user_client
from tests.test_replay_pages import logged_in


def replay(server, call_id: int, target: dict) -> dict:
    response = user_client("developer").post(server.url + "/api/replays/",
                                             json={"call": call_id, "wait": True, "target": target}, timeout=60)
    assert response.status_code == 201, response.text
    return response.json()


def test_a_per_backend_call_against_a_target_that_is_down_says_why(backend_server, proxy, write_config, admin_client):
    gpu = backend_server({"filter": pass_all})
    server = proxy(write_config(config_for(gpu.url)))
    post(server, "/extender/gpu/filter", fixture_bytes(FULL))
    [call] = recorded(server, admin_client)

    run = replay(server, call["id"], {"kind": "url", "url": "http://127.0.0.1:9/scheduler"})  # nothing listens on 9

    diff = run["items"][0]["diff"]
    assert diff["outcome"] == {"before": "ok", "after": "error"} and diff["kinds"] == {"outcome:ok->error": 1}
    assert diff["error"]["before"] == "" and "Errno 111" in diff["error"]["after"]  # ECONNREFUSED
    page = logged_in("developer").get(f"/replays/{run['id']}/").content.decode()
    assert "Errno 111" in page


def test_a_combined_call_whose_replaced_filter_answers_html_names_the_part(backend_server, proxy, write_config,
                                                                          admin_client):
    a = backend_server({"filter": pass_all})
    b = backend_server({"filter": failing({"node-02": "<script>alert(1)</script> no room"})})
    server = proxy(write_config({"backends": [
        backend("a", a, filterVerb="filter", nodeCacheCapable=True),
        backend("b", b, filterVerb="filter"),  # full Node objects, not ignorable
    ]}))
    assert post_combined(server, "filter", fixture_bytes("filter-request.nodecache-false.json")).status_code == 200
    call = combined_call(admin_client, server)
    html = backend_server({"filter": lambda handler, body: handler.answer(200, b"<html>502 Bad Gateway</html>")})

    run = replay(server, call["id"], {"kind": "url", "url": html.url + "/b", "replaces": "b"})

    diff = run["items"][0]["diff"]
    assert diff["outcome"] == {"before": "ok", "after": "error"}
    assert "invalid JSON" in diff["error"]["after"]
    assert [(p["backend"], p["before"], p["after"]) for p in diff["parts"]] == [("b", "ok", "error")]
    assert diff["kinds"] == {"outcome:ok->error": 1, "part:ok->error": 1}
