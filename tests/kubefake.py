"""A fake Kubernetes API server on loopback that answers list and watch of the resources it is
given, as the real one does: a list is a JSON object with metadata.resourceVersion and items; a
watch (?watch=true) is a chunked stream of {"type", "object"} lines, sent once, then closed after
a short pause so the client reconnects as it would after a server-side timeout."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from tests.conftest import serve_in_thread


@dataclass
class Resource:
    items: list[dict] = field(default_factory=list)  # what a list answers
    watch: list[dict] = field(default_factory=list)  # changes the next watch sends, then forgets
    kind: str | None = None  # the list's "kind", when the client reads it
    resource_version: str = "1"
    query: dict[str, list[str]] = field(default_factory=dict)  # parameters a list or watch must carry
    lists: int = 0  # lists answered (a re-list after a broken watch counts)


class FakeKubeAPI:
    def __init__(self, resources: dict[str, Resource]) -> None:
        self.resources = resources
        self.requests: list[str] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                url = urlparse(self.path)
                query = parse_qs(url.query)
                api.requests.append(self.path)
                resource = api.resources.get(url.path)
                if resource is None:
                    self.send_error(404)
                    return
                if any(query.get(name) != value for name, value in resource.query.items()):
                    self.send_error(400, "a required query parameter is missing or different")
                    return
                if query.get("watch") == ["true"]:
                    self._watch(resource)
                    return
                resource.lists += 1
                answer = {"metadata": {"resourceVersion": resource.resource_version}, "items": resource.items}
                if resource.kind:
                    answer = {"kind": resource.kind, **answer}
                body = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _watch(self, resource: Resource) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                changes, resource.watch = resource.watch, []
                for change in changes:
                    line = (json.dumps(change) + "\n").encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                    self.wfile.flush()
                time.sleep(0.3)
                self.wfile.write(b"0\r\n\r\n")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        serve_in_thread(self.httpd)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
