"""What a client sends reaches the log only up to a bound, with a marker saying how much was cut.

Before, a 60 kB path was logged whole on its 404 (Django's "Not Found: ..."), by anyone, without
logging in: each request wrote 60 kB to the log. A real serving process: a 60 kB path, query
and Host header each leave at most the bound and the marker in its log."""
from __future__ import annotations

import re
import socket

import requests

from extproxy.logsafety import MAX_ARGUMENT_CHARS, MAX_MESSAGE_CHARS
from tests.processes import Installation

CONFIG = "backends:\n- name: builtin\n  policy: default\npolicies:\n  default:\n    rules:\n    - kind: resourceFit\n"
LONG = 60_000
# asctime, level and logger name before the message, the marker after it.
PREFIX_AND_MARKER = 200


def raw_request(port: int, head: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        return answer


def test_a_long_path_query_or_host_is_cut_in_the_log(tmp_path, installation_database):
    installation = Installation(tmp_path, CONFIG, installation_database, EXTPROXY_ALLOWED_HOSTS="127.0.0.1")
    try:
        installation.manage("migrate", "--noinput", "-v", "0")
        serving = installation.start_serving()
        path = "/" + "p" * LONG
        assert requests.get(installation.url + path, timeout=30).status_code == 404
        assert requests.get(installation.url + "/nowhere/?q=" + "q" * LONG, timeout=30).status_code == 404
        answer = raw_request(installation.port, b"GET /accounts/login/ HTTP/1.1\r\nHost: " + b"h" * LONG
                             + b"\r\nConnection: close\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 "), answer[:200]
        assert requests.get(installation.url + "/healthz", timeout=30).status_code == 200
        serving.log.flush()
        log = serving.log_path.read_text(errors="replace")  # whole: output() keeps only its end
    finally:
        installation.close()

    assert "Not Found" in log, log[-3000:]
    longest = max(len(line) for line in log.splitlines())
    assert longest <= MAX_MESSAGE_CHARS + PREFIX_AND_MARKER, f"a log line of {longest} characters"
    cut = [int(n) for n in re.findall(r"\[(\d+) characters cut\]", log)]
    assert cut and max(cut) >= LONG - MAX_ARGUMENT_CHARS, log[-3000:]
    assert "p" * (MAX_ARGUMENT_CHARS + 1) not in log
    assert "h" * (MAX_MESSAGE_CHARS + 1) not in log
