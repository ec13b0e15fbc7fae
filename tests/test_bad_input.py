"""Malformed extender requests: the combined form answers 400 with the reason and records the
call; each kind of problem is logged once per interval, without a traceback; a body that never
finishes arriving is cut off with 408."""
from __future__ import annotations

import logging
import socket
import time

import pytest
import requests

import extproxy.asgi  # noqa: F401  (its django.setup() reconfigures logging: before caplog, not during a test)
from tests.conftest import fixture_bytes, pass_all
from tests.test_combined import backend

BAD_BODIES = {
    "not json": b"hello",
    "empty": b"",
    "wrong type": b'{"Pod": 1, "NodeNames": "x"}',
    # Inside a string Go reads such bytes as U+FFFD (tests/protocol/test_gostrings.py); outside one
    # they are no JSON.
    "invalid utf-8": b'{"Pod": {"metadata": {"name": "a"}}, "NodeNames": \xff\xfe}',
    "deep nesting": b"[" * 50_000 + b"]" * 50_000,
    "deep object": b'{"Pod":' + b'{"a":' * 5_000 + b"1" + b"}" * 5_000 + b"}",
}


@pytest.mark.parametrize("verb", ["filter", "prioritize", "bind", "preempt"])
def test_it_answers_every_malformed_combined_request_with_400(verb, backend_server, proxy, write_config, caplog):
    a = backend_server({"*": pass_all})
    server = proxy(write_config({"backends": [backend("a", a, filterVerb="filter", prioritizeVerb="prioritize",
                                                      bindVerb="bind", preemptVerb="preempt", weight=1)]}))
    caplog.set_level(logging.WARNING, logger="extproxy")

    for kind, body in BAD_BODIES.items():
        for _ in range(3):
            response = requests.post(f"{server.url}/extender/{verb}", data=body, timeout=30)
            assert response.status_code == 400, (kind, response.status_code, response.text)
            assert "bad request" in response.text, kind

    assert a.received == []  # nothing malformed reaches a backend
    server.flush()  # in the database: the recorder process has drained the spool
    from extproxy.models import Call

    assert Call.objects.filter(verb=verb, backend="combined", http_status=400).count() == 3 * len(BAD_BODIES)
    lines = [r for r in caplog.records if r.name == "extproxy.engine"]
    assert lines and not any(r.exc_info for r in lines)  # logged, and without a traceback
    assert len(lines) <= 4  # one per kind (ProtocolError, DecodeError, RecursionError), not one per request
    # The server is still serving well-formed calls.
    ok = requests.post(f"{server.url}/extender/filter", data=fixture_bytes("filter-request.nodecache-false.json"), timeout=30)
    assert ok.status_code == 200 and ok.json()["Error"] == ""


@pytest.mark.parametrize("port", ["main", "listener"])
def test_it_cuts_off_a_request_whose_body_does_not_arrive_in_time(backend_server, proxy, write_config, settings, port):
    from tests.conftest import free_port

    settings.EXTPROXY_BODY_TIMEOUT = 0.5
    if port == "listener":
        settings.EXTPROXY_EXTENDER_PORT = free_port()
    a = backend_server({"*": pass_all})
    server = proxy(write_config({"backends": [backend("a", a, filterVerb="filter")]}))
    target = settings.EXTPROXY_EXTENDER_PORT or server.port

    for path in ("/extender/filter", "/extender/a/filter"):
        with socket.create_connection(("127.0.0.1", target), timeout=10) as conn:
            conn.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         "Content-Length: 1000\r\n\r\n{\"Pod\":".encode())
            started = time.monotonic()
            answer = conn.recv(4096).decode()
            assert time.monotonic() - started < 8  # not the client's own 10 s timeout
        assert answer.startswith("HTTP/1.1 408"), answer
        assert "EXTPROXY_BODY_TIMEOUT" in answer
    assert a.received == []
