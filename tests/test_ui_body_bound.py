"""The dashboard's port bounds what a client may send Django, before any login is checked.

Django's ASGI handler read every body to the end (to a temporary file past 2.5 MiB) before a
view, a login check or CSRF ran: an anonymous `POST /healthz` declaring 1 TiB was read for as
long as the client sent (500 MiB went to a deleted file in the temporary directory), and a body
sent a byte at a time held its connection for ever. A real serving process: a declared length
over the bound is refused unread, a chunked one cut at the bound, a slow one after
EXTPROXY_BODY_TIMEOUT; a log-in and a token log-in still work."""
from __future__ import annotations

import re
import socket

import requests

from tests.processes import Installation

CONFIG = "backends:\n- name: builtin\n  policy: default\npolicies:\n  default:\n    rules:\n    - kind: resourceFit\n"
LIMIT = 64 * 1024


def answer_of(sock: socket.socket) -> bytes:
    """What the server sends until it closes the connection (the status line first)."""
    sock.settimeout(60)
    received = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            return received
        if not chunk:
            return received
        received += chunk


def status_of(answer: bytes) -> int:
    match = re.match(rb"HTTP/1\.1 (\d{3})", answer)
    assert match, answer[:200]
    return int(match.group(1))


def test_bodies_to_the_dashboard_port_are_bounded_in_size_and_time(tmp_path, installation_database):
    installation = Installation(tmp_path, CONFIG, installation_database, EXTPROXY_MAX_UI_BODY_BYTES=str(LIMIT),
                                EXTPROXY_BODY_TIMEOUT="1")
    try:
        installation.manage("migrate", "--noinput", "-v", "0")
        installation.manage("bootstrap")
        installation.start_serving()
        address = ("127.0.0.1", installation.port)

        # A declared length over the bound: answered without the body being sent at all.
        with socket.create_connection(address) as sock:
            sock.sendall(b"POST /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1099511627776\r\n\r\n")
            answer = answer_of(sock)
        assert status_of(answer) == 413, answer[:300]
        assert b"EXTPROXY_MAX_UI_BODY_BYTES" in answer
        assert b"\r\nx-frame-options: DENY\r\n" in answer.lower().replace(b"deny", b"DENY")
        assert b"frame-ancestors 'none'" in answer

        # A chunked body (no length declared), anonymous, to the login form: cut at the bound.
        with socket.create_connection(address) as sock:
            sock.sendall(b"POST /accounts/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
                         b"Content-Type: application/x-www-form-urlencoded\r\n\r\n")
            chunk = b"a" * 4096
            try:
                for _ in range(4 * LIMIT // len(chunk)):
                    sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sock.sendall(b"0\r\n\r\n")
            except (ConnectionResetError, BrokenPipeError):  # the server stopped reading: the answer is in
                pass
            answer = answer_of(sock)
        assert status_of(answer) == 413, answer[:300]

        # A body that never arrives in full: 408 once EXTPROXY_BODY_TIMEOUT has passed.
        with socket.create_connection(address) as sock:
            sock.sendall(b"POST /api/auth/token/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 100\r\n\r\n{\"username\":")
            answer = answer_of(sock)
        assert status_of(answer) == 408, answer[:300]

        # What the dashboard and API are for still fits.
        form = requests.get(installation.url + "/accounts/login/", timeout=30)
        cookies = dict(form.cookies)
        login = requests.post(installation.url + "/accounts/login/", timeout=30, allow_redirects=False, cookies=cookies,
                              data={"username": "admin", "password": "s3cret", "csrfmiddlewaretoken": cookies["csrftoken"]})
        cookies.update(login.cookies)
        assert login.status_code == 302 and login.headers["Location"] == "/", login.text[:300]
        assert requests.get(installation.url + "/backends/", cookies=cookies, timeout=30,
                            allow_redirects=False).status_code == 200
        token = requests.post(installation.url + "/api/auth/token/", json={"username": "admin", "password": "s3cret"},
                              timeout=30)
        assert token.status_code == 200 and token.json()["token"]
    finally:
        installation.close()
