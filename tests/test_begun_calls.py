"""Calls the extender listener starts without a task (listener._serve_now, HTTPBackend.begin).

A per-backend call that finds an idle connection to its backend is written at once and its
reply followed by the connection's callbacks; every reply that needs more (a redirect, a large
or encoded reply, a failure, a retry, the deadline) goes on as the usual call does. Each test
first makes a call that leaves a kept-alive connection behind, so that the call under test is
begun (counted by `begun`), and checks what the scheduler gets, what is recorded, and that the
listener goes on serving.
"""
from __future__ import annotations

import gzip
import json
import socket
import threading
import time

import pytest
import requests

from tests.conftest import fixture_bytes, pass_all, reply
from tests.test_listener import (  # noqa: F401 (listening: a fixture)
    FILTER_NAMES, config_for, duration_count, filter_frames, listening, post, read_answers,
)
from tests.test_relay import HALF, REPLY, first_half_then
from tests.test_wire_client import raw_server, read_request

PRIORITIZE = "prioritize-request.nodecache-true.json"


@pytest.fixture
def begun(monkeypatch):
    """How many calls HTTPBackend.begin started (True) and left to the usual path (False)."""
    from extproxy.backends.http import HTTPBackend

    counts = {True: 0, False: 0}
    original = HTTPBackend.begin

    def counting(self, *args):
        started = original(self, *args)
        counts[started] += 1
        return started

    monkeypatch.setattr(HTTPBackend, "begin", counting)
    return counts


def calls_recorded(server) -> list[tuple[str, str, int | None]]:
    """Every call in the database, in order; and no backend connection is still held by a call
    (a call that never gave its connection back would leave its pool one short for good)."""
    from extproxy.models import Call

    server.flush()
    backend = server.engine.backends["gpu"]
    deadline = time.monotonic() + 5  # a call gives its connection back just after its last byte is written
    while backend.connections_in_use and time.monotonic() < deadline:
        time.sleep(0.01)
    assert backend.connections_in_use == 0
    return list(Call.objects.order_by("started_at").values_list("verb", "outcome", "http_status"))


def wait_recorded(server, calls: int) -> None:
    """Until `calls` calls are in the database (at most 10 s)."""
    from extproxy.models import Call

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        server.flush()
        if Call.objects.count() >= calls:
            return
        time.sleep(0.05)


def call_and_hang_up(base: str, backend) -> None:
    """A filter call on a raw connection, closed once the backend has the request (its second)."""
    request = fixture_bytes(FILTER_NAMES)
    with socket.create_connection(("127.0.0.1", int(base.rsplit(":", 1)[1])), timeout=10) as sock:
        sock.sendall(b"POST /extender/gpu/filter HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(request), request))
        deadline = time.monotonic() + 5
        while len(backend.received) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)


def warm_up(base: str) -> None:
    """A call that leaves a kept-alive connection to the backend in the pool."""
    assert post(base, "/extender/gpu/prioritize", fixture_bytes(PRIORITIZE)).status_code == 200


def test_a_call_on_a_kept_connection_is_begun_and_answered_as_any_other(backend_server, listening, write_config, begun):
    answer = fixture_bytes("filter-result.nodecache-true.json")
    backend = backend_server({"filter": reply(200, answer), "prioritize": reply(200, b"[]")})
    server, base = listening(write_config(config_for(backend.url)))
    request = fixture_bytes(FILTER_NAMES)
    counted = duration_count(server.url, "gpu", "filter")

    with requests.Session() as session:  # the scheduler's own connection is kept alive too
        answers = [session.post(base + "/extender/gpu/filter", data=request, timeout=10) for _ in range(3)]

    assert [(a.status_code, a.content, a.headers["Content-Type"]) for a in answers] == [(200, answer, "application/json")] * 3
    assert begun == {True: 2, False: 1}  # the first call opened the connection the others found idle
    assert backend.received == [("/scheduler/filter", request)] * 3
    assert calls_recorded(server) == [("filter", "ok", 200)] * 3
    assert duration_count(server.url, "gpu", "filter") == counted + 3


def test_a_begun_call_answers_the_scheduler_equivalent_error_at_its_deadline(backend_server, listening, write_config,
                                                                              begun):
    seen = []

    def slow_second(handler, body):
        seen.append(body)
        if len(seen) == 1:
            time.sleep(1.5)  # httpTimeout 1s: extproxy gives up at 0.9 s
        try:
            pass_all(handler, body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    backend = backend_server({"filter": slow_second, "prioritize": reply(200, b"[]")})
    server, base = listening(write_config(config_for(backend.url, httpTimeout="1s")))
    warm_up(base)
    request = fixture_bytes(FILTER_NAMES)

    late = post(base, "/extender/gpu/filter", request)
    after = post(base, "/extender/gpu/filter", request)

    assert late.status_code == 200 and "extproxy: backend gpu: no answer within 0.9s" in late.json()["Error"]
    assert after.status_code == 200 and after.json()["Error"] == "" and after.json()["NodeNames"]
    assert begun[True] == 1  # the late call; its connection was dropped, so the next one opened another
    assert [outcome for _, outcome, _ in calls_recorded(server)] == ["ok", "timeout", "ok"]


def moved(handler, _body) -> None:
    """A backend's 307 to /scheduler/moved."""
    handler.send_response(307)
    handler.send_header("Location", "/scheduler/moved")
    handler.send_header("Content-Length", "0")
    handler.end_headers()


def test_a_begun_call_follows_a_redirect(backend_server, listening, write_config, begun):
    backend = backend_server({"filter": moved, "moved": pass_all, "prioritize": reply(200, b"[]")})
    server, base = listening(write_config(config_for(backend.url)))
    warm_up(base)
    request = fixture_bytes(FILTER_NAMES)

    answer = post(base, "/extender/gpu/filter", request)

    assert answer.status_code == 200 and answer.json()["NodeNames"] == json.loads(request)["NodeNames"]
    assert backend.received[1:] == [("/scheduler/filter", request), ("/scheduler/moved", request)]
    assert begun[True] == 1
    assert calls_recorded(server)[1:] == [("filter", "ok", 200)]


def test_a_begun_call_passes_a_large_reply_on_before_the_backend_finished_it(backend_server, listening, write_config,
                                                                             begun):
    client_has_bytes = threading.Event()
    waited: list[bool] = []

    def rest_when_the_client_has_the_first_bytes(handler) -> None:
        waited.append(client_has_bytes.wait(10))  # a call that waits for the whole reply waits here
        handler.wfile.write(REPLY[HALF:])

    backend = backend_server({"filter": first_half_then(rest_when_the_client_has_the_first_bytes),
                              "prioritize": reply(200, b"[]")})
    server, base = listening(write_config(config_for(backend.url)))
    warm_up(base)

    with requests.post(base + "/extender/gpu/filter", data=fixture_bytes(FILTER_NAMES), stream=True, timeout=30) as resp:
        assert resp.status_code == 200 and resp.headers["content-length"] == str(len(REPLY))
        first = resp.raw.read(1000)
        client_has_bytes.set()
        got = first + resp.raw.read()

    assert waited == [True] and got == REPLY
    assert begun[True] == 1
    assert [(verb, status) for verb, _, status in calls_recorded(server)] == [("prioritize", 200), ("filter", 200)]


def test_a_begun_call_streams_a_reply_over_the_bound_and_records_its_first_part(backend_server, listening,
                                                                                 write_config, settings, begun):
    from extproxy.models import Call

    settings.EXTPROXY_MAX_REPLY_BYTES = 64 * 1024  # read when the backend is built
    request = fixture_bytes(FILTER_NAMES)
    over = json.dumps({"NodeNames": json.loads(request)["NodeNames"], "FailedNodes": {},
                       "Error": "", "Pad": "x" * 100_000}).encode()  # over the bound, under RELAY_BYTES
    backend = backend_server({"filter": reply(200, over), "prioritize": reply(200, b"[]")})
    server, base = listening(write_config(config_for(backend.url)))
    warm_up(base)

    answer = post(base, "/extender/gpu/filter", request)

    assert answer.status_code == 200 and answer.content == over
    assert begun[True] == 1
    calls_recorded(server)
    call = Call.objects.get(verb="filter")
    assert [f["kind"] for f in call.findings if f["kind"] == "reply-truncated"] == ["reply-truncated"]


def test_a_begun_call_decodes_a_gzip_reply(backend_server, listening, write_config, begun):
    request = fixture_bytes(FILTER_NAMES)
    plain = json.dumps({"NodeNames": json.loads(request)["NodeNames"], "FailedNodes": {}, "Error": ""}).encode()

    def zipped(handler, _body):
        data = gzip.compress(plain)
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Encoding", "gzip")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    backend = backend_server({"filter": zipped, "prioritize": reply(200, b"[]")})
    server, base = listening(write_config(config_for(backend.url)))
    warm_up(base)

    answer = post(base, "/extender/gpu/filter", request)

    assert answer.status_code == 200 and answer.content == plain and "Content-Encoding" not in answer.headers
    assert begun[True] == 1


def scripted_backend(script):
    """A raw backend: `script(n, conn)` handles the n-th request (from 0) on each connection;
    it returns False to close the connection."""
    requests_seen: list[bytes] = []

    def handle(conn: socket.socket) -> None:
        n = 0
        while True:
            data = read_request(conn)
            if not data:
                return
            requests_seen.append(data)
            if not script(n, conn):
                return
            n += 1

    url, _, listener = raw_server(handle)
    return url, requests_seen, listener


OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n[]"
FILTERED = json.dumps({"NodeNames": json.loads(fixture_bytes(FILTER_NAMES))["NodeNames"], "FailedNodes": {},
                       "Error": ""}).encode()


def test_a_begun_call_is_sent_again_when_the_backend_closed_the_kept_connection(listening, write_config, begun):
    def script(n: int, conn: socket.socket) -> bool:
        if len(requests_seen) == 1:
            conn.sendall(OK)  # the warm-up, kept alive
            return True
        if len(requests_seen) == 2:
            return False  # closed as the next request arrived, before any reply byte: Go sends it again
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(FILTERED), FILTERED))
        return True

    url, requests_seen, listener = scripted_backend(script)
    try:
        server, base = listening(write_config(config_for(url)))
        warm_up(base)
        answer = post(base, "/extender/gpu/filter", fixture_bytes(FILTER_NAMES))
    finally:
        listener.close()

    assert answer.status_code == 200 and answer.content == FILTERED
    assert [r.split(b" ", 2)[1] for r in requests_seen] == [b"/scheduler/prioritize", b"/scheduler/filter",
                                                            b"/scheduler/filter"]
    assert begun[True] == 1
    assert calls_recorded(server)[1:] == [("filter", "ok", 200)]


def test_a_begun_call_whose_reply_breaks_off_answers_the_error(listening, write_config, begun):
    def script(n: int, conn: socket.socket) -> bool:
        if n == 0:
            conn.sendall(OK)
            return True
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"NodeNames\"")
        return False  # closed in the middle of the body: not sent again

    url, requests_seen, listener = scripted_backend(script)
    try:
        server, base = listening(write_config(config_for(url)))
        warm_up(base)
        answer = post(base, "/extender/gpu/filter", fixture_bytes(FILTER_NAMES))
        after = post(base, "/extender/gpu/prioritize", fixture_bytes(PRIORITIZE))
    finally:
        listener.close()

    assert answer.status_code == 200
    assert "before the end of its reply" in answer.json()["Error"]
    assert len(requests_seen) == 3 and after.status_code == 200  # not retried; the next call is served
    assert begun[True] == 1
    assert [outcome for _, outcome, _ in calls_recorded(server)] == ["ok", "error", "ok"]


def test_a_begun_call_is_recorded_when_the_scheduler_goes_away(backend_server, listening, write_config, begun):
    released = threading.Event()

    def held(handler, body):
        released.wait(5)
        try:
            pass_all(handler, body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    backend = backend_server({"filter": held, "prioritize": reply(200, b"[]")})
    server, base = listening(write_config(config_for(backend.url)))
    warm_up(base)
    call_and_hang_up(base, backend)
    released.set()  # the scheduler's connection is closed; the backend answers now
    wait_recorded(server, 2)
    after = post(base, "/extender/gpu/prioritize", fixture_bytes(PRIORITIZE))

    assert begun[True] == 2  # the filter call, then the last call on the connection it gave back
    assert calls_recorded(server) == [("prioritize", "ok", 200), ("filter", "ok", 200), ("prioritize", "ok", 200)]
    assert after.status_code == 200


def test_a_begun_call_that_needs_a_task_runs_to_its_end_when_the_scheduler_went_away(backend_server, listening,
                                                                                      write_config, begun):
    released = threading.Event()

    def moved_later(handler, body):
        released.wait(5)
        moved(handler, body)

    backend = backend_server({"filter": moved_later, "moved": pass_all, "prioritize": reply(200, b"[]")})
    server, base = listening(write_config(config_for(backend.url)))
    warm_up(base)
    call_and_hang_up(base, backend)
    time.sleep(0.1)  # the listener has seen the scheduler's connection close
    released.set()  # the redirect comes now: it is followed in a task, for nobody
    wait_recorded(server, 2)

    assert begun[True] == 1
    assert [path for path, _ in backend.received] == ["/scheduler/prioritize", "/scheduler/filter", "/scheduler/moved"]
    assert calls_recorded(server) == [("prioritize", "ok", 200), ("filter", "ok", 200)]


def test_requests_pipelined_behind_a_begun_call_are_answered_in_order(backend_server, listening, write_config, begun):
    def slow_first(handler, body):
        if b'"n0"' in body:
            time.sleep(0.3)  # the next requests arrive meanwhile
        pass_all(handler, body)

    backend = backend_server({"filter": slow_first, "prioritize": reply(200, b"[]")})
    server, base = listening(write_config(config_for(backend.url)))
    warm_up(base)
    port = int(base.rsplit(":", 1)[1])
    frames = filter_frames(3)

    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(frames[0])
        time.sleep(0.1)
        sock.sendall(frames[1] + frames[2])
        got = read_answers(sock, 3)

    positions = [got.index(f'"n{i}"'.encode()) for i in range(3)]
    assert positions == sorted(positions)
    assert begun[True] >= 1  # the first; the two that waited went the usual way
    assert [verb for verb, _, _ in calls_recorded(server)] == ["prioritize", "filter", "filter", "filter"]


def test_a_bug_while_answering_a_begun_call_costs_only_its_connection(backend_server, listening, write_config, begun,
                                                                       monkeypatch):
    from extproxy.engine import Engine

    backend = backend_server({"filter": pass_all, "prioritize": reply(200, b"[]")})
    server, base = listening(write_config(config_for(backend.url)))
    warm_up(base)
    original = Engine._answer
    fail = [True]

    def broken(self, *args):
        if fail[0]:
            fail[0] = False
            raise RuntimeError("a bug")
        return original(self, *args)

    monkeypatch.setattr(Engine, "_answer", broken)
    port = int(base.rsplit(":", 1)[1])
    request = fixture_bytes(FILTER_NAMES)

    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"POST /extender/gpu/filter HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(request), request))
        closed_without_answer = sock.recv(65536) == b""
    after = post(base, "/extender/gpu/filter", request)

    assert closed_without_answer
    assert begun[True] == 2 and after.status_code == 200 and after.json()["NodeNames"]


def test_a_refused_call_is_refused_and_counted_once(backend_server, listening, write_config):
    from extproxy.metrics import REGISTRY

    backend = backend_server({"prioritize": reply(200, b"[]")})
    server, base = listening(write_config(config_for(backend.url)))
    warm_up(base)

    def refused(reason: str) -> float:
        return REGISTRY.get_sample_value("extproxy_rejected_requests_total", {"reason": reason}) or 0

    before = refused("backend"), refused("verb")
    unknown = post(base, "/extender/nope/filter", b"{}")
    no_verb = post(base, "/extender/gpu/explode", b"{}")

    assert unknown.status_code == 404 and no_verb.status_code == 404
    assert (refused("backend"), refused("verb")) == (before[0] + 1, before[1] + 1)
