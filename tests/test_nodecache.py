"""The node cache against a local HTTP server that answers list and watch of Nodes."""
from __future__ import annotations

import json
import time

import pytest

from extproxy import kube
from extproxy.nodecache import NodeCache
from tests.conftest import fixture_json, write_kubeconfig
from tests.kubefake import FakeKubeAPI, Resource


class NodeAPI(FakeKubeAPI):
    """Nodes (v1), as the API server answers them."""

    def __init__(self, nodes: list[dict]) -> None:
        super().__init__({"/api/v1/nodes": Resource(items=nodes, kind="NodeList", resource_version="100")})
        self._nodes = self.resources["/api/v1/nodes"]

    nodes = property(lambda self: self._nodes.items)
    lists = property(lambda self: self._nodes.lists)
    events = property(lambda self: self._nodes.watch, lambda self, v: setattr(self._nodes, "watch", v))


@pytest.fixture
def node_api(tmp_path, monkeypatch):
    nodes = fixture_json("filter-request.nodecache-false.json")["Nodes"]["items"]
    api = NodeAPI(nodes)
    monkeypatch.setenv("KUBECONFIG", write_kubeconfig(tmp_path / "kubeconfig", api.port))
    kube.reset()
    yield api
    kube.reset()
    api.close()


def wait_for(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_it_lists_then_follows_the_watch(node_api):
    added = json.loads(json.dumps(node_api.nodes[0]))
    added["metadata"]["name"] = "node-99"
    added["metadata"]["resourceVersion"] = "101"
    node_api.events = [
        {"type": "ADDED", "object": added},
        {"type": "DELETED", "object": dict(node_api.nodes[1], metadata=dict(node_api.nodes[1]["metadata"], resourceVersion="102"))},
    ]
    cache = NodeCache(relist_backoff=0.1).start()
    try:
        assert cache.wait_ready(10)
        wait_for(lambda: cache.get_many(["node-99"])[0])
        wait_for(lambda: cache.get_many(["node-02"])[1] == ["node-02"])
        found, missing = cache.get_many(["node-01", "node-99", "nope"])
        assert [n["metadata"]["name"] for n in found] == ["node-01", "node-99"]
        assert missing == ["nope"]
        assert found[0] == node_api.nodes[0]  # the API's own JSON, camelCase
    finally:
        cache.stop()


def test_it_lists_again_when_the_watch_ends(node_api):
    cache = NodeCache(relist_backoff=0.1).start()
    try:
        wait_for(lambda: node_api.lists >= 2)
    finally:
        cache.stop()
