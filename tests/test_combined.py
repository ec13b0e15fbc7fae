"""End to end: the combined form with three real backend servers on loopback."""
from __future__ import annotations

import json

import pytest
import requests

from extproxy import kube
from extproxy.combined import Combined
from tests.conftest import fixture_bytes, fixture_json, pass_all, reply, write_kubeconfig
from tests.test_nodecache import NodeAPI
from tests.test_policy_backend import FakeAPIServer

FULL = "filter-request.nodecache-false.json"
NAMES = "filter-request.nodecache-true.json"


def failing(drop: dict[str, str], unresolvable: dict[str, str] | None = None):
    """A filter backend that removes `drop` (failed) and `unresolvable`, in either mode."""
    unresolvable = unresolvable or {}

    def behave(handler, body):
        args = json.loads(body)
        gone = set(drop) | set(unresolvable)
        result = {"FailedNodes": drop, "FailedAndUnresolvableNodes": unresolvable, "Error": ""}
        if args["NodeNames"] is not None:
            result.update(Nodes=None, NodeNames=[n for n in args["NodeNames"] if n not in gone])
        else:
            items = [n for n in args["Nodes"]["items"] if n["metadata"]["name"] not in gone]
            result.update(Nodes={"metadata": {}, "items": items}, NodeNames=None)
        handler.answer(200, json.dumps(result).encode())

    return behave


def scores(table: dict[str, int]):
    def behave(handler, body):
        args = json.loads(body)
        names = args["NodeNames"] or [n["metadata"]["name"] for n in args["Nodes"]["items"]]
        handler.answer(200, json.dumps([{"Host": n, "Score": table.get(n, 0)} for n in names]).encode())

    return behave


def backend(name: str, server, **fields) -> dict:
    entry = {"name": name, "urlPrefix": f"{server.url}/{name}", "httpTimeout": "2s"}
    entry.update(fields)
    return entry


def post(server, verb: str, body: bytes) -> requests.Response:
    return requests.post(f"{server.url}/extender/{verb}", data=body, timeout=30)


def combined_call(admin_client, server) -> dict:
    server.flush()
    calls = admin_client.get(server.url + "/api/calls/?backend=combined").json()["results"]
    return admin_client.get(server.url + f"/api/calls/{calls[0]['id']}/").json()


def test_it_runs_the_filter_chain_as_the_scheduler_does(backend_server, proxy, write_config, admin_client):
    a = backend_server({"filter": failing({}, {"node-04": "no GPU"})})
    b = backend_server({"filter": failing({"node-02": "GPUs busy"})})
    c = backend_server({"filter": reply(500, "down")})
    server = proxy(write_config({"backends": [
        backend("c", c, filterVerb="filter", ignorable=True),  # ignorable: moved to the end
        backend("a", a, filterVerb="filter", nodeCacheCapable=True),
        backend("b", b, filterVerb="filter"),
    ]}))
    request = fixture_json(FULL)

    response = post(server, "filter", json.dumps(request).encode())

    result = response.json()
    assert response.status_code == 200 and result["Error"] == ""
    originals = {n["metadata"]["name"]: n for n in request["Nodes"]["items"]}
    assert [n["metadata"]["name"] for n in result["Nodes"]["items"]] == ["node-01", "node-03", "node-05"]
    assert all(n == originals[n["metadata"]["name"]] for n in result["Nodes"]["items"])
    assert result["FailedNodes"] == {"node-02": "GPUs busy"}
    assert result["FailedAndUnresolvableNodes"] == {"node-04": "no GPU"}
    # a got names, b got full objects of what a left, c (ignorable, last) what b left.
    assert json.loads(a.received[0][1])["NodeNames"] == list(originals)
    b_nodes = [n["metadata"]["name"] for n in json.loads(b.received[0][1])["Nodes"]["items"]]
    assert b_nodes == ["node-01", "node-02", "node-03", "node-05"]
    c_nodes = [n["metadata"]["name"] for n in json.loads(c.received[0][1])["Nodes"]["items"]]
    assert c_nodes == ["node-01", "node-03", "node-05"]

    call = combined_call(admin_client, server)
    assert call["form"] == "combined" and call["outcome"] == "ok"
    assert [bc["backend"] for bc in call["backend_calls"]] == ["a", "b", "c"]
    assert [bc["outcome"] for bc in call["backend_calls"]] == ["ok", "ok", "error"]
    by = {(d["backend"], d["node"]): d["result"] for d in call["decisions"]}
    assert by[("a", "node-04")] == "unresolvable" and by[("b", "node-02")] == "failed"
    assert by[("combined", "node-01")] == "passed"


def labelling(label: str):
    """A mode-false filter backend that passes every node with `label` added, as objects it returns
    in its own spelling (json.dumps with spaces: a proxy that re-encoded them would show)."""

    def behave(handler, body):
        items = json.loads(body)["Nodes"]["items"]
        for node in items:
            node["metadata"].setdefault("labels", {})[label] = "yes"
        result = {"Nodes": {"metadata": {}, "items": items}, "NodeNames": None, "FailedNodes": {}, "Error": ""}
        handler.answer(200, json.dumps(result).encode())

    return behave


def requiring(label: str):
    """A mode-false filter backend that passes only nodes carrying `label`, returning them as sent."""

    def behave(handler, body):
        items = json.loads(body)["Nodes"]["items"]
        kept = [n for n in items if label in (n["metadata"].get("labels") or {})]
        failed = {n["metadata"]["name"]: f"no {label} label" for n in items if n not in kept}
        result = {"Nodes": {"metadata": {}, "items": kept}, "NodeNames": None, "FailedNodes": failed, "Error": ""}
        handler.answer(200, json.dumps(result).encode())

    return behave


def test_it_sends_the_next_backend_the_node_objects_the_previous_one_returned(
    backend_server, proxy, write_config, admin_client
):
    label = "example.com/checked"
    a = backend_server({"filter": labelling(label)})
    b = backend_server({"filter": requiring(label)})
    server = proxy(write_config({"backends": [
        backend("a", a, filterVerb="filter"), backend("b", b, filterVerb="filter"),
    ]}))
    request = fixture_json(FULL)
    names = [n["metadata"]["name"] for n in request["Nodes"]["items"]]

    response = post(server, "filter", json.dumps(request).encode())

    # b read the label a set: every node passes, and the scheduler gets the objects a returned.
    result = response.json()
    assert response.status_code == 200 and result["Error"] == "" and result["FailedNodes"] == {}
    assert [n["metadata"]["name"] for n in result["Nodes"]["items"]] == names
    assert all(n["metadata"]["labels"][label] == "yes" for n in result["Nodes"]["items"])
    # ... as bytes: a's objects reach b exactly as a wrote them, not re-encoded.
    returned = json.loads(_reply_of(a, labelling(label)))["Nodes"]["items"]
    b_request = b.received[0][1]
    assert all(json.dumps(n).encode() in b_request for n in returned)

    call = combined_call(admin_client, server)
    by = {(d["backend"], d["node"]): d["result"] for d in call["decisions"]}
    assert all(by[("b", n)] == "passed" and by[("combined", n)] == "passed" for n in names)


def _reply_of(server, behaviour) -> bytes:
    """What `behaviour` answered to the first request `server` received (it is deterministic)."""

    class Capture:
        def answer(self, status, body, content_type="application/json"):
            self.body = body

    capture = Capture()
    behaviour(capture, server.received[0][1])
    return capture.body


def test_it_fails_the_attempt_when_a_non_ignorable_filter_fails(backend_server, proxy, write_config, admin_client):
    a = backend_server({"filter": reply(200, {"Error": "gpu inventory unavailable"})})
    b = backend_server({"filter": pass_all})
    server = proxy(write_config({"backends": [
        backend("a", a, filterVerb="filter", nodeCacheCapable=True),
        backend("b", b, filterVerb="filter", nodeCacheCapable=True),
    ]}))

    response = post(server, "filter", fixture_bytes(NAMES))

    assert response.json()["Error"] == "gpu inventory unavailable"
    assert b.received == []  # the chain stopped


def test_it_stops_the_chain_when_no_node_is_left(backend_server, proxy, write_config):
    a = backend_server({"filter": reply(200, {"NodeNames": [], "FailedNodes": {}, "Error": ""})})
    b = backend_server({"filter": pass_all})
    server = proxy(write_config({"backends": [
        backend("a", a, filterVerb="filter", nodeCacheCapable=True),
        backend("b", b, filterVerb="filter", nodeCacheCapable=True),
    ]}))

    result = post(server, "filter", fixture_bytes(NAMES)).json()

    assert result["NodeNames"] == [] and result["Error"] == "" and b.received == []


def test_it_skips_backends_not_interested_in_the_pod(backend_server, proxy, write_config):
    a = backend_server({"filter": pass_all})
    server = proxy(write_config({"backends": [
        backend("a", a, filterVerb="filter", nodeCacheCapable=True, managedResources=[{"name": "example.com/fpga"}]),
    ]}))

    result = post(server, "filter", fixture_bytes(NAMES)).json()

    assert a.received == [] and len(result["NodeNames"]) == 5


def test_it_sums_weighted_scores_and_drops_failing_prioritizers(
    backend_server, proxy, write_config, admin_client, tmp_path, monkeypatch
):
    # No Kubernetes API: b needs full objects the proxy (registered with names) cannot get.
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    kube.reset()
    a = backend_server({"prioritize": scores({"node-01": 8, "node-03": 3})})
    b = backend_server({"prioritize": scores({"node-01": 1, "node-03": 10})})
    c = backend_server({"prioritize": reply(200, [{"Host": "node-01", "Score": 5.5}])})
    server = proxy(write_config({"backends": [
        backend("a", a, prioritizeVerb="prioritize", weight=2, nodeCacheCapable=True),
        backend("b", b, prioritizeVerb="prioritize", weight=3),
        backend("c", c, prioritizeVerb="prioritize", weight=5, nodeCacheCapable=True),
    ]}))
    body = fixture_bytes("prioritize-request.nodecache-true.json")
    feasible = json.loads(body)["NodeNames"]

    response = post(server, "prioritize", body)

    totals = {e["Host"]: e["Score"] for e in response.json()}
    assert set(totals) == set(feasible)
    assert totals["node-01"] == 8 * 2 and totals["node-03"] == 3 * 2  # only a's scores count
    call = combined_call(admin_client, server)
    outcomes = {bc["backend"]: bc["outcome"] for bc in call["backend_calls"]}
    assert outcomes == {"a": "ok", "b": "error", "c": "error"}
    assert b.received == []  # its request could not be built
    kube.reset()


def test_it_converts_full_objects_for_prioritizers_in_either_mode(backend_server, proxy, write_config):
    a = backend_server({"prioritize": scores({"node-01": 8})})
    b = backend_server({"prioritize": scores({"node-01": 2})})
    server = proxy(write_config({"backends": [
        backend("a", a, prioritizeVerb="prioritize", weight=2, nodeCacheCapable=True),
        backend("b", b, prioritizeVerb="prioritize", weight=3),
    ]}))

    totals = {e["Host"]: e["Score"] for e in post(server, "prioritize", fixture_bytes(FULL)).json()}

    assert totals["node-01"] == 8 * 2 + 2 * 3 and totals["node-02"] == 0
    assert json.loads(a.received[0][1])["Nodes"] is None
    assert len(json.loads(b.received[0][1])["Nodes"]["items"]) == 5


def test_it_takes_node_objects_from_the_node_cache_when_registered_with_names(
    backend_server, proxy, write_config, tmp_path, monkeypatch
):
    api = NodeAPI(fixture_json(FULL)["Nodes"]["items"])
    monkeypatch.setenv("KUBECONFIG", write_kubeconfig(tmp_path / "kubeconfig", api.httpd.server_address[1]))
    kube.reset()
    try:
        b = backend_server({"filter": failing({"node-02": "busy"})})
        server = proxy(write_config({"backends": [backend("b", b, filterVerb="filter")]}))
        server.engine._combined.node_cache().wait_ready(10)

        result = post(server, "filter", fixture_bytes(NAMES)).json()

        assert result["NodeNames"] == ["node-01", "node-03", "node-04", "node-05"]
        assert result["FailedNodes"] == {"node-02": "busy"}
        sent = json.loads(b.received[0][1])["Nodes"]["items"]
        assert [n["metadata"]["name"] for n in sent] == [f"node-0{i}" for i in range(1, 6)]
    finally:
        kube.reset()
        api.close()


def test_it_binds_with_the_interested_binder(backend_server, proxy, write_config):
    a = backend_server({"bind": reply(200, {"Error": ""})})
    server = proxy(write_config({"backends": [backend("a", a, bindVerb="bind", nodeCacheCapable=True)]}))

    response = post(server, "bind", fixture_bytes("bind-request.json"))

    assert response.json() == {"Error": ""} and len(a.received) == 1


def test_it_binds_through_the_api_when_the_binder_is_not_interested(
    backend_server, proxy, write_config, tmp_path, monkeypatch
):
    api = FakeAPIServer()
    monkeypatch.setenv("KUBECONFIG", write_kubeconfig(tmp_path / "kubeconfig", api.httpd.server_address[1]))
    kube.reset()
    try:
        a = backend_server({"bind": reply(200, {"Error": ""}), "filter": pass_all})
        server = proxy(write_config({"backends": [
            backend("a", a, bindVerb="bind", filterVerb="filter", nodeCacheCapable=True,
                    managedResources=[{"name": "example.com/fpga"}]),
        ]}))
        post(server, "filter", fixture_bytes(NAMES))  # the proxy learns the pod here
        bind = fixture_json("bind-request.json")

        response = post(server, "bind", json.dumps(bind).encode())

        assert response.json() == {"Error": ""} and a.received == []
        assert api.received[0][0].endswith(f"/pods/{bind['PodName']}/binding")
    finally:
        kube.reset()
        api.close()


def test_it_binds_through_the_api_only_a_seen_pod_to_a_node_that_passed(
    backend_server, proxy, write_config, tmp_path, monkeypatch
):
    api = FakeAPIServer()
    monkeypatch.setenv("KUBECONFIG", write_kubeconfig(tmp_path / "kubeconfig", api.httpd.server_address[1]))
    kube.reset()
    try:
        a = backend_server({"filter": failing({"node-02": "no GPU"})})
        server = proxy(write_config({"backends": [backend("a", a, filterVerb="filter", nodeCacheCapable=True)]}))
        bind = fixture_json("bind-request.json")
        # The report: anyone reaching the port asked extproxy to bind a pod it never saw.
        victim = {"PodName": "victim-pod", "PodNamespace": "kube-system", "PodUID": "1234", "Node": "attacker-node"}

        unseen = post(server, "bind", json.dumps(victim).encode())
        before_filter = post(server, "bind", json.dumps(bind).encode())
        post(server, "filter", fixture_bytes(NAMES))
        failed_node = post(server, "bind", json.dumps(dict(bind, Node="node-02")).encode())
        unknown_node = post(server, "bind", json.dumps(dict(bind, Node="attacker-node")).encode())
        assert api.received == []
        passed = post(server, "bind", json.dumps(bind).encode())

        assert "not seen in a filter or prioritize call" in unseen.json()["Error"]
        assert "not seen in a filter or prioritize call" in before_filter.json()["Error"]
        assert "node-02" in failed_node.json()["Error"] and "did not pass" in failed_node.json()["Error"]
        assert "attacker-node" in unknown_node.json()["Error"]
        assert passed.json() == {"Error": ""} and len(api.received) == 1
        assert post(server, "bind", json.dumps(victim | {"PodName": ""}).encode()).status_code == 400
    finally:
        kube.reset()
        api.close()


@pytest.mark.parametrize("ignorable, expect_api", [(True, True), (False, False)])
def test_it_falls_through_to_the_default_binder_only_for_an_ignorable_binder(
    backend_server, proxy, write_config, tmp_path, monkeypatch, ignorable, expect_api
):
    api = FakeAPIServer()
    monkeypatch.setenv("KUBECONFIG", write_kubeconfig(tmp_path / "kubeconfig", api.httpd.server_address[1]))
    kube.reset()
    try:
        a = backend_server({"bind": reply(200, {"Error": "node went away"})})
        server = proxy(write_config({"backends": [backend("a", a, bindVerb="bind", ignorable=ignorable)]}))
        assert post(server, "prioritize", fixture_bytes(NAMES)).status_code == 200  # the pod is seen, node-01 passed

        result = post(server, "bind", fixture_bytes("bind-request.json")).json()

        assert bool(api.received) is expect_api
        assert result == ({"Error": ""} if expect_api else {"Error": "node went away"})
    finally:
        kube.reset()
        api.close()


def test_it_chains_preemption_and_converts_victims_per_backend(backend_server, proxy, write_config):
    request = fixture_json("preempt-request.nodecache-false.json")
    nodes = sorted(request["NodeNameToVictims"])
    keep = nodes[0]

    def keep_first(handler, body):
        args = json.loads(body)
        meta = args["NodeNameToMetaVictims"]
        handler.answer(200, json.dumps({"NodeNameToMetaVictims": {keep: meta[keep]}}).encode())

    def echo_full(handler, body):
        args = json.loads(body)
        out = {n: {"Pods": [{"UID": p["metadata"]["uid"]} for p in v["Pods"]], "NumPDBViolations": v["NumPDBViolations"]}
               for n, v in args["NodeNameToVictims"].items()}
        handler.answer(200, json.dumps({"NodeNameToMetaVictims": out}).encode())

    a = backend_server({"preempt": keep_first})
    b = backend_server({"preempt": echo_full})
    server = proxy(write_config({"backends": [
        backend("a", a, preemptVerb="preempt", nodeCacheCapable=True),
        backend("b", b, preemptVerb="preempt"),
    ]}))

    response = post(server, "preempt", json.dumps(request).encode())

    assert response.status_code == 200
    assert list(response.json()["NodeNameToMetaVictims"]) == [keep]
    to_b = json.loads(b.received[0][1])
    assert list(to_b["NodeNameToVictims"]) == [keep] and to_b["NodeNameToMetaVictims"] is None
    assert to_b["NodeNameToVictims"][keep]["Pods"] == request["NodeNameToVictims"][keep]["Pods"]


def test_it_ends_preemption_in_error_on_a_victim_it_was_not_given(backend_server, proxy, write_config):
    a = backend_server({"preempt": reply(200, {"NodeNameToMetaVictims": {"node-02": {"Pods": [{"UID": "not-a-victim"}], "NumPDBViolations": 0}}})})
    server = proxy(write_config({"backends": [backend("a", a, preemptVerb="preempt", nodeCacheCapable=True)]}))

    response = post(server, "preempt", fixture_bytes("preempt-request.nodecache-true.json"))

    assert response.status_code == 502 and "not-a-victim" in response.text


def test_it_answers_a_bad_combined_request_with_400_and_the_reason(backend_server, proxy, write_config):
    a = backend_server({"filter": pass_all})
    server = proxy(write_config({"backends": [backend("a", a, filterVerb="filter")]}))

    response = post(server, "filter", b'{"Pod": 1}')

    assert response.status_code == 400 and "bad request" in response.json()["Error"] and a.received == []


def test_it_answers_and_records_even_when_the_combined_form_breaks(
    backend_server, proxy, write_config, admin_client, monkeypatch
):
    async def broken(self, body):
        raise KeyError("a bug")

    monkeypatch.setattr(Combined, "filter", broken)
    a = backend_server({"filter": pass_all})
    server = proxy(write_config({"backends": [backend("a", a, filterVerb="filter")]}))

    response = post(server, "filter", fixture_bytes(NAMES))

    assert response.status_code == 200 and "internal error: KeyError" in response.json()["Error"]
    call = combined_call(admin_client, server)
    assert call["outcome"] == "error" and "internal error" in call["error"]


def test_it_reads_strings_as_go_does_when_a_backend_sends_half_a_surrogate_or_bytes_not_utf8(
        backend_server, proxy, write_config, admin_client):
    """kube-scheduler's decoder reads a lone \\ud800 escape, and each byte that is not UTF-8, as
    U+FFFD (msgspec refuses both): the reply is used as the scheduler would, not an error."""
    def behave(handler, body):
        names = json.loads(body)["NodeNames"]
        kept = json.dumps([n for n in names if n not in ("node-02", "node-04")]).encode()
        handler.answer(200, b'{"NodeNames":' + kept + b',"FailedNodes":{"node-02":"GPU \\ud800 busy \\ud83d\\ude00"},'
                            b'"FailedAndUnresolvableNodes":{"node-04":"bad \xe2\x82 byte"},"Error":""}')

    a = backend_server({"filter": behave})
    server = proxy(write_config({"backends": [backend("a", a, filterVerb="filter", nodeCacheCapable=True)]}))

    response = post(server, "filter", fixture_bytes(NAMES))

    assert response.status_code == 200
    result = response.json()
    assert result["Error"] == "" and "node-02" not in result["NodeNames"] and "node-01" in result["NodeNames"]
    assert result["FailedNodes"] == {"node-02": "GPU \ufffd busy \U0001f600"}
    assert result["FailedAndUnresolvableNodes"] == {"node-04": "bad \ufffd\ufffd byte"}  # one a byte, as Go
    call = combined_call(admin_client, server)
    assert call["outcome"] == "ok" and [bc["outcome"] for bc in call["backend_calls"]] == ["ok"]
    by = {(d["backend"], d["node"]): (d["result"], d.get("reason")) for d in call["decisions"]}
    assert by[("a", "node-02")] == ("failed", "GPU \ufffd busy \U0001f600")
