"""The main port bounds a request's head before any of it reaches the application.

uvicorn's httptools protocol kept every header with no bound: 200,000 headers (18 MiB) to
/healthz, no login needed, were answered 200 and grew the serving process by 128 MB; one 20 MiB
header likewise. A real serving process: a head over EXTPROXY_MAX_HEADER_BYTES, many headers or
one long one, is answered 431 and the connection closed; a browser's log-in and a scheduler's
call on a kept-alive connection still work."""
from __future__ import annotations

import http.client
import json
import re
import socket
import time

import requests

from tests.conftest import fixture_bytes
from tests.processes import Installation

CONFIG = "backends:\n- name: builtin\n  policy: default\npolicies:\n  default:\n    rules:\n    - kind: resourceFit\n"
LIMIT = 32 * 1024


def send_head(port: int, head: bytes) -> bytes:
    """Sends `head` (as much as the server reads) and returns what it answers before closing."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        try:
            for start in range(0, len(head), 65536):
                sock.sendall(head[start:start + 65536])
        except (ConnectionResetError, BrokenPipeError):  # refused part-way: the answer is waiting
            pass
        sock.settimeout(60)
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
                if b"\r\n\r\n" in answer:
                    break
        except ConnectionResetError:
            pass
        return answer


def status_of(answer: bytes) -> int:
    match = re.match(rb"HTTP/1\.1 (\d{3})", answer)
    assert match, answer[:200]
    return int(match.group(1))


def test_a_request_head_over_the_bound_is_refused_431(tmp_path, installation_database):
    installation = Installation(tmp_path, CONFIG, installation_database, EXTPROXY_MAX_HEADER_BYTES=str(LIMIT))
    try:
        installation.manage("migrate", "--noinput", "-v", "0")
        installation.manage("bootstrap")
        installation.start_serving()
        start = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        many = start + b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 80) for i in range(200_000)) + b"\r\n"
        answer = send_head(installation.port, many)
        assert status_of(answer) == 431, answer[:300]
        one_long = start + b"X-Big: " + b"v" * (4 * 1024 * 1024) + b"\r\n\r\n"
        assert status_of(send_head(installation.port, one_long)) == 431

        # Under the bound, on one kept-alive connection: the scheduler's calls and a log-in.
        scheduler = http.client.HTTPConnection("127.0.0.1", installation.port, timeout=30)
        body = fixture_bytes("filter-request.nodecache-true.json")
        for _ in range(3):
            scheduler.request("POST", "/extender/builtin/filter", body=body,
                              headers={"Content-Type": "application/json", "X-Pad": "p" * (LIMIT // 2)})
            answer = scheduler.getresponse()
            content = answer.read()
            assert answer.status == 200, content[:300]
            assert "Error" in json.loads(content)
        scheduler.close()
        form = requests.get(installation.url + "/accounts/login/", timeout=30)
        cookies = dict(form.cookies)
        login = requests.post(installation.url + "/accounts/login/", timeout=30, allow_redirects=False, cookies=cookies,
                              data={"username": "admin", "password": "s3cret", "csrfmiddlewaretoken": cookies["csrftoken"]})
        cookies.update(login.cookies)
        assert login.status_code == 302, login.text[:300]
        assert requests.get(installation.url + "/backends/", cookies=cookies, timeout=30,
                            allow_redirects=False).status_code == 200
    finally:
        installation.close()


def answer_when_closed(sock: socket.socket) -> bytes:
    sock.settimeout(60)
    answer = b""
    try:
        while chunk := sock.recv(65536):
            answer += chunk
    except ConnectionResetError:
        pass
    return answer


def test_a_head_that_does_not_arrive_in_time_is_answered_408(tmp_path, installation_database):
    """A connection that sends nothing, or half a head, was kept open for as long as the client
    liked (seen for 50 s): now EXTPROXY_BODY_TIMEOUT bounds it, on a new connection and on a
    kept-alive one after its first answer."""
    installation = Installation(tmp_path, CONFIG, installation_database, EXTPROXY_BODY_TIMEOUT="1")
    try:
        installation.manage("migrate", "--noinput", "-v", "0")
        installation.start_serving()
        address = ("127.0.0.1", installation.port)
        with socket.create_connection(address) as silent:
            assert status_of(answer_when_closed(silent)) == 408
        with socket.create_connection(address) as slow:
            slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            answer = answer_when_closed(slow)
        assert status_of(answer) == 408, answer[:300]
        assert b"EXTPROXY_BODY_TIMEOUT" in answer
        with socket.create_connection(address) as kept:
            kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            answer = answer_when_closed(kept)
        assert status_of(answer) == 200 and b"408 Request Timeout" in answer, answer[:600]
        # A kept-alive connection whose next head begins after its clock was set: the clock is
        # one timer per connection, set again for what is left when it fires; the head still
        # gets its whole second, counted from the last answer.
        with socket.create_connection(address) as kept:
            kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            time.sleep(0.6)
            kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /healthz HTTP/1.1\r\n")
            second_sent = time.monotonic()
            answer = answer_when_closed(kept)
            waited = time.monotonic() - second_sent
        assert answer.count(b"HTTP/1.1 200") == 2 and b"408 Request Timeout" in answer, answer[:600]
        assert waited >= 0.9, waited  # not cut short by the timer set for the first head
    finally:
        installation.close()
