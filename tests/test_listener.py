"""The separate extender listener (EXTPROXY_EXTENDER_PORT): same answers as the main port.

Every behaviour of the per-backend and combined endpoints must hold on this port too:
unchanged bytes, the scheduler-equivalent errors on timeouts, 404/405/413 with reasons, the
reply bound, recording, metrics; plus what HTTP/1.1 clients do: keep-alive, pipelining,
Expect: 100-continue, chunked request bodies, HTTP/1.0.
"""
from __future__ import annotations

import json
import socket
import threading
import time

import pytest
import requests

from tests.conftest import fixture_bytes, free_port, pass_all, reply, slow
from tests.test_reply_bound import digest_of, names_reply_chunks, streamed

FILTER_NAMES = "filter-request.nodecache-true.json"
FILTER_RESULT = "filter-result.nodecache-true.json"


def config_for(url: str, **fields) -> dict:
    backend = {"name": "gpu", "urlPrefix": f"{url}/scheduler", "filterVerb": "filter", "prioritizeVerb": "prioritize",
               "bindVerb": "bind", "weight": 2, "httpTimeout": "2s", "nodeCacheCapable": True}
    backend.update(fields)
    return {"backends": [backend]}


@pytest.fixture
def listening(proxy, settings):
    """Start the proxy with its extender listener; returns (server, listener base URL)."""
    def start(config_path: str):
        port = free_port()
        settings.EXTPROXY_EXTENDER_PORT = port
        settings.EXTPROXY_EXTENDER_HOST = "127.0.0.1"
        return proxy(config_path), f"http://127.0.0.1:{port}"

    return start


def post(base: str, path: str, body: bytes, **kw) -> requests.Response:
    return requests.post(base + path, data=body, headers={"Content-Type": "application/json"}, timeout=30, **kw)


def exchange_raw(port: int, data: bytes, expect_answers: int) -> bytes:
    """Send raw bytes on one connection and read until `expect_answers` answers arrived."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        got = b""
        while got.count(b"HTTP/1.1 ") < expect_answers or not _bodies_complete(got):
            chunk = sock.recv(65536)
            if not chunk:
                break
            got += chunk
        return got


def read_answers(sock: socket.socket, count: int) -> bytes:
    """Read from `sock` until `count` whole 200 answers have arrived."""
    got = b""
    while got.count(b"HTTP/1.1 200 OK") < count or not _bodies_complete(got):
        chunk = sock.recv(65536)
        assert chunk, got
        got += chunk
    return got


def filter_frames(count: int) -> list[bytes]:
    """`count` filter requests as raw HTTP/1.1, each naming one node n0, n1, ..."""
    return [b"POST /extender/gpu/filter HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(b), b)
            for b in (json.dumps({"NodeNames": [f"n{i}"]}).encode() for i in range(count))]


def _bodies_complete(data: bytes) -> bool:
    rest = data
    while rest:
        head, sep, after = rest.partition(b"\r\n\r\n")
        if not sep:
            return False
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0)
        if head.startswith(b"HTTP/1.1 100"):
            rest = after
            continue
        if len(after) < length:
            return False
        rest = after[length:]
    return True


def test_it_answers_the_backends_bytes_and_records_the_call(backend_server, listening, write_config, admin_client):
    answer = fixture_bytes(FILTER_RESULT)
    backend = backend_server({"filter": reply(200, answer)})
    server, base = listening(write_config(config_for(backend.url)))
    request = fixture_bytes(FILTER_NAMES)
    observed_before = duration_count(server.url, "gpu", "filter")  # the registry is per process

    response = post(base, "/extender/gpu/filter", request)

    assert response.status_code == 200 and response.content == answer
    assert response.headers["Content-Type"] == "application/json"
    assert backend.received == [("/scheduler/filter", request)]
    server.flush()
    calls = admin_client.get(server.url + "/api/calls/").json()["results"]
    assert [(c["backend"], c["verb"], c["outcome"], c["node_count"]) for c in calls] == [("gpu", "filter", "ok", 5)]
    assert duration_count(server.url, "gpu", "filter") == observed_before + 1


def duration_count(url: str, backend: str, verb: str) -> float:
    key = f'extproxy_request_duration_seconds_count{{backend="{backend}",verb="{verb}"}} '
    for line in requests.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith(key):
            return float(line[len(key):])
    return 0.0


@pytest.mark.parametrize("verb, status", [("filter", 200), ("bind", 200), ("prioritize", 504)])
def test_it_answers_the_scheduler_equivalent_error_when_the_backend_is_too_slow(
    backend_server, listening, write_config, verb, status
):
    backend = backend_server({"*": slow(3, reply(200, b"{}"))})
    server, base = listening(write_config(config_for(backend.url, httpTimeout="1s")))
    body = fixture_bytes({"filter": FILTER_NAMES, "prioritize": "prioritize-request.nodecache-true.json",
                          "bind": "bind-request.json"}[verb])

    response = post(base, f"/extender/gpu/{verb}", body)

    assert response.status_code == status
    text = response.json()["Error"] if status == 200 else response.text
    assert "extproxy: backend gpu: no answer within 0.9s" in text
    server.flush()
    from extproxy.models import Call

    assert Call.objects.get().outcome == "timeout"


def test_it_refuses_with_reasons(backend_server, listening, write_config, settings):
    backend = backend_server({"filter": pass_all})
    server, base = listening(write_config(config_for(backend.url)))
    settings.EXTPROXY_MAX_BODY_BYTES = 1000  # read per connection: applies to new ones
    port = int(base.rsplit(":", 1)[1])

    unknown = post(base, "/extender/nope/filter", b"{}")
    wrong_verb = post(base, "/extender/gpu/explode", b"{}")
    not_extender = requests.get(base + "/api/calls/", timeout=10)
    get = requests.get(base + "/extender/gpu/filter", timeout=10)
    big = post(base, "/extender/gpu/filter", b"x" * 5000)
    chunked = exchange_raw(port, b"POST /extender/gpu/filter HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                           + b"".join(b"%x\r\n%s\r\n" % (400, b"y" * 400) for _ in range(5)) + b"0\r\n\r\n", 1)

    assert unknown.status_code == 404 and "unknown backend 'nope'" in unknown.json()["error"]
    assert wrong_verb.status_code == 404 and "no verb 'explode'" in wrong_verb.json()["error"]
    assert not_extender.status_code == 404 and "serves only /extender/" in not_extender.json()["error"]
    assert get.status_code == 405 and "POST" in get.json()["error"]
    assert big.status_code == 413 and "EXTPROXY_MAX_BODY_BYTES" in big.json()["error"]
    assert chunked.startswith(b"HTTP/1.1 413 ") and b"EXTPROXY_MAX_BODY_BYTES" in chunked
    assert backend.received == []
    # still serving after every refusal
    assert post(base, "/extender/gpu/filter", b'{"NodeNames":["a"]}').status_code == 200


def test_it_keeps_connections_alive_and_answers_pipelined_requests_in_order(backend_server, listening, write_config):
    backend = backend_server({"filter": pass_all})
    server, base = listening(write_config(config_for(backend.url)))
    port = int(base.rsplit(":", 1)[1])
    bodies = [json.dumps({"NodeNames": [f"n{i}"]}).encode() for i in range(3)]
    requests_bytes = b"".join(
        b"POST /extender/gpu/filter HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(b), b) for b in bodies
    )

    answers = exchange_raw(port, requests_bytes, 3)

    assert answers.count(b"HTTP/1.1 200 OK") == 3
    assert [answers.index(f'"n{i}"'.encode()) for i in range(3)] == sorted(answers.index(f'"n{i}"'.encode()) for i in range(3))
    assert b"Connection: close" not in answers


def test_a_request_pipelined_while_one_is_being_served_waits_its_turn(backend_server, listening, write_config):
    """Reading stops only when a next request's bytes arrive during a call (listener.py): the
    calls still go to the backend one at a time and are answered in the order they were sent."""
    in_flight, most = [0], [0]
    guard = threading.Lock()

    def slow_first(handler, body: bytes) -> None:
        with guard:
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])
        if b'"n0"' in body:
            time.sleep(0.4)  # the next requests arrive meanwhile, in writes of their own
        with guard:
            in_flight[0] -= 1
        pass_all(handler, body)

    backend = backend_server({"filter": slow_first})
    server, base = listening(write_config(config_for(backend.url)))
    port = int(base.rsplit(":", 1)[1])
    frames = filter_frames(4)

    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(frames[0])
        time.sleep(0.1)
        for frame in frames[1:]:
            sock.sendall(frame)
            time.sleep(0.05)
        got = read_answers(sock, 4)

    positions = [got.index(f'"n{i}"'.encode()) for i in range(4)]
    assert positions == sorted(positions)
    assert len(backend.received) == 4 and most[0] == 1


def test_it_closes_a_connection_idle_for_its_bound_and_keeps_a_busy_one(backend_server, listening, write_config,
                                                                        monkeypatch):
    from extproxy import listener

    monkeypatch.setattr(listener, "IDLE_SECONDS", 0.6)
    backend = backend_server({"filter": pass_all})
    server, base = listening(write_config(config_for(backend.url)))
    port = int(base.rsplit(":", 1)[1])
    body = b'{"NodeNames":["a"]}'
    frame = b"POST /extender/gpu/filter HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)

    def answered(sock) -> bytes:
        got = b""
        while not (got.startswith(b"HTTP/1.1 200 OK") and _bodies_complete(got)):
            chunk = sock.recv(65536)
            assert chunk, "closed while a call was expected"
            got += chunk
        return got

    with socket.create_connection(("127.0.0.1", port), timeout=10) as busy, \
            socket.create_connection(("127.0.0.1", port), timeout=10) as quiet, \
            socket.create_connection(("127.0.0.1", port), timeout=10) as silent:
        quiet.sendall(frame)
        answered(quiet)
        for _ in range(8):  # 2 s of calls every 0.25 s: never idle for 0.6 s
            busy.sendall(frame)
            answered(busy)
            time.sleep(0.25)
        assert quiet.recv(100) == b""  # closed after its last answer
        assert silent.recv(100) == b""  # closed without ever sending
        busy.sendall(frame)
        answered(busy)


def test_it_answers_expect_continue_and_http_1_0(backend_server, listening, write_config):
    backend = backend_server({"filter": pass_all})
    server, base = listening(write_config(config_for(backend.url)))
    port = int(base.rsplit(":", 1)[1])
    body = b'{"NodeNames":["a"]}'

    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"POST /extender/gpu/filter HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body))
        assert sock.recv(100).startswith(b"HTTP/1.1 100 Continue")
        sock.sendall(body)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 OK")
    old = exchange_raw(port, b"POST /extender/gpu/filter HTTP/1.0\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body), 1)
    assert old.startswith(b"HTTP/1.1 200 OK") and b"Connection: close" in old


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_it_streams_a_reply_over_the_bound(backend_server, listening, write_config, settings, chunked):
    settings.EXTPROXY_MAX_REPLY_BYTES = 256 * 1024
    behave, length = streamed(200_000, chunked=chunked)
    backend = backend_server({"filter": behave})
    server, base = listening(write_config(config_for(backend.url, httpTimeout="20s")))

    with requests.post(base + "/extender/gpu/filter", data=fixture_bytes(FILTER_NAMES), stream=True, timeout=60) as resp:
        assert resp.status_code == 200
        got = digest_of(resp.iter_content(65536))

    assert got == digest_of(names_reply_chunks(200_000)) and got[1] == length
    server.flush()
    from extproxy.models import Call

    call = Call.objects.get()
    assert [f["kind"] for f in call.findings] == ["reply-truncated"]


def test_it_serves_the_combined_form(backend_server, listening, write_config):
    backend = backend_server({"filter": pass_all})
    server, base = listening(write_config(config_for(backend.url)))
    request = fixture_bytes(FILTER_NAMES)

    response = post(base, "/extender/filter", request)

    assert response.status_code == 200
    assert response.json()["NodeNames"] == json.loads(request)["NodeNames"]
    server.flush()
    from extproxy.models import Call

    assert Call.objects.get().backend == "combined"


def test_it_refuses_a_url_past_its_bound_as_it_arrives(backend_server, listening, write_config):
    # The URL was kept whole until its head ended: a client sending megabytes of it, and never
    # the end, grew the connection's buffer for as long as it liked.
    backend = backend_server({"filter": pass_all})
    server, base = listening(write_config(config_for(backend.url)))
    port = int(base.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"POST /extender/gpu/filter?" + b"a" * 20_000)  # the head never ends
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 414 ") and b"request URL over 8192 bytes" in answer
    whole = exchange_raw(port, b"POST /extender/gpu/filter?" + b"b" * 9000 + b" HTTP/1.1\r\nHost: x\r\n"
                         b"Content-Length: 2\r\n\r\n{}", 1)
    assert whole.count(b"HTTP/1.1 ") == 1 and whole.startswith(b"HTTP/1.1 414 ")  # one answer, the refusal
    assert backend.received == []
    assert post(base, "/extender/gpu/filter", b'{"NodeNames":["a"]}').status_code == 200
