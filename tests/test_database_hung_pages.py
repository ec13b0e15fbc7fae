"""The serving process facing a PostgreSQL that takes every byte and never answers: each page or
API request gives up at EXTPROXY_DB_STATEMENT_DEADLINE and answers 503 saying the database is
unavailable, instead of waiting for ever on its statement (or on the pool's check of an idle
connection) and holding a pooled connection; once the database answers again, so do the pages.
A real serving process (uvicorn) whose database is reached through a relay that can swallow.
PostgreSQL only: SQLite has no server to hang."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from urllib.parse import quote

import pytest
import requests
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from tests.processes import Installation
from tests.tcprelay import FreezableRelay
from tests.test_database_hung import relay_to_database
from tests.test_recording_processes import config

pytestmark = [
    pytest.mark.skipif(not os.environ.get("DATABASE_URL", "").startswith("postgres"),
                       reason="PostgreSQL only (DATABASE_URL)"),
    pytest.mark.timeout(240),
]

DEADLINE = 2  # seconds
NO_ANSWER = 60  # the client's own patience: the request must be answered long before it


@dataclass
class Served:
    """A real serving process (uvicorn) whose database is reached through `relay`, and an API token."""

    installation: Installation
    relay: FreezableRelay
    token: str

    def get(self, path: str) -> requests.Response:
        return requests.get(self.installation.url + path, headers={"Authorization": f"Token {self.token}"},
                            timeout=NO_ANSWER)


@pytest.fixture
def served(transactional_db, tmp_path):
    from django.db import connection

    token = Token.objects.create(user=User.objects.create_superuser("root", "", "pw")).key
    relay = relay_to_database()
    db = connection.settings_dict
    credentials = quote(db["USER"]) + (f":{quote(db['PASSWORD'])}" if db["PASSWORD"] else "")
    url = f"postgresql://{credentials}@127.0.0.1:{relay.port}/{quote(db['NAME'])}"
    installation = Installation(tmp_path, config("http://127.0.0.1:9"), url, EXTPROXY_DB_STATEMENT_DEADLINE=str(DEADLINE),
                                EXTPROXY_DB_CONNECT_TIMEOUT="2", EXTPROXY_DB_POOL_SIZE="4")
    try:
        installation.start_serving()
        yield Served(installation, relay, token)
    finally:
        installation.close()
        relay.close()


def test_pages_and_the_api_answer_503_while_the_database_never_answers_and_recover_after(served):
    assert served.get("/api/calls/").status_code == 200  # through the relay

    served.relay.swallow()
    # More requests than the pool holds: none of them may keep a connection for ever.
    details = []
    for path in ["/api/calls/", "/api/calls/", "/api/audit/", "/api/calls/", "/api/calls/", "/api/calls/"]:
        answer = served.get(path)
        assert answer.status_code == 503, (path, answer.status_code, answer.text[:300])
        details.append(answer.json()["detail"])
    # A pooled connection's check given up, then a new connection the silent server never lets in.
    assert all("database is unavailable" in detail for detail in details), details
    assert served.relay.swallowed_bytes > 0  # the relay's silence, not a refusal

    served.relay.relay_again()
    until = time.monotonic() + NO_ANSWER
    while (status := served.get("/api/calls/").status_code) != 200:
        assert status == 503 and time.monotonic() < until, status
        time.sleep(0.5)
    assert "Traceback" not in served.installation.serving.output()  # an outage's one line, not a traceback a request


def test_a_page_waiting_on_a_lock_is_ended_by_the_server_and_leaves_no_backend_waiting(served):
    """The server's half: a table lock held by another session (a migration, `LOCK TABLE`) ends
    the page's statement at the deadline by the server's own statement_timeout, which still
    answers, and no server process is left waiting on the lock for the page that gave up.
    The relay does not swallow here: the server answers, the lock is what waits."""
    import psycopg
    from django.db import connection

    db = connection.settings_dict
    assert served.get("/api/calls/").status_code == 200
    with psycopg.connect(host=db["HOST"] or "127.0.0.1", port=int(db["PORT"] or 5432), user=db["USER"],
                         password=db["PASSWORD"] or None, dbname=db["NAME"]) as holder:
        holder.execute("LOCK TABLE extproxy_call IN ACCESS EXCLUSIVE MODE")
        answer = served.get("/api/calls/")
        assert answer.status_code == 503, answer.text[:300]
        assert "(OperationalError)" in answer.json()["detail"]  # the server's cancel, not the socket shut
        # The process's other loops (the latency roll-up) meet the lock too, and give up the same
        # way: while it is still held, nobody is left waiting on it.
        until = time.monotonic() + 10 * DEADLINE
        while holder.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()[0]:
            assert time.monotonic() < until, "a server process is still waiting on the lock"
            time.sleep(0.2)
        holder.rollback()
    assert served.get("/api/calls/").status_code == 200


def test_a_statement_whose_answer_never_comes_is_given_up_at_the_deadline(served):
    """The database goes silent mid-request, after the connection was checked and handed out:
    the statement in flight is given up at the deadline (its socket shut) and the request says
    so; the next request gets a connection that answers."""
    assert served.get("/api/audit/").status_code == 200
    served.relay.swallow_after(b"extproxy_auditevent")  # that query reaches the server; its answer never returns
    answer = served.get("/api/audit/")
    assert answer.status_code == 503, answer.text[:300]
    assert f"database is unavailable (no answer within {DEADLINE} s" in answer.json()["detail"], answer.text
    served.relay.relay_again()
    assert served.get("/api/calls/").status_code == 200
