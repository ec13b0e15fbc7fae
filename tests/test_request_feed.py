"""Request cut-through on the extender listener: a large per-backend request is passed on to its
backend while it still arrives (extproxy/backends/feed.py).

Against real servers on loopback, with the scheduler's side on a raw socket so that the test
decides when each part of the request leaves: the backend has the first part before the last one
is sent; the scheduler is answered only once it has sent all of it, and the record keeps all of
it; a request that never arrives whole is not answered nor recorded and its backend connection is
closed; a backend that answers early is not reused; redirects and a stale pooled connection get
the whole body.
"""
from __future__ import annotations

import asyncio
import json
import select
import socket
import threading
import time

import pytest

from extproxy.backends.feed import BodyFeed, FeedBroken
from extproxy.backends.wire import Client
from extproxy.listener import FEED_BYTES
from tests.conftest import BackendHandler, fixture_json, free_port
from tests.test_wire_client import raw_server, read_request

REPLY = b'{"Nodes":null,"NodeNames":["n1"],"FailedNodes":{},"FailedAndUnresolvableNodes":{},"Error":""}'


def filter_request(size: int) -> bytes:
    """A full-object filter request of at least `size` bytes: the fixture's Pod and Nodes, renamed."""
    args = fixture_json("filter-request.nodecache-false.json")
    for container in args["Pod"]["spec"]["containers"]:
        container.pop("env", None)  # redacted in the record; these tests compare it byte for byte
    nodes = args["Nodes"]["items"]
    items: list[dict] = []
    while not items or len(json.dumps(items)) < size:
        node = json.loads(json.dumps(nodes[len(items) % len(nodes)]))
        node["metadata"]["name"] = f"node-{len(items):05d}"
        items.append(node)
    args["Nodes"]["items"] = items
    return json.dumps(args, separators=(",", ":")).encode()


BODY = filter_request(FEED_BYTES + 100_000)  # passed on while it arrives
SMALL = filter_request(10_000)  # held until it is whole
FIRST = 64 * 1024  # what the scheduler sends before it waits


class StepBackend:
    """A backend on a raw socket that reports how far each request has come.

    `answer_after`: body bytes after which it answers (None: the whole body). Each connection's
    bytes and whether it saw the connection end early are kept per connection.
    """

    def __init__(self, answer_after: int | None = None) -> None:
        self.answer_after = answer_after
        self.bodies: list[bytes] = []  # per connection: the body bytes it received
        self.cut_off: list[bool] = []  # per connection: closed before the announced length
        self.has_first = threading.Event()
        self.answered = threading.Event()
        self.url, _, self._listener = raw_server(self._handle)

    def _handle(self, conn: socket.socket) -> None:
        index = len(self.bodies)
        self.bodies.append(b"")
        self.cut_off.append(False)
        data = b""
        while True:  # one request after another on this connection
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
            while len(body) < length:
                self.bodies[index] = body
                if len(body) >= FIRST:
                    self.has_first.set()
                if self.answer_after is not None and len(body) >= self.answer_after:
                    break
                chunk = conn.recv(65536)
                if not chunk:
                    self.cut_off[index] = True
                    return
                body += chunk
            self.bodies[index] = body[:length]  # before the answer: the test reads it once answered
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(REPLY) + REPLY)
            self.answered.set()
            while len(body) < length:  # answered early: the rest of the body is still this request's
                chunk = conn.recv(65536)
                if not chunk:
                    self.cut_off[index] = True
                    return
                body += chunk
            self.bodies[index] = body[:length]
            data = body[length:]

    def cut_off_seen(self, index: int, seconds: float = 20) -> bool:
        """Wait until connection `index` was seen closed early (its thread sees it a moment later)."""
        deadline = time.monotonic() + seconds
        while not self.cut_off[index] and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.cut_off[index]

    def close(self) -> None:
        self._listener.close()


@pytest.fixture
def listener(proxy, settings, write_config):
    """Start extproxy with its extender listener in front of `backend`; returns (server, host, port)."""
    def start(backend_url: str, timeout: str = "10s"):
        port = free_port()
        settings.EXTPROXY_EXTENDER_PORT, settings.EXTPROXY_EXTENDER_HOST = port, "127.0.0.1"
        config = {"backends": [{"name": "step", "urlPrefix": f"{backend_url}/scheduler", "filterVerb": "filter",
                                "weight": 1, "httpTimeout": timeout, "nodeCacheCapable": False}]}
        return proxy(write_config(config)), port

    return start


def head_for(length: int) -> bytes:
    return (b"POST /extender/step/filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % length)


def read_answer(sock: socket.socket) -> tuple[bytes, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed without an answer: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
    while len(body) < length:
        body += sock.recv(65536)
    return head, body


def nothing_to_read(sock: socket.socket, seconds: float) -> bool:
    return not select.select([sock], [], [], seconds)[0]


def recorded(server) -> list:
    from extproxy.bodies import request_of
    from extproxy.models import Call

    server.flush()
    return [(call, request_of(call)) for call in Call.objects.order_by("id")]


def test_a_large_request_reaches_its_backend_before_its_last_byte_is_sent(listener):
    backend = StepBackend()
    server, port = listener(backend.url)
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(head_for(len(BODY)) + BODY[:FIRST])
        reached = backend.has_first.wait(10)  # a proxy that holds the request waits here for ever
        assert nothing_to_read(sock, 0.2)  # nothing is answered before the request is all there
        sock.sendall(BODY[FIRST:])
        head, body = read_answer(sock)
    backend.close()

    assert reached
    assert head.startswith(b"HTTP/1.1 200 ") and body == REPLY
    assert backend.bodies == [BODY]  # every byte, unchanged, on one connection
    [(call, request)] = recorded(server)
    assert call.http_status == 200 and call.backend == "step"
    assert request.data == BODY and request.exact


def test_the_connection_goes_on_serving_after_a_fed_request(listener):
    backend = StepBackend()
    server, port = listener(backend.url)
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        for body in (BODY, SMALL, BODY):  # fed, held, fed: on one keep-alive connection
            sock.sendall(head_for(len(body)) + body)
            head, answer = read_answer(sock)
            assert head.startswith(b"HTTP/1.1 200 ") and answer == REPLY
    backend.close()
    assert [request.data for _, request in recorded(server)] == [BODY, SMALL, BODY]


@pytest.mark.parametrize("how", ["closed", "timed-out"])
def test_a_request_that_never_arrives_whole_is_neither_answered_nor_recorded(listener, settings, how):
    settings.EXTPROXY_BODY_TIMEOUT = 1
    backend = StepBackend()
    server, port = listener(backend.url, timeout="60s")  # the backend call's own deadline is not what ends it
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(head_for(len(BODY)) + BODY[:FIRST])
        assert backend.has_first.wait(10)
        if how == "closed":
            sock.close()
        else:
            head, body = read_answer(sock)  # after EXTPROXY_BODY_TIMEOUT
            assert head.startswith(b"HTTP/1.1 408 ") and b"EXTPROXY_BODY_TIMEOUT" in body
    assert backend.cut_off_seen(0)
    assert backend.cut_off == [True]  # its backend connection was closed before the announced length
    assert not backend.answered.is_set()

    # The listener serves on, and only the whole call is in the record.
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(head_for(len(BODY)) + BODY)
        head, body = read_answer(sock)
    backend.close()
    assert head.startswith(b"HTTP/1.1 200 ") and body == REPLY
    assert [request.data for _, request in recorded(server)] == [BODY]


def test_a_backend_that_answers_before_the_last_byte_is_answered_after_it_and_not_reused(listener):
    backend = StepBackend(answer_after=FIRST)
    server, port = listener(backend.url)
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(head_for(len(BODY)) + BODY[:FIRST])
        assert backend.answered.wait(10)
        assert nothing_to_read(sock, 0.3)  # the scheduler is still sending: no answer yet
        sock.sendall(BODY[FIRST:])
        head, body = read_answer(sock)
        assert head.startswith(b"HTTP/1.1 200 ") and body == REPLY
        backend.answer_after = None
        sock.sendall(head_for(len(BODY)) + BODY)  # the next call gets a new backend connection
        head, body = read_answer(sock)
        assert head.startswith(b"HTTP/1.1 200 ") and body == REPLY
    assert backend.cut_off_seen(0)
    backend.close()
    # A second connection: reusing the first would have sent the next request as the rest of this body.
    assert len(backend.bodies) == 2 and backend.bodies[1] == BODY and backend.cut_off == [True, False]
    assert [request.data for _, request in recorded(server)] == [BODY, BODY]  # the record has all of it


def test_a_307_redirect_sends_the_whole_body_on(listener, backend_server):
    got: list[bytes] = []

    def target(handler: BackendHandler, body: bytes) -> None:
        got.append(body)
        handler.answer(200, REPLY)

    second = backend_server({"filter": target})

    def redirect(handler: BackendHandler, _body: bytes) -> None:
        handler.send_response(307)
        handler.send_header("Location", f"{second.url}/scheduler/filter")
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    first = backend_server({"filter": redirect})
    server, port = listener(first.url)
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(head_for(len(BODY)) + BODY[:FIRST])
        time.sleep(0.1)
        sock.sendall(BODY[FIRST:])
        head, body = read_answer(sock)
    assert head.startswith(b"HTTP/1.1 200 ") and body == REPLY
    assert got == [BODY] and first.received[0][1] == BODY


def test_a_stale_pooled_connection_is_retried_with_every_part_so_far():
    """The server closes a kept-alive connection as the fed request arrives on it: the request
    goes again, whole, on a new connection (as `post` does for a whole body)."""
    bodies: list[bytes] = []

    def handle(conn: socket.socket) -> None:
        first = read_request(conn)
        if not bodies:  # the first connection: answers one call, then drops the next unanswered
            bodies.append(first)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            conn.recv(1024)
            return
        bodies.append(first.partition(b"\r\n\r\n")[2])
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    url, _, server = raw_server(handle)

    async def run() -> bytes:
        client = Client(None)
        try:
            await client.post(f"{url}/a", b"{}", 1 << 20, False)
            feed = BodyFeed(len(BODY))
            feed.add(BODY[:FIRST])
            asyncio.get_running_loop().call_later(0.2, lambda: (feed.add(BODY[FIRST:]), feed.finish()))
            reply = await client.post_feed(f"{url}/a", feed, 1 << 20, False)
            return reply.first
        finally:
            client.close()

    try:
        answer = asyncio.run(run())
    finally:
        server.close()
    assert answer == b"ok" and bodies[1:] == [BODY]


def test_a_feed_says_when_it_will_never_be_whole():
    async def run() -> None:
        feed = BodyFeed(10)
        seen: list[bytes] = []
        feed.add(b"abc")
        feed.attach(seen.append)  # the parts so far, then each one as it comes
        feed.add(b"de")
        waiting = asyncio.ensure_future(feed.whole())
        await asyncio.sleep(0)
        feed.fail("gone")
        with pytest.raises(FeedBroken, match="gone"):
            await waiting
        feed.add(b"late")  # no longer passed on
        assert seen == [b"abc", b"de"] and feed.broken

    asyncio.run(run())
