"""Each port holds at most its bound of connections open at once (connection_bound.py, listener.py).

Before: 5,000 idle connections, from anyone who reaches a port, were all kept (5,019 file
descriptors in the serving process, +25 MB); under a 4,096 descriptor limit both the dashboard's
and the scheduler's calls then failed. A real serving process, with a small bound on each port:
a kept-alive connection made before the flood is answered throughout, the connections over the
bound are answered 503 with the reason and closed (their descriptors freed, counted in
/metrics), a flood on one port leaves the other one serving, and once the extra connections are
gone a new call is answered again.
"""
from __future__ import annotations

import http.client
import os
import selectors
import socket
import time

import pytest
import requests

from tests.conftest import fixture_bytes, free_port
from tests.processes import Installation

CONFIG = "backends:\n- name: builtin\n  policy: default\npolicies:\n  default:\n    rules:\n    - kind: resourceFit\n"
BOUND = 20
EXTRA = 200  # connections opened past the bound


@pytest.fixture
def installation(tmp_path, installation_database):
    extender_port = free_port()
    installation = Installation(
        tmp_path, CONFIG, installation_database, EXTPROXY_EXTENDER_PORT=str(extender_port),
        EXTPROXY_MAX_CONNECTIONS=str(BOUND), EXTPROXY_EXTENDER_MAX_CONNECTIONS=str(BOUND),
        # Idle connections within the bound must stay open for the whole test.
        EXTPROXY_BODY_TIMEOUT="600",
    )
    installation.extender_port = extender_port  # type: ignore[attr-defined]
    try:
        installation.manage("migrate", "--noinput", "-v", "0")
        installation.start_serving()
        yield installation
    finally:
        installation.close()


def open_fds(installation: Installation) -> int:
    assert installation.serving is not None
    return len(os.listdir(f"/proc/{installation.serving.process.pid}/fd"))


def flood(port: int, count: int) -> list[socket.socket]:
    return [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(count)]


def refusals(sockets: list[socket.socket], expected: int) -> tuple[list[bytes], list[socket.socket]]:
    """Reads the sockets the server answers and closes at once, until `expected` of them did (or
    a minute passed: a server that keeps them all never answers); returns those answers and the
    sockets still open."""
    selector = selectors.DefaultSelector()
    for sock in sockets:
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ, b"")
    answers: dict[socket.socket, bytes] = {}
    deadline = time.monotonic() + 60
    while len(answers) < expected and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=1):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                chunk = b""
            if chunk:
                selector.modify(sock, selectors.EVENT_READ, key.data + chunk)
            else:
                answers[sock] = key.data
                selector.unregister(sock)
    selector.close()
    for sock in sockets:
        sock.settimeout(30)
    return list(answers.values()), [s for s in sockets if s not in answers]


def answered(sock: socket.socket, request: bytes) -> int:
    sock.sendall(request)
    head = b""
    while b"\r\n" not in head:
        chunk = sock.recv(65536)
        assert chunk, "closed without an answer"
        head += chunk
    return int(head.split(b" ", 2)[1])


def call_kept(kept: http.client.HTTPConnection, request: bytes) -> int:
    if request.startswith(b"GET"):
        kept.request("GET", "/healthz")
    else:
        kept.request("POST", "/extender/builtin/filter", body=fixture_bytes("filter-request.nodecache-true.json"),
                     headers={"Content-Type": "application/json"})
    answer = kept.getresponse()
    answer.read()
    return answer.status


def check_port(installation: Installation, port: int, request: bytes, reason: str, other: tuple[int, bytes]) -> None:
    before = open_fds(installation)
    kept = http.client.HTTPConnection("127.0.0.1", port, timeout=30)  # as the scheduler's pool keeps one
    assert call_kept(kept, request) == 200

    extra = flood(port, BOUND + EXTRA)
    try:
        answers, still_open = refusals(extra, EXTRA + 1)
        assert len(answers) >= EXTRA + 1, f"{len(answers)} of {BOUND + EXTRA} connections over the bound refused"
        for answer in answers:
            assert answer.startswith(b"HTTP/1.1 503 "), answer[:300]
            assert b"connections" in answer and b"MAX_CONNECTIONS" in answer, answer[:500]
        assert open_fds(installation) - before <= BOUND + 5
        # Within the bound, all is served: the kept-alive connection and the new ones.
        for sock in still_open:
            assert answered(sock, request) == 200
        assert call_kept(kept, request) == 200
        # The other port is not touched by this one's flood.
        with socket.create_connection(("127.0.0.1", other[0]), timeout=30) as sock:
            assert answered(sock, other[1]) == 200
    finally:
        for sock in extra:
            sock.close()
        kept.close()

    # The extra connections gone, a new connection is served again (once the server saw them close).
    deadline = time.monotonic() + 60
    while True:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            try:
                status = answered(sock, request)
            except (AssertionError, ConnectionResetError):
                status = 0
        if status == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert status == 200
    metrics = requests.get(f"{installation.url}/metrics", timeout=30).text
    counted = [line for line in metrics.splitlines()
               if line.startswith(f'extproxy_rejected_requests_total{{reason="{reason}"}}')]
    assert counted and float(counted[0].rsplit(" ", 1)[1]) >= EXTRA + 1, counted


def filter_request() -> bytes:
    body = fixture_bytes("filter-request.nodecache-true.json")
    return (b"POST /extender/builtin/filter HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body))


HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def test_the_main_port_refuses_connections_over_its_bound(installation):
    check_port(installation, installation.port, HEALTHZ, "main-connections",
               (installation.extender_port, filter_request()))


def test_the_extender_listener_refuses_connections_over_its_bound(installation):
    check_port(installation, installation.extender_port, filter_request(), "extender-connections",
               (installation.port, HEALTHZ))
