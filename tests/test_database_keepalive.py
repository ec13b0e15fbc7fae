"""A PostgreSQL server that stops answering without closing (a dead host, a dropped network) is
noticed: every connection extproxy opens carries keepalives and a TCP user timeout, read back
from the socket itself, and a recorder caught writing to a server gone silent fails the write
within the user timeout, keeps the call in the spool and counts the failure, then stores it once
the server answers again. PostgreSQL only: SQLite has no connection to lose."""
from __future__ import annotations

import base64
import ctypes
import json
import os
import socket
import time
from urllib.parse import quote

import pytest

from extproxy.models import Call
from extproxy.recording.observe import read_recorder_counters, spool_status
from extproxy.recording.spool import SpoolSettings
from extproxy.recording.spool_writer import SpoolWriter
from extproxy.recording.trace import encode_trace
from tests.conftest import RecorderProcess, fixture_bytes, wait_for_drain
from tests.tcprelay import FreezableRelay
from tests.test_recorder import make_trace

pytestmark = [
    pytest.mark.skipif(not os.environ.get("DATABASE_URL", "").startswith("postgres"),
                       reason="PostgreSQL only (DATABASE_URL)"),
    pytest.mark.timeout(180),
]

# What settings.py asks libpq for, as the kernel reports it (seconds; the user timeout in ms).
EXPECTED = {"keepalive": 1, "idle": 30, "interval": 10, "count": 3, "user_timeout": 60_000}
SYS_PIDFD_GETFD = 438  # the same number on every Linux architecture


def tcp_options(sock: socket.socket) -> dict[str, int]:
    tcp = socket.IPPROTO_TCP
    return {"keepalive": sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
            "idle": sock.getsockopt(tcp, socket.TCP_KEEPIDLE), "interval": sock.getsockopt(tcp, socket.TCP_KEEPINTVL),
            "count": sock.getsockopt(tcp, socket.TCP_KEEPCNT), "user_timeout": sock.getsockopt(tcp, socket.TCP_USER_TIMEOUT)}


def options_of(wrapper) -> dict[str, int]:
    """The socket options of a Django connection's socket (a duplicate of its descriptor)."""
    wrapper.ensure_connection()
    sock = socket.socket(fileno=os.dup(wrapper.connection.fileno()))
    try:
        if sock.family == socket.AF_UNIX:
            pytest.skip("DATABASE_URL names a Unix socket: no TCP options to carry")
        return tcp_options(sock)
    finally:
        sock.close()


def test_the_connection_django_opens_carries_keepalives_and_the_user_timeout(db):
    from django.db import connection

    assert options_of(connection) == EXPECTED


def test_a_pooled_connection_of_the_serving_process_carries_them_too(db, monkeypatch):
    """The serving process takes its connections from a pool (settings._pool_options): the
    pool opens them, not Django."""
    import extproxy
    from django.db import connection
    from django.db.utils import ConnectionHandler

    from extproxy import settings as project_settings

    monkeypatch.setattr(extproxy, "SERVING_PROCESS", True, raising=False)
    serving = project_settings._database_from_url(os.environ["DATABASE_URL"])
    assert "pool" in serving["OPTIONS"]
    serving["NAME"] = connection.settings_dict["NAME"]  # the test database
    pooled = ConnectionHandler({"default": serving})["default"]
    try:
        assert options_of(pooled) == EXPECTED
    finally:
        pooled.close()
        pooled.close_pool()


def recorder_sockets(pid: int, port: int) -> list[socket.socket]:
    """The recorder process's own sockets to the database, taken over with pidfd_getfd."""
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    found = []
    try:
        for name in os.listdir(f"/proc/{pid}/fd"):
            try:
                if not os.readlink(f"/proc/{pid}/fd/{name}").startswith("socket:"):
                    continue
            except FileNotFoundError:
                continue
            fd = libc.syscall(SYS_PIDFD_GETFD, pidfd, int(name), 0)
            if fd < 0:
                pytest.skip(f"pidfd_getfd refused: {os.strerror(ctypes.get_errno())}")
            sock = socket.socket(fileno=fd)
            if sock.family in (socket.AF_INET, socket.AF_INET6) and sock.type == socket.SOCK_STREAM \
                    and sock.getpeername()[1] == port:
                found.append(sock)
            else:
                sock.close()
    finally:
        os.close(pidfd)
    return found


def test_the_recorder_process_connections_carry_them(transactional_db, tmp_path):
    from django.db import connection

    port = int(connection.settings_dict["PORT"] or 5432)
    spool = tmp_path / "spool"
    write_calls(spool, make_trace())
    recorder = RecorderProcess(spool, None)
    try:
        wait_for_drain(spool, recorder, timeout=60)  # it has connected, and written through the connection
        sockets = recorder_sockets(recorder.process.pid, port)
        assert sockets, "the recorder holds no connection to the database"
        for sock in sockets:
            assert tcp_options(sock) == EXPECTED
            sock.close()
    finally:
        recorder.stop()


def write_calls(spool, *traces) -> None:
    writer = SpoolWriter(SpoolSettings(root=spool, fsync="never"))
    writer.append([encode_trace(trace) for trace in traces])
    writer.close()


def large_call():
    """A call whose request carries a megabyte that does not compress: its COPY is far larger
    than the relay's window, so the recorder is caught with data still to send."""
    request = json.loads(fixture_bytes("filter-request.nodecache-true.json"))
    request["Pod"]["metadata"]["annotations"]["example.com/blob"] = base64.b64encode(os.urandom(768 << 10)).decode()
    return make_trace(body=json.dumps(request).encode())


def wait_for(what, timeout: float):
    deadline = time.monotonic() + timeout
    while not (found := what()):
        assert time.monotonic() < deadline, f"not within {timeout} s"
        time.sleep(0.1)
    return found


def test_a_recorder_writing_to_a_server_gone_silent_fails_within_the_user_timeout_and_loses_nothing(
        transactional_db, tmp_path):
    from django.db import connection

    db = connection.settings_dict
    relay = FreezableRelay(db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432))
    credentials = quote(db["USER"]) + (f":{quote(db['PASSWORD'])}" if db["PASSWORD"] else "")
    spool = tmp_path / "spool"
    write_calls(spool, make_trace())
    recorder = RecorderProcess(spool, None, {
        "DATABASE_URL": f"postgresql://{credentials}@127.0.0.1:{relay.port}/{quote(db['NAME'])}",
        "EXTPROXY_DB_TCP_USER_TIMEOUT": "3", "EXTPROXY_DB_CONNECT_TIMEOUT": "2"})
    try:
        wait_for_drain(spool, recorder, timeout=60)  # through the relay while it answers
        relay.freeze_after(64 << 10)
        big = large_call()
        write_calls(spool, big)
        wait_for(lambda: relay.frozen, 30)
        # Frozen mid-COPY: without a user timeout the write waits on a shut window for ever;
        # with 3 s it fails, the connection is dropped, and the next tries fail to connect.
        counters = wait_for(lambda: (c := read_recorder_counters(spool)).get("write_errors") and c, 30)
        assert counters["database"]["ok"] is False
        assert "timed out" in counters["database"]["error"].lower() or "timeout" in counters["database"]["error"].lower()
        assert spool_status(spool).depth == 1  # the call waits in the spool
        assert not Call.objects.filter(call_id=big.call_id).exists()
        relay.thaw()
        wait_for_drain(spool, recorder, timeout=60)
        assert Call.objects.filter(call_id=big.call_id).count() == 1
        assert read_recorder_counters(spool)["database"]["ok"] is True
    finally:
        recorder.stop()
        relay.close()
