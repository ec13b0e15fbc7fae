"""Shared test machinery: real backend servers on loopback and a real extproxy server.

Backends are stdlib HTTP servers in threads whose behaviour a test picks per verb. The proxy
is uvicorn serving extproxy's ASGI application in a thread, with the engine built from a
configuration file the test writes, and `manage.py recorder` as its own process draining the
spool, as in production. The test database is an SQLite file, so the server thread, the
recorder process and the test all see the same committed rows.
"""
from __future__ import annotations

import json
import os
import socket
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

import pytest

os.environ.setdefault("EXTPROXY_SKIP_CONFIG_CHECK", "1")
# Throttle counters of this run apart from any other run's on a shared Redis (EXTPROXY_REDIS_URL).
os.environ.setdefault("EXTPROXY_CACHE_PREFIX", f"extproxy-test-{os.getpid()}")
os.environ.setdefault(
    "EXTPROXY_TEST_SQLITE_PATH", str(Path(tempfile.gettempdir()) / f"extproxy-test-{os.getpid()}.sqlite3")
)


def _test_database_on_disk() -> None:
    """The recorder runs as its own process in end-to-end tests, so the test database must be
    a file both processes open (settings are read before this file, so set it here)."""
    from django.conf import settings

    database = settings.DATABASES["default"]
    if database["ENGINE"].endswith("sqlite3") and not database.get("TEST", {}).get("NAME"):
        database.setdefault("TEST", {})["NAME"] = os.environ["EXTPROXY_TEST_SQLITE_PATH"]


_test_database_on_disk()


def _quick_password_hashes() -> None:
    from django.conf import settings

    settings.PASSWORD_HASHERS = ["tests.hashers.QuickPBKDF2PasswordHasher", *settings.PASSWORD_HASHERS]


_quick_password_hashes()

FIXTURES = Path(__file__).resolve().parent / "fixtures"  # copied from the shared fixtures: a clone is self-contained


def fixture_bytes(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def fixture_json(name: str) -> Any:
    return json.loads(fixture_bytes(name))


def serve_in_thread(httpd: ThreadingHTTPServer) -> threading.Thread:
    """`httpd.serve_forever()` in a daemon thread, looking for `shutdown()` every 20 ms: at its
    default of 0.5 s, each server's shutdown at a test's end waited up to half a second."""
    thread = threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    return thread


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- backends ----------------------------------------------------------------------------

Behaviour = Callable[["BackendHandler", bytes], None]


class BackendHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a real extender would

    def log_message(self, *args):  # keep test output clean
        pass

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        self.server.received.append((self.path, body))  # type: ignore[attr-defined]
        verb = self.path.rsplit("/", 1)[-1]
        behaviour = self.server.behaviours.get(verb) or self.server.behaviours.get("*")  # type: ignore[attr-defined]
        behaviour(self, body)

    def answer(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def reply(status: int, body: bytes | str | Any, content_type: str = "application/json") -> Behaviour:
    if not isinstance(body, (bytes, str)):
        body = json.dumps(body)
    data = body.encode() if isinstance(body, str) else body

    def behave(handler: BackendHandler, _body: bytes) -> None:
        handler.answer(status, data, content_type)

    return behave


def slow(seconds: float, then: Behaviour) -> Behaviour:
    def behave(handler: BackendHandler, body: bytes) -> None:
        time.sleep(seconds)
        try:
            then(handler, body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    return behave


def hang_up(handler: BackendHandler, _body: bytes) -> None:
    handler.close_connection = True
    handler.connection.shutdown(socket.SHUT_RDWR)


def pass_all(handler: BackendHandler, body: bytes) -> None:
    """A well-behaved extender: every node passes, in the form the request used."""
    args = json.loads(body)
    if args.get("NodeNames") is not None:
        result = {"Nodes": None, "NodeNames": args["NodeNames"], "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": ""}
    else:
        result = {"Nodes": args["Nodes"], "NodeNames": None, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": ""}
    handler.answer(200, json.dumps(result).encode())


class BackendServer:
    def __init__(self, behaviours: dict[str, Behaviour]) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), BackendHandler)
        self.httpd.daemon_threads = True
        self.httpd.behaviours = behaviours  # type: ignore[attr-defined]
        self.httpd.received = []  # type: ignore[attr-defined]
        self.thread = serve_in_thread(self.httpd)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    @property
    def received(self) -> list[tuple[str, bytes]]:
        return self.httpd.received  # type: ignore[attr-defined]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def backend_server():
    servers: list[BackendServer] = []

    def start(behaviours: dict[str, Behaviour]) -> BackendServer:
        server = BackendServer(behaviours)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


# --- the proxy ---------------------------------------------------------------------------


class LoggedProcess:
    """A `manage.py` command run as production runs it, a process of its own, its output kept in
    a log file the test can read."""

    def _start(self, args: list[str], env: dict[str, str], log_path: Path) -> None:
        import subprocess
        import sys

        self.log = open(log_path, "ab")
        self.process = subprocess.Popen([sys.executable, "manage.py", *args], cwd=Path(__file__).resolve().parent.parent,
                                        env=env, stdout=self.log, stderr=subprocess.STDOUT)

    def output(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except Exception:
                self.process.kill()
                self.process.wait(5)
        self.log.close()


class RecorderProcess(LoggedProcess):
    """`manage.py recorder` as production runs it, draining `spool` into the test database."""

    def __init__(self, spool: Path, config_path: str | None, env: dict[str, str] | None = None,
                 args: tuple[str, ...] = ()) -> None:
        from django.db import connection

        self.spool = spool
        environment = dict(os.environ, EXTPROXY_SPOOL_DIR=str(spool), EXTPROXY_CONFIG=config_path or "")
        if connection.vendor == "sqlite":
            environment["EXTPROXY_SQLITE_PATH"] = str(connection.settings_dict["NAME"])
        elif connection.vendor == "postgresql" and os.environ.get("DATABASE_URL"):
            # DATABASE_URL names the production database; pytest-django made and switched to its
            # test twin, which is where the test reads what the recorder wrote.
            from urllib.parse import urlsplit, urlunsplit

            url = urlsplit(os.environ["DATABASE_URL"])
            environment["DATABASE_URL"] = urlunsplit(url._replace(path="/" + connection.settings_dict["NAME"]))
        environment.update(env or {})
        self._start(["recorder", "--nice", "0", *args], environment, spool.parent / f"recorder-{spool.name}.log")


def wait_for_drain(spool: Path, recorder_process: RecorderProcess | None, known: dict[str, int] | None = None,
                   timeout: float = 30) -> None:
    """Until the spool has nothing the database lacks (the recorder committed all of it)."""
    from extproxy.recording.observe import spool_status

    deadline = time.monotonic() + timeout
    while (status := spool_status(spool, known)).depth:
        if recorder_process is not None and recorder_process.process.poll() is not None:
            raise AssertionError(f"the recorder process ended:\n{recorder_process.output()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"recorder did not drain the spool in time ({status})")
        time.sleep(0.02)


class ProxyServer:
    """The serving side in a thread of this process (uvicorn, the engine, the spool writer),
    and the recorder as its own process, as in production."""

    def __init__(self, config_path: str | None, spool: Path) -> None:
        import uvicorn

        from extproxy.config import load_config
        from extproxy.engine import Engine, set_engine
        from extproxy.recording import SpoolRecorder
        from extproxy.recording.spool import SpoolSettings

        config = load_config(config_path)
        self.spool = spool
        self.engine = Engine(config, SpoolRecorder(config.recording, SpoolSettings(root=spool)))
        self._previous = set_engine(self.engine)
        self.recorder_process = RecorderProcess(spool, config_path)
        from extproxy.asgi import application

        self.port = free_port()
        self.server = uvicorn.Server(
            uvicorn.Config(application, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("extproxy test server did not start")
            time.sleep(0.01)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def recorder(self):
        return self.engine.recorder

    def flush(self) -> None:
        """Until every call answered so far is in the database."""
        assert self.recorder.flush(20), "calls did not reach the spool in time"
        writer = self.recorder.writer
        wait_for_drain(self.spool, self.recorder_process, {writer.name: writer.seq} if writer else None)

    def close(self) -> None:
        from extproxy.engine import set_engine

        self.server.should_exit = True
        self.thread.join(10)
        self.recorder.stop()
        self.recorder_process.stop()
        set_engine(self._previous)


@pytest.fixture
def write_config(tmp_path):
    def write(data: dict | str, name: str = "extproxy.yaml") -> str:
        path = tmp_path / name
        path.write_text(data if isinstance(data, str) else json.dumps(data))
        return str(path)

    return write


@pytest.fixture
def proxy(transactional_db, tmp_path):
    servers: list[ProxyServer] = []

    def start(config_path: str | None = None) -> ProxyServer:
        # The engine is process-wide (get_engine): one proxy configuration per test.
        assert not servers, "one proxy per test: a second one would replace the first one's engine"
        server = ProxyServer(config_path, tmp_path / "spool")
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


@pytest.fixture
def admin_client(transactional_db):
    """A requests session logged in by API token as a superuser."""
    import requests
    from django.contrib.auth.models import User
    from rest_framework.authtoken.models import Token

    user = User.objects.create_superuser("root", "", "pw")
    session = requests.Session()
    session.headers["Authorization"] = f"Token {Token.objects.create(user=user).key}"
    return session


def write_kubeconfig(path, port: int) -> str:
    """A kubeconfig for a local fake Kubernetes API on 127.0.0.1:<port>."""
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: test\n"
        f"clusters: [{{name: test, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: test, user: {token: test-token}}]\n"
        "contexts: [{name: test, context: {cluster: test, user: test}}]\n"
    )
    return str(path)


# --- PostgreSQL and Redis (tests/services.py) ------------------------------------------------


@pytest.fixture(scope="session")
def postgres_server():
    """A PostgreSQL server URL without a database: DATABASE_URL's server, or a throwaway one."""
    from tests.services import ThrowawayPostgres, server_part

    if os.environ.get("DATABASE_URL"):
        yield server_part(os.environ["DATABASE_URL"])
        return
    server = ThrowawayPostgres()
    yield server.url
    server.stop()


@pytest.fixture
def postgres_url(postgres_server):
    """A fresh, uniquely named database on that server, dropped afterwards."""
    import uuid

    import psycopg

    name = f"extproxy_test_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(f"{postgres_server}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield f"{postgres_server}/{name}"
    with psycopg.connect(f"{postgres_server}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def installation_database(request):
    """The database a test's own extproxy processes (tests/processes.py: Installation) use: on a
    PostgreSQL run (DATABASE_URL), a fresh one of their own; else None, their own SQLite file.
    DATABASE_URL's database is shared by the whole run: users and calls one test made were
    there for the next."""
    if not os.environ.get("DATABASE_URL"):
        return None
    return request.getfixturevalue("postgres_url")


@pytest.fixture(scope="session")
def redis_url():
    """EXTPROXY_REDIS_URL, or a throwaway redis-server for the session."""
    from tests.services import ThrowawayRedis

    if os.environ.get("EXTPROXY_REDIS_URL"):
        yield os.environ["EXTPROXY_REDIS_URL"]
        return
    server = ThrowawayRedis()
    yield server.url
    server.stop()


@pytest.fixture(autouse=True)
def _rate_limited_logs_forgotten():
    """A test that looks for a log line finds it whatever ran before: the rate-limited logs
    (extproxy/ratelog.py) are process-wide and would leave out a kind logged by an earlier test."""
    from extproxy.ratelog import RateLimitedLog

    RateLimitedLog.forget_all()


@pytest.fixture(scope="session", autouse=True)
def _no_sessions_left_at_teardown(django_db_setup, django_db_blocker):
    """On PostgreSQL, the test database can be dropped only when no session uses it; threads of
    the test servers may still hold one at the end. End those sessions before the drop."""
    yield
    from django.db import connection

    if connection.vendor != "postgresql":
        return
    from django.db.backends.base.creation import TEST_DATABASE_PREFIX

    if not connection.settings_dict["NAME"].startswith(TEST_DATABASE_PREFIX):
        return  # no test of this run used the database, so none was made (running one file alone)
    import gc

    gc.collect()
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                       "WHERE datname = current_database() AND pid <> pg_backend_pid()")
