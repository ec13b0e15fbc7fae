"""Kubelet's probes have a port of their own (EXTPROXY_PROBE_PORT, extproxy/probe_port.py).

Before: the probes were served on the main port, which answers 503 to every connection past
EXTPROXY_MAX_CONNECTIONS. Whoever held that many idle connections there failed liveness three
times in a row, and kubelet restarted a process that was serving every connection it held (and
readiness took it out of both Services). A real serving process, with small bounds on every
port: both other ports filled to their bounds with idle connections, the probe port still
answers /healthz and /readyz as the main port answers them; its own bound, head size and time,
and anything but GET /healthz or /readyz, are refused with the reason and counted.
"""
from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from pathlib import Path

import pytest
import requests
import yaml

from tests.conftest import free_port
from tests.processes import Installation
from tests.test_connection_bound import filter_request, flood, refusals

CONFIG = "backends:\n- name: builtin\n  policy: default\npolicies:\n  default:\n    rules:\n    - kind: resourceFit\n"
BOUND = 20  # the main port's and the extender listener's
PROBE_BOUND = 3
DEPLOYMENT = Path(__file__).resolve().parent.parent / "deploy" / "deployment.yaml"


@pytest.fixture
def installation(tmp_path, installation_database):
    installation = Installation(
        tmp_path, CONFIG, installation_database, EXTPROXY_EXTENDER_PORT=str(free_port()),
        EXTPROXY_PROBE_PORT=str(free_port()), EXTPROXY_MAX_CONNECTIONS=str(BOUND),
        EXTPROXY_EXTENDER_MAX_CONNECTIONS=str(BOUND), EXTPROXY_PROBE_MAX_CONNECTIONS=str(PROBE_BOUND),
        # The flood's idle connections must stay open for the whole test.
        EXTPROXY_BODY_TIMEOUT="600",
    )
    try:
        installation.manage("migrate", "--noinput", "-v", "0")
        installation.start_serving()
        yield installation
    finally:
        installation.close()


def ports(installation: Installation) -> tuple[int, int, int]:
    """(main, extender, probe)"""
    env = installation.env
    return installation.port, int(env["EXTPROXY_EXTENDER_PORT"]), int(env["EXTPROXY_PROBE_PORT"])


def exchange(port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """One request on a new connection, read until the server closes it: (status, headers, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        if request:
            sock.sendall(request)
        return parse(read_to_end(sock))


def read_to_end(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def parse(data: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0].startswith("HTTP/1.1 "), data[:300]
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
    if "content-length" in headers:
        assert len(body) == int(headers["content-length"]), data[:300]
    return int(lines[0].split(" ", 2)[1]), headers, body


def probe(port: int, path: str) -> tuple[int, dict[str, str], bytes]:
    # As kubelet asks: a new connection per probe, keep-alive off, the pod's address as Host.
    return exchange(port, f"GET {path} HTTP/1.1\r\nHost: 10.244.1.7:8081\r\n"
                          "Accept: */*\r\nConnection: close\r\n\r\n".encode())


def rejected(installation: Installation) -> dict[str, float]:
    text = requests.get(f"{installation.url}/metrics", timeout=30).text
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r'^extproxy_rejected_requests_total\{reason="([^"]+)"\} (\S+)$', text, re.M)}


def comparable(readyz: bytes) -> dict:
    """/readyz's answer without the ages, which move between two probes."""
    answer = json.loads(readyz)
    for key in ("oldest_undrained_age_seconds", "recorder_heartbeat_age_seconds"):
        answer.get("recording", {}).pop(key, None)
    return answer


def test_probes_are_answered_while_both_other_ports_are_full(installation):
    main, extender, probe_port = ports(installation)
    held: list[socket.socket] = []
    try:
        for port in (main, extender):
            extra = flood(port, BOUND + 5)
            held += extra
            answers, _ = refusals(extra, 5)  # the bound is reached: the five past it are refused
            assert len(answers) == 5 and all(a.startswith(b"HTTP/1.1 503 ") for a in answers), answers
        # A new connection to either is refused as it is accepted (read before a request is sent:
        # one sent after the refusal resets the connection, which fails a probe all the same).
        # The main port's /healthz was kubelet's liveness probe: this is what restarted the pod.
        status, _, body = exchange(main, b"")
        assert status == 503 and b"EXTPROXY_MAX_CONNECTIONS" in body, body
        status, _, body = exchange(extender, b"")
        assert status == 503 and b"EXTPROXY_EXTENDER_MAX_CONNECTIONS" in body, body
        for _ in range(5):  # kubelet's three failures in a row would restart it: none comes
            assert probe(probe_port, "/healthz")[:3:2] == (200, b"ok\n")
            status, headers, body = probe(probe_port, "/readyz")
            assert status == 200 and headers["content-type"] == "application/json", body
            assert json.loads(body)["ready"] is True
    finally:
        for sock in held:
            sock.close()


def test_probe_answers_are_the_main_ports(installation):
    main, extender, probe_port = ports(installation)
    # Calls waiting in the spool (no recorder runs): /readyz reports them, on either port.
    closing = filter_request().replace(b"\r\n", b"\r\nConnection: close\r\n", 1)
    for _ in range(3):
        assert exchange(extender, closing)[0] == 200
    installation.wait_spooled()
    for path in ("/healthz", "/readyz"):
        on_main = requests.get(f"{installation.url}{path}", headers={"Host": "localhost"}, timeout=30)
        status, headers, body = probe(probe_port, path)
        assert (status, headers["content-type"]) == (on_main.status_code, on_main.headers["content-type"])
        if path == "/healthz":
            assert body == on_main.content == b"ok\n"
        else:
            assert comparable(body) == comparable(on_main.content)
            assert json.loads(body)["recording"]["spool_depth"] == 3


def test_the_probe_port_holds_its_own_bound_and_times_out_idle_connections(installation):
    _, _, probe_port = ports(installation)
    before = rejected(installation)
    idle = flood(probe_port, PROBE_BOUND + 1)
    try:
        answers, still_open = refusals(idle, 1)
        assert len(answers) == 1 and len(still_open) == PROBE_BOUND
        status, headers, body = parse(answers[0])
        assert status == 503 and b"EXTPROXY_PROBE_MAX_CONNECTIONS" in body, body
        # Those that send nothing are answered 408 and closed after the port's short head
        # timeout (not EXTPROXY_BODY_TIMEOUT's 600 s), so the bound is free again.
        for sock in still_open:
            status, _, body = parse(read_to_end(sock))
            assert status == 408 and b"within" in body, body
    finally:
        for sock in idle:
            sock.close()
    assert probe(probe_port, "/healthz")[0] == 200
    after = rejected(installation)
    assert after.get("probe-connections", 0) - before.get("probe-connections", 0) == 1
    assert after.get("probe-timeout", 0) - before.get("probe-timeout", 0) == PROBE_BOUND


BAD = [
    # (request, status, text in the reason, counted as)
    (b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", 405, b"GET", "probe-method"),
    (b"HEAD /readyz HTTP/1.1\r\nHost: x\r\n\r\n", 405, b"GET", "probe-method"),
    (b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 404, b"/healthz", "probe-path"),
    (b"GET /extender/builtin/filter HTTP/1.1\r\nHost: x\r\n\r\n", 404, b"/healthz", "probe-path"),
    (b"GET /healthz/ HTTP/1.1\r\nHost: x\r\n\r\n", 404, b"/healthz", "probe-path"),
    (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 5000 + b"\r\n\r\n", 431, b"bytes", "probe-head"),
    (b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 431, b"bytes", "probe-head"),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 40, 400, b"HTTP", "probe-bad-http"),
]


def test_the_probe_port_refuses_anything_else_with_the_reason(installation):
    _, _, probe_port = ports(installation)
    before = rejected(installation)
    for request, expected, text, _ in BAD:
        status, headers, body = exchange(probe_port, request)
        assert (status, headers.get("connection")) == (expected, "close"), (request[:60], body)
        assert text in body and headers["content-type"].startswith("text/plain"), (request[:60], body)
        if expected == 405:
            assert headers["allow"] == "GET"
    after = rejected(installation)
    for reason in {counted for *_, counted in BAD}:
        expected_count = sum(1 for *_, counted in BAD if counted == reason)
        assert after.get(reason, 0) - before.get(reason, 0) == expected_count, (reason, before, after)
    # The path a client sent is told back as text, never as markup.
    status, headers, body = exchange(probe_port, b"GET /<script>x</script> HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 404 and headers["x-content-type-options"] == "nosniff"


def container(deployment: dict, name: str) -> dict:
    return next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == name)


def test_the_deployment_probes_the_probe_port_and_admits_nobody_else_to_it():
    documents = list(yaml.safe_load_all(DEPLOYMENT.read_text()))
    deployment = next(d for d in documents if d and d["kind"] == "Deployment")
    server = container(deployment, "extproxy")
    env = {e["name"]: e.get("value") for e in server["env"]}
    port = int(env["EXTPROXY_PROBE_PORT"])
    assert env["EXTPROXY_PROBE_HOST"] == "0.0.0.0"  # kubelet reaches the pod's own address
    named = {p["name"]: p["containerPort"] for p in server["ports"]}
    for kind, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = server[kind]["httpGet"]
        assert get["path"] == path and named[get["port"]] == port, server[kind]
    assert port not in (int(env["EXTPROXY_EXTENDER_PORT"]), named["http"])
    policy = next(d for d in documents if d and d["kind"] == "NetworkPolicy")
    admitted = {p["port"] for rule in policy["spec"]["ingress"] for p in rule.get("ports", [])}
    assert port not in admitted and all(rule.get("ports") for rule in policy["spec"]["ingress"])


class ServedOnALoop:
    """The probe listener on an event loop of the test's own, in a thread: the loop can be held."""

    def __enter__(self) -> ServedOnALoop:
        from extproxy.probe_port import start_probe_listener

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.listener = asyncio.run_coroutine_threadsafe(start_probe_listener("127.0.0.1", 0, 8), self.loop).result(30)
        return self

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self.listener.close(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()


def test_a_stuck_loop_fails_liveness():
    with ServedOnALoop() as served:
        released = threading.Event()
        served.loop.call_soon_threadsafe(released.wait, 60)  # the loop is stuck until released
        with socket.create_connection(("127.0.0.1", served.listener.port), timeout=30) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            sock.settimeout(1)  # kubelet's default timeoutSeconds
            with pytest.raises(TimeoutError):
                sock.recv(65536)
            released.set()
            sock.settimeout(30)
            assert parse(read_to_end(sock))[:3:2] == (200, b"ok\n")  # answered once the loop runs


def test_a_readiness_check_that_hangs_is_answered_not_ready_and_frees_its_thread(monkeypatch):
    from django.http import HttpResponse

    from extproxy import probe_port

    released = threading.Event()

    def hanging() -> HttpResponse:
        released.wait(60)  # a disk that does not answer
        return HttpResponse("late\n", content_type="text/plain")

    monkeypatch.setitem(probe_port.ANSWERS, b"/readyz", (hanging, True))
    with ServedOnALoop() as served:
        status, _, body = probe(served.listener.port, "/readyz")
        assert status == 503 and b"did not finish within" in body, body
        assert probe(served.listener.port, "/healthz")[0] == 200  # liveness does not wait on it
        released.set()
        assert probe(served.listener.port, "/readyz")[:3:2] == (200, b"late\n")
