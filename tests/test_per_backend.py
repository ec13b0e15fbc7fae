"""End to end: kube-scheduler's requests through the per-backend endpoint to real backends.

Each test checks both sides: what the scheduler gets back (it must be what the backend said,
or the scheduler-equivalent failure) and what was recorded.
"""
from __future__ import annotations

import json
import time

import pytest
import requests

from tests.conftest import fixture_bytes, fixture_json, hang_up, pass_all, reply, slow

FILTER_FULL = "filter-request.nodecache-false.json"
FILTER_NAMES = "filter-request.nodecache-true.json"


def config_for(url: str, **fields) -> dict:
    backend = {
        "name": "gpu",
        "urlPrefix": f"{url}/scheduler",
        "filterVerb": "filter",
        "prioritizeVerb": "prioritize",
        "bindVerb": "bind",
        "preemptVerb": "preempt",
        "weight": 2,
        "httpTimeout": "2s",
    }
    backend.update(fields)
    return {"backends": [backend]}


def post(proxy, path: str, body: bytes) -> requests.Response:
    return requests.post(proxy.url + path, data=body, headers={"Content-Type": "application/json"}, timeout=30)


def only_call(admin_client, proxy) -> dict:
    proxy.flush()
    listing = admin_client.get(proxy.url + "/api/calls/").json()
    assert len(listing["results"]) == 1
    return admin_client.get(proxy.url + f"/api/calls/{listing['results'][0]['id']}/").json()


def test_it_returns_the_backends_answer_unchanged_and_records_the_decisions(
    backend_server, proxy, write_config, admin_client
):
    answer = fixture_bytes("filter-result.nodecache-true.json")
    backend = backend_server({"filter": reply(200, answer)})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))
    request = fixture_bytes(FILTER_NAMES)

    response = post(server, "/extender/gpu/filter", request)

    assert response.status_code == 200
    assert response.content == answer
    assert backend.received == [("/scheduler/filter", request)]
    call = only_call(admin_client, server)
    assert call["verb"] == "filter" and call["backend"] == "gpu" and call["outcome"] == "ok"
    assert call["pod"] == {"namespace": "ml-team", "name": "trainer-7d9c5b6f8-b4x2s", "uid": call["pod"]["uid"]}
    assert call["pod"]["uid"]
    assert call["node_count"] == 5 and call["http_status"] == 200
    results = {d["node"]: (d["result"], d["reason"]) for d in call["decisions"]}
    expected = fixture_json("filter-result.nodecache-true.json")
    assert {n for n, (r, _) in results.items() if r == "passed"} == set(expected["NodeNames"])
    for node, reason in expected["FailedAndUnresolvableNodes"].items():
        assert results[node] == ("unresolvable", reason)
    for node, reason in expected["FailedNodes"].items():
        assert results[node] == ("failed", reason)
    assert call["started_at"] <= call["finished_at"]


def echo_nodes_as_sent(handler, body: bytes) -> None:
    """An extender that passes every node, answering with the Node objects' bytes as sent."""
    import msgspec

    nodes = msgspec.json.decode(body, type=dict[str, msgspec.Raw])["Nodes"]
    handler.answer(200, b'{"Nodes":' + bytes(nodes) + b',"NodeNames":null,"FailedNodes":{},"Error":""}')


def test_it_records_full_mode_requests_with_each_node_stored_once(backend_server, proxy, write_config, admin_client):
    from extproxy.models import NodeObject

    backend = backend_server({"filter": echo_nodes_as_sent})
    server = proxy(write_config(config_for(backend.url)))
    request = fixture_bytes(FILTER_FULL)
    for _ in range(3):
        response = post(server, "/extender/gpu/filter", request)
        assert response.status_code == 200
        assert json.loads(response.content)["Nodes"] == json.loads(request)["Nodes"]
    server.flush()
    # 5 distinct nodes; three requests and three replies echoing the same bytes share them.
    assert NodeObject.objects.count() == 5
    calls = admin_client.get(server.url + "/api/calls/").json()["results"]
    assert [c["passed_count"] for c in calls] == [5, 5, 5]


@pytest.mark.parametrize(
    "verb, expect_status",
    [("filter", 200), ("bind", 200), ("prioritize", 504), ("preempt", 504)],
)
def test_it_answers_in_time_when_the_backend_is_too_slow(
    backend_server, proxy, write_config, admin_client, verb, expect_status
):
    backend = backend_server({"*": slow(3, reply(200, b"{}"))})
    server = proxy(write_config(config_for(backend.url, httpTimeout="1s")))
    body = fixture_bytes({"filter": FILTER_NAMES, "prioritize": "prioritize-request.nodecache-true.json",
                          "bind": "bind-request.json", "preempt": "preempt-request.nodecache-true.json"}[verb])
    started = time.monotonic()
    response = post(server, f"/extender/gpu/{verb}", body)
    elapsed = time.monotonic() - started

    # Answered on the proxy's own budget (0.9 s), not after the backend's 3 s.
    assert elapsed < 2.5
    assert response.status_code == expect_status
    if verb in ("filter", "bind"):
        assert "did not answer" in response.json()["Error"] or "no answer" in response.json()["Error"]
    call = only_call(admin_client, server)
    assert call["outcome"] == "timeout" and call["http_status"] is None


def test_it_passes_a_500_through_and_keeps_its_body(backend_server, proxy, write_config, admin_client):
    backend = backend_server({"*": reply(500, "backend exploded: nil map", "text/plain")})
    server = proxy(write_config(config_for(backend.url)))

    response = post(server, "/extender/gpu/filter", fixture_bytes(FILTER_FULL))

    assert response.status_code == 500 and response.text == "backend exploded: nil map"
    call = only_call(admin_client, server)
    assert call["outcome"] == "error" and call["http_status"] == 500
    assert "code 500" in call["error"] and "backend exploded: nil map" in call["error"]
    assert call["decisions"] == []


def test_it_passes_garbage_through_and_records_it_as_an_error(backend_server, proxy, write_config, admin_client):
    backend = backend_server({"*": reply(200, b"<html>oops</html>")})
    server = proxy(write_config(config_for(backend.url)))

    response = post(server, "/extender/gpu/prioritize", fixture_bytes("prioritize-request.nodecache-true.json"))

    assert response.status_code == 200 and response.content == b"<html>oops</html>"
    call = only_call(admin_client, server)
    assert call["outcome"] == "error"
    assert any(f["kind"] == "undecodable" for f in call["findings"])


def test_it_fails_the_call_as_the_scheduler_would_when_the_backend_hangs_up(
    backend_server, proxy, write_config, admin_client
):
    backend = backend_server({"*": hang_up})
    server = proxy(write_config(config_for(backend.url)))

    response = post(server, "/extender/gpu/filter", fixture_bytes(FILTER_NAMES))

    assert response.status_code == 200 and response.json()["Error"].startswith("extproxy: backend gpu:")
    call = only_call(admin_client, server)
    assert call["outcome"] == "error" and call["http_status"] is None and call["error"]


def test_it_fails_the_call_when_nothing_listens(proxy, write_config, admin_client):
    server = proxy(write_config(config_for(f"http://127.0.0.1:{_closed_port()}")))

    response = post(server, "/extender/gpu/prioritize", fixture_bytes("prioritize-request.nodecache-true.json"))

    assert response.status_code == 502
    call = only_call(admin_client, server)
    assert call["outcome"] == "error" and "connection failed" in call["error"]


def _closed_port() -> int:
    from tests.conftest import free_port

    return free_port()


def test_it_routes_verbs_with_slashes_and_a_trailing_slash_without_redirecting(backend_server, proxy, write_config):
    backend = backend_server({"*": pass_all})
    server = proxy(write_config(config_for(backend.url, filterVerb="predicates/gpu")))
    body = fixture_bytes(FILTER_NAMES)

    for path in ("/extender/gpu/predicates/gpu", "/extender/gpu/predicates/gpu/"):
        response = requests.post(server.url + path, data=body, allow_redirects=False, timeout=10)
        assert response.status_code == 200
    assert [p for p, _ in backend.received] == ["/scheduler/predicates/gpu"] * 2


@pytest.mark.parametrize(
    "method, path, status, words",
    [
        ("POST", "/extender/nope/filter", 404, "unknown backend"),
        ("POST", "/extender/gpu/sort", 404, "no verb"),
        ("GET", "/extender/gpu/filter", 405, "POST"),
    ],
)
def test_it_refuses_what_is_not_an_extender_call_with_a_reason(
    backend_server, proxy, write_config, method, path, status, words
):
    backend = backend_server({"*": pass_all})
    server = proxy(write_config(config_for(backend.url)))

    response = requests.request(method, server.url + path, data=b"{}", timeout=10)

    assert response.status_code == status and words in response.json()["error"]
    assert backend.received == []


def test_it_refuses_a_body_over_the_limit_and_keeps_serving(backend_server, proxy, write_config, settings):
    settings.EXTPROXY_MAX_BODY_BYTES = 1000
    backend = backend_server({"*": pass_all})
    server = proxy(write_config(config_for(backend.url)))

    big = post(server, "/extender/gpu/filter", fixture_bytes(FILTER_FULL))
    small = post(server, "/extender/gpu/filter", fixture_bytes("captured-kube-scheduler-1.24/bind-request.nodecache-true.json")[:900])

    assert big.status_code == 413 and "EXTPROXY_MAX_BODY_BYTES" in big.json()["error"]
    assert small.status_code == 200


def test_it_accepts_a_64_mib_body_by_default(backend_server, proxy, write_config):
    backend = backend_server({"*": reply(200, {"Error": ""})})
    server = proxy(write_config(config_for(backend.url)))
    request = json.loads(fixture_bytes(FILTER_FULL))
    node = request["Nodes"]["items"][0]
    request["Nodes"]["items"] = [dict(node, metadata=dict(node["metadata"], name=f"n{i}")) for i in range(1500)]
    body = json.dumps(request).encode()
    assert len(body) > 3 * 1024 * 1024  # over Django's default 2.5 MiB

    response = post(server, "/extender/gpu/filter", body)

    assert response.status_code == 200


def test_it_redacts_secrets_before_storing(backend_server, proxy, write_config, transactional_db):
    from extproxy.models import Call
    from extproxy.recorder import decompress

    backend = backend_server({"*": pass_all})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))
    request = json.loads(fixture_bytes(FILTER_NAMES))
    container = request["Pod"]["spec"]["containers"][0]
    container["env"] = [{"name": "DB_PASSWORD", "value": "hunter2-secret"}]
    request["Pod"]["metadata"].setdefault("annotations", {})[
        "kubectl.kubernetes.io/last-applied-configuration"
    ] = '{"env": "hunter2-secret"}'

    post(server, "/extender/gpu/filter", json.dumps(request).encode())
    server.flush()

    stored = decompress(bytes(Call.objects.get().request_body))
    assert b"hunter2-secret" not in stored
    assert b"DB_PASSWORD" in stored and b'"kubectl.kubernetes.io/last-applied-configuration":' not in stored


def test_it_records_a_preempt_request_with_a_null_victims_entry(backend_server, proxy, write_config, admin_client):
    backend = backend_server({"*": reply(200, {"NodeNameToMetaVictims": {}})})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))
    request = json.loads(fixture_bytes("preempt-request.nodecache-true.json"))
    node = next(iter(request["NodeNameToMetaVictims"]))
    request["NodeNameToMetaVictims"][node] = None

    response = post(server, "/extender/gpu/preempt", json.dumps(request).encode())

    assert response.status_code == 200
    call = only_call(admin_client, server)
    assert call["verb"] == "preempt" and call["outcome"] == "ok" and call["node_count"] == len(request["NodeNameToMetaVictims"])


@pytest.mark.parametrize("http_timeout, budget", [(5.0, 4.5), (1.0, 0.9), (0.2, 0.15), (10.0, 9.5)])
def test_it_keeps_a_margin_inside_the_schedulers_timeout(http_timeout, budget):
    from extproxy.backends.http import proxy_timeout

    assert proxy_timeout(http_timeout) == pytest.approx(budget)
