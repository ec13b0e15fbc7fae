"""Copy-out: the curl command run for real against loopback backends, and JSON fixtures."""
from __future__ import annotations

import json
import subprocess

from tests.conftest import fixture_bytes, pass_all, reply
from tests.test_bodies import CAPTURED, echo_nodes_as_sent, get
from tests.test_combined import backend as combined_backend
from tests.test_combined import combined_call
from tests.test_per_backend import config_for, only_call, post


def run_shell(command: str, shell: str = "bash") -> bytes:
    done = subprocess.run([shell, "-c", command], capture_output=True, timeout=60, check=True)
    return done.stdout


def test_it_copies_a_call_as_curl_that_returns_the_recorded_answer(backend_server, proxy, write_config, admin_client):
    backend = backend_server({"filter": echo_nodes_as_sent})
    server = proxy(write_config(config_for(backend.url)))
    request = fixture_bytes(CAPTURED + "filter-request.nodecache-false.json")  # full Node objects, 1.24
    post(server, "/extender/gpu/filter", request)
    call = only_call(admin_client, server)
    recorded = get(admin_client, server, f"/api/calls/{call['id']}/response").content

    command = get(admin_client, server, f"/api/calls/{call['id']}/curl").text
    for shell in ("bash", "sh"):
        assert run_shell(command, shell) == recorded
        assert backend.received[-1] == ("/scheduler/filter", request)  # the very bytes, to the original URL
    assert command.startswith(f"# extproxy call {call['id']}: filter gpu default/web-nc-false")


def test_it_points_curl_at_a_chosen_url(backend_server, proxy, write_config, admin_client):
    original = backend_server({"filter": echo_nodes_as_sent})
    other = backend_server({"filter": reply(200, b'{"Error":"new version says no"}')})
    server = proxy(write_config(config_for(original.url, nodeCacheCapable=True)))
    request = fixture_bytes(CAPTURED + "filter-request.nodecache-true.json")
    post(server, "/extender/gpu/filter", request)
    call = only_call(admin_client, server)

    command = admin_client.get(server.url + f"/api/calls/{call['id']}/curl", params={"url": other.url + "/v2/filter"}).text

    assert run_shell(command) == b'{"Error":"new version says no"}'
    assert other.received == [("/v2/filter", request)]


def test_it_copies_a_call_with_secrets_as_curl_that_says_what_was_redacted(backend_server, proxy, write_config, admin_client):
    backend = backend_server({"filter": echo_nodes_as_sent})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))
    request = json.loads(fixture_bytes(CAPTURED + "filter-request.nodecache-true.json"))
    request["Pod"]["spec"]["containers"][0]["env"] = [{"name": "A", "value": "it's a secret"}]
    post(server, "/extender/gpu/filter", json.dumps(request).encode())
    call = only_call(admin_client, server)

    command = get(admin_client, server, f"/api/calls/{call['id']}/curl").text
    run_shell(command)

    assert "# not the exact bytes received: Pod.spec.containers[0].env[0].value redacted" in command
    sent = json.loads(backend.received[-1][1])
    assert sent["Pod"]["spec"]["containers"][0]["env"][0]["value"] == "[redacted]"
    assert "it's a secret" not in command


def test_it_copies_a_combined_call_as_curl_to_the_proxy(backend_server, proxy, write_config, admin_client):
    one = backend_server({"filter": echo_nodes_as_sent})
    server = proxy(write_config({"backends": [combined_backend("one", one, filterVerb="filter")]}))
    request = fixture_bytes(CAPTURED + "filter-request.nodecache-false.json")
    answer = post(server, "/extender/filter", request)
    call = combined_call(admin_client, server)

    command = get(admin_client, server, f"/api/calls/{call['id']}/curl").text

    assert f"{server.url}/extender/filter" in command
    assert run_shell(command) == answer.content


def test_it_asks_for_a_url_when_the_backend_is_no_longer_configured(backend_server, proxy, write_config, admin_client):
    from extproxy.models import Call

    backend = backend_server({"filter": pass_all})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))
    post(server, "/extender/gpu/filter", fixture_bytes(CAPTURED + "filter-request.nodecache-true.json"))
    call = only_call(admin_client, server)
    Call.objects.filter(pk=call["id"]).update(backend="retired")

    response = admin_client.get(server.url + f"/api/calls/{call['id']}/curl")

    assert response.status_code == 400 and "give ?url=" in response.text


def test_it_exports_a_call_as_a_fixture_with_bodies_and_decisions(backend_server, proxy, write_config, admin_client):
    backend = backend_server({"filter": echo_nodes_as_sent})
    server = proxy(write_config(config_for(backend.url)))
    request = fixture_bytes(CAPTURED + "filter-request.nodecache-false.json")
    answer = post(server, "/extender/gpu/filter", request)
    call = only_call(admin_client, server)

    data = get(admin_client, server, f"/api/calls/{call['id']}/fixture").json()

    assert data["extproxy_fixture"] == 1
    assert data["request"] == json.loads(request)
    assert data["response"] == {"status": 200, "body": json.loads(answer.content)}
    assert data["decisions"] == call["decisions"] and len(data["decisions"]) == call["node_count"]
    assert data["target"] == {
        "backend": "gpu", "verb_string": "filter", "url": backend.url + "/scheduler/filter",
        "node_cache_capable": False, "weight": 2,
    }
    assert data["call"]["id"] == call["id"] and data["redactions"] == []


def test_it_streams_a_filtered_fixture_set_as_json_lines(backend_server, proxy, write_config, admin_client):
    backend = backend_server({"filter": echo_nodes_as_sent, "prioritize": reply(200, b"[]")})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))
    for _ in range(3):
        post(server, "/extender/gpu/filter", fixture_bytes(CAPTURED + "filter-request.nodecache-true.json"))
    post(server, "/extender/gpu/prioritize", fixture_bytes(CAPTURED + "prioritize-request.nodecache-true.json"))
    server.flush()

    everything = get(admin_client, server, "/api/fixtures/").text.splitlines()
    filters = get(admin_client, server, "/api/fixtures/?verb=filter").text.splitlines()
    bad = admin_client.get(server.url + "/api/fixtures/?verb=nope")

    assert len(everything) == 4 and len(filters) == 3
    assert {json.loads(line)["call"]["verb"] for line in filters} == {"filter"}
    assert bad.status_code == 400 and "verb" in bad.json()
