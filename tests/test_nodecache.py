"""The node cache against a local HTTP server that answers list and watch of Nodes."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

from extproxy import kube
from extproxy.nodecache import NodeCache
from tests.conftest import fixture_json, write_kubeconfig


class NodeAPI:
    def __init__(self, nodes: list[dict]) -> None:
        self.nodes = nodes
        self.events: list[dict] = []
        self.lists = 0
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                url = urlparse(self.path)
                query = parse_qs(url.query)
                if url.path != "/api/v1/nodes":
                    self.send_error(404)
                    return
                if query.get("watch") == ["true"]:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for event in api.events:
                        line = (json.dumps(event) + "\n").encode()
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                        self.wfile.flush()
                    api.events = []
                    time.sleep(0.3)
                    self.wfile.write(b"0\r\n\r\n")
                    return
                api.lists += 1
                body = json.dumps({"kind": "NodeList", "metadata": {"resourceVersion": "100"}, "items": api.nodes}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def node_api(tmp_path, monkeypatch):
    nodes = fixture_json("filter-request.nodecache-false.json")["Nodes"]["items"]
    api = NodeAPI(nodes)
    monkeypatch.setenv("KUBECONFIG", write_kubeconfig(tmp_path / "kubeconfig", api.httpd.server_address[1]))
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
