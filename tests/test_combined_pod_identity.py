"""The combined form knows the pod the scheduler knows, however the request's JSON spells it.

Binding through the Kubernetes API (no interested binder) is allowed only for a pod seen in a
filter call, by its uid, namespace and name. extproxy took them from a dict built last-key-wins
and looked up only as ``metadata``: a request whose Pod gives ``metadata`` twice, or spells it
``Metadata`` (Go's decoder folds case), named no pod, and the bind the scheduler would have made
was refused as "not seen". Requests come from the scheduler, which writes neither; tests,
replays and other clients do. Real backend and API server on loopback."""
from __future__ import annotations

import json

import pytest

from extproxy import kube
from tests.conftest import fixture_bytes, fixture_json, pass_all, write_kubeconfig
from tests.test_combined import backend, post
from tests.test_policy_backend import FakeAPIServer


def split_metadata(request: dict) -> bytes:
    """The request with its Pod's metadata given twice: the identity first, the rest after."""
    meta = request["Pod"].pop("metadata")
    ident = {k: meta.pop(k) for k in ("name", "namespace", "uid")}
    pod = json.dumps(request["Pod"])[1:-1]
    return (json.dumps(request).replace(json.dumps(request["Pod"]), '{"metadata":%s,%s,"metadata":%s}'
                                         % (json.dumps(ident), pod, json.dumps(meta)))).encode()


def respelled(request: dict) -> bytes:
    request["Pod"]["Metadata"] = request["Pod"].pop("metadata")
    return json.dumps(request).encode()


@pytest.mark.parametrize("spell", [split_metadata, respelled])
def test_a_pod_named_as_go_reads_it_can_be_bound_after_its_filter(
        backend_server, proxy, write_config, tmp_path, monkeypatch, spell):
    api = FakeAPIServer()
    monkeypatch.setenv("KUBECONFIG", write_kubeconfig(tmp_path / "kubeconfig", api.httpd.server_address[1]))
    kube.reset()
    try:
        a = backend_server({"filter": pass_all})
        server = proxy(write_config({"backends": [backend("a", a, filterVerb="filter", nodeCacheCapable=True)]}))
        request = spell(fixture_json("filter-request.nodecache-true.json"))
        assert json.loads(request)["Pod"].get("metadata", {}).get("uid") is None  # what a last-wins dict sees

        assert post(server, "filter", request).json()["Error"] == ""
        bound = post(server, "bind", fixture_bytes("bind-request.json"))

        assert bound.json() == {"Error": ""}
        bind = fixture_json("bind-request.json")
        assert [path for path, _ in api.received] == [
            f"/api/v1/namespaces/{bind['PodNamespace']}/pods/{bind['PodName']}/binding"]
    finally:
        kube.reset()
        api.close()
