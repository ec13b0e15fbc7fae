"""The built-in policy served at /extender/<name>/<verb>, like any backend, end to end.

Bind goes through a Kubernetes API: here a local HTTP server that answers pods/binding the
way the API server does, reached through a kubeconfig file.
"""
from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from extproxy import kube
from tests.conftest import fixture_bytes, fixture_json, serve_in_thread, write_kubeconfig

POLICY_CONFIG = {
    "backends": [
        {"name": "builtin", "policy": "gpu", "bindVerb": "bind", "weight": 1},
    ],
    "policies": {
        "gpu": {
            "rules": [
                {"kind": "requiredLabels", "labels": {"example.com/gpu.present": "true"}},
                {"kind": "avoidTaints", "effects": ["NoSchedule", "NoExecute"]},
                {"kind": "resourceFit", "resources": ["example.com/gpu"]},
                {"kind": "preferredLabels", "labels": [{"key": "topology.kubernetes.io/zone", "value": "zone-a", "weight": 1}]},
            ]
        }
    },
}


class FakeAPIServer:
    """Answers POST /api/v1/namespaces/<ns>/pods/<name>/binding; remembers what it got."""

    def __init__(self, status: int = 201) -> None:
        received = self.received = []
        answer_status = status

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                received.append((self.path, json.loads(body)))
                status_body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Success" if answer_status < 300 else "Failure", "code": answer_status}).encode()
                self.send_response(answer_status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(status_body)))
                self.end_headers()
                self.wfile.write(status_body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        serve_in_thread(self.httpd)

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def api_server(tmp_path, monkeypatch):
    servers = []

    def start(status: int = 201) -> FakeAPIServer:
        server = FakeAPIServer(status)
        servers.append(server)
        monkeypatch.setenv("KUBECONFIG", write_kubeconfig(tmp_path / "kubeconfig", server.httpd.server_address[1]))
        kube.reset()
        return server

    yield start
    kube.reset()
    for server in servers:
        server.close()


def post(server, verb: str, body: bytes) -> requests.Response:
    return requests.post(f"{server.url}/extender/builtin/{verb}", data=body, timeout=30)


def test_it_filters_the_fixture_nodes_with_reasons(proxy, write_config, admin_client):
    server = proxy(write_config(POLICY_CONFIG))
    request = fixture_json("filter-request.nodecache-false.json")

    response = post(server, "filter", json.dumps(request).encode())

    assert response.status_code == 200
    result = response.json()
    passed = [n["metadata"]["name"] for n in result["Nodes"]["items"]]
    assert "node-04" not in passed  # no GPU label
    assert result["NodeNames"] is None and result["Error"] == ""
    assert "node-04" in result["FailedAndUnresolvableNodes"]
    # The passing nodes are the scheduler's own objects, unchanged.
    originals = {n["metadata"]["name"]: n for n in request["Nodes"]["items"]}
    assert all(n == originals[n["metadata"]["name"]] for n in result["Nodes"]["items"])
    server.flush()
    call = admin_client.get(server.url + "/api/calls/").json()["results"][0]
    assert call["backend"] == "builtin" and call["outcome"] == "ok" and call["node_count"] == 5


def test_it_scores_with_integers_in_range(proxy, write_config):
    server = proxy(write_config(POLICY_CONFIG))

    response = post(server, "prioritize", fixture_bytes("filter-request.nodecache-false.json"))

    scores = response.json()
    assert {s["Host"] for s in scores} == {f"node-0{i}" for i in range(1, 6)}
    assert all(isinstance(s["Score"], int) and 0 <= s["Score"] <= 10 for s in scores)


def test_it_answers_names_mode_with_a_clear_error(proxy, write_config):
    server = proxy(write_config(POLICY_CONFIG))

    response = post(server, "filter", fixture_bytes("filter-request.nodecache-true.json"))

    assert response.status_code == 200 and "nodeCacheCapable: false" in response.json()["Error"]


def test_it_answers_a_bad_request_in_the_protocols_error_field(proxy, write_config):
    server = proxy(write_config(POLICY_CONFIG))

    response = post(server, "filter", b'{"Pod": 42}')

    assert response.status_code == 200 and response.json()["Error"].startswith("bad request")


def filter_first(server) -> list[str]:
    """The scheduler's filter call before a bind: the nodes that passed for the fixture's pod."""
    result = post(server, "filter", fixture_bytes("filter-request.nodecache-false.json")).json()
    return [n["metadata"]["name"] for n in result["Nodes"]["items"]]


def test_it_binds_through_the_kubernetes_api(proxy, write_config, api_server, admin_client):
    api = api_server()
    server = proxy(write_config(POLICY_CONFIG))
    bind = fixture_json("bind-request.json")
    assert bind["Node"] in filter_first(server)

    response = post(server, "bind", json.dumps(bind).encode())

    assert response.status_code == 200 and response.json() == {"Error": ""}
    path, body = api.received[0]
    assert path == f"/api/v1/namespaces/{bind['PodNamespace']}/pods/{bind['PodName']}/binding"
    assert body["target"] == {"apiVersion": "v1", "kind": "Node", "name": bind["Node"]}
    assert body["metadata"]["name"] == bind["PodName"]


def test_it_reports_a_refused_binding_in_error(proxy, write_config, api_server, admin_client):
    api_server(status=409)
    server = proxy(write_config(POLICY_CONFIG))
    filter_first(server)

    response = post(server, "bind", fixture_bytes("bind-request.json"))

    assert response.status_code == 200 and "409" in response.json()["Error"]
    server.flush()
    call = admin_client.get(server.url + "/api/calls/").json()["results"][0]
    assert call["verb"] == "bind" and call["outcome"] == "error" and "409" in call["error"]


def test_it_refuses_to_bind_a_pod_it_did_not_see_or_to_a_node_that_did_not_pass(
    proxy, write_config, api_server, admin_client
):
    api = api_server()
    server = proxy(write_config(POLICY_CONFIG))
    bind = fixture_json("bind-request.json")
    victim = dict(bind, PodName="victim-pod", PodNamespace="kube-system", PodUID="0000", Node="attacker-node")

    unseen = post(server, "bind", json.dumps(victim).encode())
    passed = filter_first(server)
    failed_node = post(server, "bind", json.dumps(dict(bind, Node="node-04")).encode())
    other_pod_same_uid = post(server, "bind", json.dumps(dict(bind, PodName="victim-pod")).encode())

    assert "node-04" not in passed
    assert unseen.status_code == 200 and "not seen in a filter or prioritize call" in unseen.json()["Error"]
    assert failed_node.status_code == 200 and "node-04" in failed_node.json()["Error"]
    assert "did not pass" in failed_node.json()["Error"]
    assert "not seen" in other_pod_same_uid.json()["Error"]
    assert api.received == []  # nothing reached the Kubernetes API
    server.flush()
    calls = admin_client.get(server.url + "/api/calls/?verb=bind").json()["results"]
    assert len(calls) == 3 and all(c["outcome"] == "error" and "refusing to bind" in c["error"] for c in calls)


def test_it_keeps_only_nodes_preemption_can_help(proxy, write_config):
    server = proxy(write_config(POLICY_CONFIG))
    # The policy learns the pod's unresolvable nodes from its filter call.
    preempt = fixture_json("preempt-request.nodecache-false.json")
    filter_request = fixture_json("filter-request.nodecache-false.json")
    filter_request["Pod"] = preempt["Pod"]
    post(server, "filter", json.dumps(filter_request).encode())

    response = post(server, "preempt", json.dumps(preempt).encode())

    assert response.status_code == 200
    kept = response.json()["NodeNameToMetaVictims"]
    assert set(kept) <= set(preempt["NodeNameToVictims"])
    for node, victims in kept.items():
        given = [p["metadata"]["uid"] for p in preempt["NodeNameToVictims"][node]["Pods"]]
        assert [v["UID"] for v in victims["Pods"]] == given
