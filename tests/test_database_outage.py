"""What the dashboard and the API answer while the database is away, with the real serving and
recorder processes on a throwaway PostgreSQL server: a 503 that says so (JSON for the API, a
page for the dashboard), one log line rather than a traceback a request, the extender served
meanwhile, and every page working again as soon as the database is back."""
from __future__ import annotations

import asyncio
import logging
import sys
import time

import psycopg
import pytest
import requests
from django.db import IntegrityError, InterfaceError, OperationalError

from extproxy.database_down import OutageLogFilter, server_error

from tests.conftest import fixture_bytes, pass_all
from tests.processes import Postgres
from tests.test_log_safety import websocket
from tests.test_replay import NAMES
from tests.test_replay_recovery import installation_with_admin

pytestmark = pytest.mark.timeout(300)

OUTAGE_SECONDS = 10


@pytest.fixture
def postgres():
    cluster = Postgres()
    yield cluster
    cluster.close()


def logged_in(url: str) -> requests.Session:
    browser = requests.Session()
    browser.get(f"{url}/accounts/login/", timeout=10)
    answer = browser.post(f"{url}/accounts/login/", timeout=10, allow_redirects=False, data={
        "username": "admin", "password": "s3cret", "csrfmiddlewaretoken": browser.cookies["csrftoken"]})
    assert answer.status_code == 302, answer.text
    return browser


async def closed_with_protocol(url: str, protocols: tuple[str, ...]) -> tuple[str | None, int | None]:
    """(the subprotocol the server chose, the close code) of one connection to /ws/live/."""
    import aiohttp

    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(url.replace("http", "ws") + "/ws/live/", protocols=protocols) as ws:
            message = await ws.receive(timeout=10)
            assert message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED), message
            return ws.protocol, ws.close_code


def wait_accepting(url: str, timeout: float = 60) -> None:
    """Until the server takes connections (after a crash it first replays its WAL)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            psycopg.connect(url, connect_timeout=2).close()
            return
        except psycopg.OperationalError:
            assert time.monotonic() < deadline
            time.sleep(0.1)


def test_pages_and_the_api_say_the_database_is_away_and_work_again_when_it_is_back(tmp_path, backend_server, postgres):
    backend = backend_server({"filter": pass_all})
    inst, api = installation_with_admin(tmp_path, backend.url, postgres.url, EXTPROXY_DB_POOL_TIMEOUT="1")
    try:
        inst.start_recorder()
        inst.start_serving()
        browser = logged_in(inst.url)
        assert browser.get(f"{inst.url}/", timeout=10).status_code == 200
        assert api.get(f"{inst.url}/api/calls/", timeout=10).status_code == 200
        postgres.stop()
        down_at = time.monotonic()
        for _ in range(3):
            answer = api.get(f"{inst.url}/api/calls/", timeout=10)
            assert answer.status_code == 503, answer.text
            assert answer.headers["Content-Type"] == "application/json" and answer.headers["Retry-After"]
            assert "database is unavailable" in answer.json()["detail"]
            page = browser.get(f"{inst.url}/", timeout=10)
            assert page.status_code == 503 and page.headers["Content-Type"].startswith("text/html")
            assert "database is unavailable" in page.text and "spool" in page.text
            # An open page's warnings, refreshed by htmx (which swaps no 5xx): they say so too.
            status = browser.get(f"{inst.url}/feed/record-status/", headers={"HX-Request": "true"}, timeout=10)
            assert status.status_code == 200 and "database is unavailable" in status.text, status.text
            assert "cannot be read or refreshed" in status.text and "spool" in status.text
        token = api.headers["Authorization"].split()[-1]
        for _ in range(3):  # the live feed: told to come back later, each time (an open dashboard reconnects)
            assert asyncio.run(websocket(inst.url, "?token=" + token)) == (None, 1013)
        # As a browser offers it: the protocol it offered is chosen, or the browser fails the handshake.
        assert asyncio.run(closed_with_protocol(inst.url, ("extproxy", "extproxy.token." + token))) == ("extproxy", 1013)
        served = requests.post(f"{inst.url}/extender/gpu/filter", data=fixture_bytes(NAMES), timeout=10)
        assert served.status_code == 200  # the scheduler is served all the while
        # Long enough for the pool's retries to back off past the outage's end (1, 2, 4, 8 s):
        # the pages must not wait for the next one.
        time.sleep(max(0.0, down_at + OUTAGE_SECONDS - time.monotonic()))
        outage_log = inst.serving.output()
        postgres.start()
        wait_accepting(postgres.url)
        # The pool's connections died with the server: none may be handed to a request.
        assert browser.get(f"{inst.url}/", timeout=10).status_code == 200
        assert api.get(f"{inst.url}/api/calls/", timeout=10).status_code == 200
        assert asyncio.run(websocket(inst.url, "?token=" + token)) == ('{"type": "reset"}', None)
        inst.wait_drained()
        assert len(api.get(f"{inst.url}/api/calls/", timeout=10).json()["results"]) == 1
        # A short outage that no request sees: the pooled connections that sat through it are dead,
        # and none may be handed to the first request after it.
        postgres.stop()
        postgres.start()
        wait_accepting(postgres.url)
        assert api.get(f"{inst.url}/api/calls/", timeout=10).status_code == 200
    finally:
        inst.close()
    assert "Traceback" not in outage_log, outage_log
    assert outage_log.count("requests answered 503: database unavailable") == 1, outage_log
    assert outage_log.count("live feed connections closed: database unavailable") == 1, outage_log
    assert outage_log.count("connection pool: error connecting") == 1, outage_log  # each try, once a minute


@pytest.mark.parametrize("exc, status", [
    (OperationalError("database is locked"), 503),  # SQLite past its busy timeout
    (InterfaceError("connection already closed"), 503),
    (IntegrityError("duplicate key value"), 500),  # a bug, not an outage: Django's own 500 and traceback
    (RuntimeError("boom"), 500),
])
def test_only_an_outage_answers_503_and_leaves_the_log(rf, exc, status):
    try:
        raise exc
    except Exception:
        response = server_error(rf.get("/api/calls/"))
        record = logging.LogRecord("django.request", logging.ERROR, __file__, 1, "Internal Server Error", (),
                                   sys.exc_info())
    assert response.status_code == status
    assert OutageLogFilter().filter(record) is (status != 503)


@pytest.mark.timeout(60)  # libpq's own default would wait 130 s
def test_a_database_host_that_does_not_answer_fails_a_connection_in_the_configured_time(monkeypatch):
    """A listener that takes the connection and never speaks, as a host behind a partition
    whose port still completes the handshake would: the connect gives up, it does not hang."""
    import socket

    from extproxy.settings import _database_from_url

    monkeypatch.setenv("EXTPROXY_DB_CONNECT_TIMEOUT", "2")
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # the kernel completes the handshake; nothing ever answers
        port = silent.getsockname()[1]
        database = _database_from_url(f"postgresql://postgres@127.0.0.1:{port}/extproxy")
        options = {k: v for k, v in database["OPTIONS"].items() if k != "pool"}
        with pytest.raises(psycopg.OperationalError, match="timeout"):
            psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname="extproxy", **options)
