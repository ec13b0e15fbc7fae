"""Cut-through replies (per-backend form): a large backend reply is passed on as it arrives.

On the extender listener and on the main port alike: the scheduler gets the first bytes before
the backend has sent the last ones, every byte unchanged, and the record keeps the whole reply.
A backend that breaks off or stalls after its head: the scheduler's connection is closed before
the announced length (the only way to say so once the head is out; the scheduler takes it as a
failed call to that extender), and the record says what happened and keeps what arrived.
"""
from __future__ import annotations

import socket
import threading
import time

import pytest
import requests

from tests.conftest import BackendHandler, fixture_bytes, free_port
from tests.test_reply_bound import names_reply_chunks

FILTER_NAMES = "filter-request.nodecache-true.json"
REPLY = b"".join(names_reply_chunks(30_000))  # ~510 kB: over the relay size, under the bound
HALF = len(REPLY) // 2


def config_for(url: str, timeout: str = "20s") -> dict:
    return {"backends": [{"name": "big", "urlPrefix": f"{url}/scheduler", "filterVerb": "filter", "weight": 1,
                          "httpTimeout": timeout, "nodeCacheCapable": True}]}


@pytest.fixture(params=["listener", "main"])
def serve(request, proxy, settings):
    """Start the proxy; returns (server, base URL of the port the scheduler calls)."""
    def start(config_path: str):
        if request.param == "main":
            server = proxy(config_path)
            return server, server.url
        port = free_port()
        settings.EXTPROXY_EXTENDER_PORT, settings.EXTPROXY_EXTENDER_HOST = port, "127.0.0.1"
        return proxy(config_path), f"http://127.0.0.1:{port}"

    return start


def first_half_then(after) -> callable:
    """A backend that sends its head and the first half of REPLY, then calls `after(handler)`."""
    def behave(handler: BackendHandler, _body: bytes) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(REPLY)))
        handler.end_headers()
        handler.wfile.write(REPLY[:HALF])
        handler.wfile.flush()
        try:
            after(handler)
        except (BrokenPipeError, ConnectionResetError):
            pass

    return behave


def stored(server):
    from extproxy.bodies import response_of
    from extproxy.models import Call

    server.flush()
    call = Call.objects.get()
    body = response_of(call)
    assert body.exact
    return call, body.data


def test_it_passes_a_large_reply_on_before_the_backend_finished_it(backend_server, serve, write_config):
    client_has_bytes = threading.Event()
    waited: list[bool] = []

    def rest_when_the_client_has_the_first_bytes(handler: BackendHandler) -> None:
        waited.append(client_has_bytes.wait(10))  # a proxy that waits for the whole reply waits here
        handler.wfile.write(REPLY[HALF:])

    backend = backend_server({"filter": first_half_then(rest_when_the_client_has_the_first_bytes)})
    server, base = serve(write_config(config_for(backend.url)))

    with requests.post(base + "/extender/big/filter", data=fixture_bytes(FILTER_NAMES), stream=True, timeout=30) as resp:
        assert resp.status_code == 200 and resp.headers["content-length"] == str(len(REPLY))
        first = resp.raw.read(1000)
        client_has_bytes.set()
        got = first + resp.raw.read()

    assert waited == [True]
    assert got == REPLY  # every byte, unchanged
    call, body = stored(server)
    assert body == REPLY and call.http_status == 200
    assert "broke off" not in call.error and "closed before" not in call.error  # (its names are judged unknown)
    assert not [f for f in call.findings if f["kind"] == "reply-truncated"]


def raw_call(base: str, body: bytes) -> tuple[bytes, bytes, float]:
    """POST on a raw socket and read until the proxy closes: (head, body bytes, seconds)."""
    host, port = base.removeprefix("http://").split(":")
    started = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        sock.sendall(b"POST /extender/big/filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) + body)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest, time.monotonic() - started


@pytest.mark.parametrize("failure", ["closes", "stalls"])
def test_a_backend_that_fails_mid_reply_gets_the_schedulers_connection_closed_and_is_recorded(
    backend_server, serve, write_config, failure
):
    def closes(handler: BackendHandler) -> None:
        handler.close_connection = True
        handler.connection.shutdown(socket.SHUT_RDWR)

    def stalls(handler: BackendHandler) -> None:
        time.sleep(3)  # past the budget: httpTimeout 1s (0.9 s for the backend)

    backend = backend_server({"filter": first_half_then(closes if failure == "closes" else stalls)})
    server, base = serve(write_config(config_for(backend.url, timeout="1s")))

    head, body, seconds = raw_call(base, fixture_bytes(FILTER_NAMES))

    assert head.startswith(b"HTTP/1.1 200 ") and b"content-length: %d" % len(REPLY) in head.lower()
    assert body == REPLY[:HALF]  # what the backend sent, then the end of the connection
    assert seconds < 2.5  # the budget ends the call; the backend's stall does not
    call, kept = stored(server)
    assert kept == REPLY[:HALF] and call.http_status == 200
    expected = "the reply broke off" if failure == "closes" else "no complete answer within 0.9s"
    incomplete = [f["detail"] for f in call.findings if f["kind"] == "reply-incomplete"]
    assert len(incomplete) == 1 and f"got the head and {HALF} of {len(REPLY)} body bytes" in incomplete[0]
    assert expected in incomplete[0]
    # What the scheduler's decoder makes of it: a truncated reply, or the budget.
    assert call.error == ("unexpected EOF" if failure == "closes" else expected)


def test_a_backend_that_breaks_off_after_its_head_is_recorded_and_the_connection_closed(backend_server, serve,
                                                                                          write_config, request):
    """Nothing of the body came: the listener holds a relayed reply's head until its first body
    bytes, so the scheduler gets the connection closed without an answer (Go: EOF), where the main
    port had sent the head (Go: unexpected EOF). Either is a failed call to this extender."""
    def head_only(handler: BackendHandler, _body: bytes) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(REPLY)))
        handler.end_headers()
        handler.wfile.flush()
        handler.close_connection = True
        handler.connection.shutdown(socket.SHUT_RDWR)

    backend = backend_server({"filter": head_only})
    server, base = serve(write_config(config_for(backend.url)))

    head, body, _ = raw_call(base, fixture_bytes(FILTER_NAMES))

    if request.node.callspec.params["serve"] == "listener":
        assert head == b"" and body == b""
    else:
        assert head.startswith(b"HTTP/1.1 200 ") and body == b""
    call, kept = stored(server)
    assert kept == b"" and call.http_status == 200
    incomplete = [f["detail"] for f in call.findings if f["kind"] == "reply-incomplete"]
    assert len(incomplete) == 1 and f"got the head and 0 of {len(REPLY)} body bytes" in incomplete[0]
