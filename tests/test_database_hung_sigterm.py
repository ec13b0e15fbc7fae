"""A SIGTERM while the recorder's store waits on a database that never answers: the recorder
keeps its stop window (`--stop-drain-seconds`, inside the pod's grace period) rather than the
statement deadline (EXTPROXY_DB_STATEMENT_DEADLINE, a minute by default), which would have let
kubelet's SIGKILL end it. The stop event ends the wait in progress: the connection is shut, the
batch stays in the spool, and the next recorder stores each call exactly once. PostgreSQL only,
as tests/test_database_hung.py."""
from __future__ import annotations

import os
import signal
from urllib.parse import quote

import pytest

from extproxy.models import Call
from extproxy.recording.observe import spool_status
from tests.conftest import RecorderProcess, wait_for_drain
from tests.tcprelay import FreezableRelay
from tests.test_database_hung import relay_to_database, stored_once
from tests.test_database_keepalive import wait_for, write_calls
from tests.test_recorder import make_trace

pytestmark = [
    pytest.mark.skipif(not os.environ.get("DATABASE_URL", "").startswith("postgres"),
                       reason="PostgreSQL only (DATABASE_URL)"),
    pytest.mark.timeout(300),
]

LONG_DEADLINE = "300"  # seconds: longer than this test may take, so it cannot be what ends the wait
# A statement in the middle of a batch's store (UnansweredCommits.sort, unanswered.py), after its first ones.
STORE_QUERY = b'SELECT "extproxy_call"."call_id" AS "call_id", "extproxy_call"."id" AS "id" FROM "extproxy_call" WHERE'


def recorder_through(relay: FreezableRelay, spool) -> RecorderProcess:
    from django.db import connection

    db = connection.settings_dict
    credentials = quote(db["USER"]) + (f":{quote(db['PASSWORD'])}" if db["PASSWORD"] else "")
    return RecorderProcess(spool, None, {
        "DATABASE_URL": f"postgresql://{credentials}@127.0.0.1:{relay.port}/{quote(db['NAME'])}",
        "EXTPROXY_DB_STATEMENT_DEADLINE": LONG_DEADLINE, "EXTPROXY_DB_CONNECT_TIMEOUT": "2"},
        args=("--stop-drain-seconds", "2"))


def test_a_sigterm_during_a_store_the_database_never_answers_ends_the_recorder_in_its_stop_window(
        transactional_db, tmp_path):
    relay = relay_to_database()
    spool = tmp_path / "spool"
    before = [make_trace() for _ in range(5)]
    write_calls(spool, *before)
    recorder = recorder_through(relay, spool)
    again = None
    try:
        wait_for_drain(spool, recorder, timeout=60)
        relay.swallow_after(STORE_QUERY)
        batch = [make_trace() for _ in range(10)]
        write_calls(spool, *batch)
        wait_for(lambda: relay.swallowed_bytes > 0, 60)  # the store's query was taken, its answer never passed on
        assert recorder.process.poll() is None
        recorder.process.send_signal(signal.SIGTERM)
        # Without the stop event reaching the wait, it ends only at the 300 s deadline.
        assert recorder.process.wait(150) == 0
        output = recorder.output()
        assert "recorder: stopped" in output
        assert "no answer from the database within" not in output  # the deadline did not fire
        assert "EXTPROXY_DB_STATEMENT_DEADLINE" not in output
        assert spool_status(spool).depth > 0  # the batch waits in the spool
        relay.relay_again()
        again = RecorderProcess(spool, None)
        wait_for_drain(spool, again, timeout=60)
        assert stored_once(before + batch)
        assert Call.objects.count() == len(before + batch)
    finally:
        recorder.stop()
        if again is not None:
            again.stop()
        relay.close()
