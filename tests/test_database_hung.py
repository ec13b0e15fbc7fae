"""A PostgreSQL server that is alive at the TCP level but never answers (its process stuck, a
pooler in front of it wedged) acknowledges every byte and every keepalive, so neither keepalives
nor the TCP user timeout fire. The recorder's batch has a deadline of its own
(EXTPROXY_DB_STATEMENT_DEADLINE): past it the batch fails like an outage (counted, kept in the
spool, the connection replaced, retried), the recorder goes on, and once the database answers
again every call is stored exactly once, a batch whose COMMIT the server took but never
answered included. A table lock held by another session is the server's half: the same
deadline is each statement's statement_timeout, so the server ends that wait itself. A
retention pass's statements carry the deadline too. PostgreSQL only: SQLite has no server to hang
(its own busy timeout bounds a lock wait)."""
from __future__ import annotations

import os
import threading
from urllib.parse import quote

import pytest

from extproxy.models import Call
from extproxy.recording.observe import read_recorder_counters, spool_status
from tests.conftest import RecorderProcess, wait_for_drain
from tests.tcprelay import COMMIT, FreezableRelay
from tests.test_database_keepalive import wait_for, write_calls
from tests.test_recorder import make_trace

pytestmark = [
    pytest.mark.skipif(not os.environ.get("DATABASE_URL", "").startswith("postgres"),
                       reason="PostgreSQL only (DATABASE_URL)"),
    pytest.mark.timeout(240),
]

DEADLINE = "3"  # seconds: far above what a batch of these calls takes, far below the test's waits


def recorder_through(relay: FreezableRelay, spool, env: dict[str, str] | None = None) -> RecorderProcess:
    from django.db import connection

    db = connection.settings_dict
    credentials = quote(db["USER"]) + (f":{quote(db['PASSWORD'])}" if db["PASSWORD"] else "")
    return RecorderProcess(spool, None, {
        "DATABASE_URL": f"postgresql://{credentials}@127.0.0.1:{relay.port}/{quote(db['NAME'])}",
        "EXTPROXY_DB_STATEMENT_DEADLINE": DEADLINE, "EXTPROXY_DB_CONNECT_TIMEOUT": "2", **(env or {})})


def relay_to_database() -> FreezableRelay:
    from django.db import connection

    db = connection.settings_dict
    return FreezableRelay(db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432))


def serving_on(spool) -> None:
    """This process serves as the serving process of `spool` would: its /metrics and pages read
    the recorder's figures there (the latest SpoolRecorder made is the one they report)."""
    from extproxy.config import RecordingConfig
    from extproxy.recording.handoff import SpoolRecorder
    from extproxy.recording.spool import SpoolSettings

    SpoolRecorder(RecordingConfig(), SpoolSettings(root=spool), writer_name="metrics")


def metrics_of(spool) -> dict[str, float]:
    """/metrics of a serving process on `spool` (the recorder's figures reach it through the spool)."""
    from django.test import Client

    serving_on(spool)
    values = {}
    for line in Client().get("/metrics").content.decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def counters_past(spool, key: str, value: int) -> dict:
    """The recorder's counters once `key` has gone past `value` (a counted outcome, not a time)."""
    return wait_for(lambda: (c := read_recorder_counters(spool)).get(key, 0) > value and c, 60)


def stored_once(traces) -> bool:
    ids = [trace.call_id for trace in traces]
    counts = {call_id: 0 for call_id in ids}
    for call_id in Call.objects.filter(call_id__in=ids).values_list("call_id", flat=True):
        counts[call_id] += 1
    return all(n == 1 for n in counts.values())


def test_a_recorder_facing_a_database_that_never_answers_fails_the_batch_goes_on_and_loses_nothing(
        transactional_db, tmp_path):
    relay = relay_to_database()
    spool = tmp_path / "spool"
    before = [make_trace() for _ in range(20)]
    write_calls(spool, *before)
    recorder = recorder_through(relay, spool)
    try:
        wait_for_drain(spool, recorder, timeout=60)  # through the relay while it answers
        relay.swallow()
        during = [make_trace() for _ in range(40)]
        for start in range(0, len(during), 10):  # mid-load: some batches come after the first failure
            write_calls(spool, *during[start : start + 10])
        counters = counters_past(spool, "write_errors", 0)
        assert relay.swallowed_bytes > 0  # it was the relay's silence, not a refusal
        assert counters["database"]["ok"] is False
        assert "EXTPROXY_DB_STATEMENT_DEADLINE" in counters["database"]["error"]
        # The recorder goes on: it tries again (each try a fresh connection, itself swallowed),
        # counts each failure, and its reports move on meanwhile.
        later = counters_past(spool, "write_errors", counters["write_errors"])
        assert later["updated_at"] > counters["updated_at"]
        assert recorder.process.poll() is None
        assert spool_status(spool).depth > 0  # the calls wait in the spool
        relay.relay_again()
        after = [make_trace() for _ in range(5)]
        write_calls(spool, *after)
        wait_for_drain(spool, recorder, timeout=120)
        assert stored_once(before + during + after)
        assert Call.objects.count() == len(before + during + after)
        assert read_recorder_counters(spool)["database"]["ok"] is True
    finally:
        recorder.stop()
        relay.close()


def test_a_batch_whose_commit_the_server_took_but_never_answered_is_not_stored_twice(transactional_db, tmp_path):
    relay = relay_to_database()
    spool = tmp_path / "spool"
    write_calls(spool, make_trace())
    recorder = recorder_through(relay, spool)
    try:
        wait_for_drain(spool, recorder, timeout=60)
        errors = read_recorder_counters(spool).get("write_errors", 0)
        relay.swallow_after(COMMIT)
        batch = [make_trace() for _ in range(10)]
        write_calls(spool, *batch)
        # The server commits the batch; the recorder never hears so and fails it at its deadline.
        counters_past(spool, "write_errors", errors)
        assert stored_once(batch)  # committed, while the recorder holds it as not stored
        relay.relay_again()
        wait_for_drain(spool, recorder, timeout=120)
        assert stored_once(batch)
        assert read_recorder_counters(spool)["database"]["ok"] is True
    finally:
        recorder.stop()
        relay.close()


def test_a_table_locked_by_another_session_fails_the_batch_at_its_deadline_and_loses_nothing(
        transactional_db, tmp_path):
    """A DBA's `LOCK TABLE ... IN ACCESS EXCLUSIVE MODE` or a long migration: the server answers
    everything else, so the recorder's write waits on the lock, for ever without a limit."""
    import psycopg
    from django.db import connection

    db = connection.settings_dict
    spool = tmp_path / "spool"
    write_calls(spool, make_trace())
    recorder = RecorderProcess(spool, None, {"EXTPROXY_DB_STATEMENT_DEADLINE": DEADLINE})
    locker = psycopg.connect(host=db["HOST"] or "127.0.0.1", port=int(db["PORT"] or 5432), user=db["USER"],
                             password=db["PASSWORD"] or None, dbname=db["NAME"])
    released = threading.Event()
    try:
        wait_for_drain(spool, recorder, timeout=60)
        errors = read_recorder_counters(spool).get("write_errors", 0)
        locker.execute(f"LOCK TABLE {Call._meta.db_table} IN ACCESS EXCLUSIVE MODE")  # held until commit
        batch = [make_trace() for _ in range(10)]
        write_calls(spool, *batch)
        counters = counters_past(spool, "write_errors", errors)
        assert counters["database"]["ok"] is False
        # The server ended the wait itself (its statement_timeout), rather than the client shutting
        # the connection and leaving a backend waiting on the lock.
        assert "statement timeout" in counters["database"]["error"]
        assert recorder.process.poll() is None
        counters_past(spool, "write_errors", counters["write_errors"])  # it retries, and fails again
        locker.commit()
        released.set()
        wait_for_drain(spool, recorder, timeout=120)
        assert stored_once(batch)
        assert read_recorder_counters(spool)["database"]["ok"] is True
    finally:
        if not released.is_set():
            locker.rollback()
        locker.close()
        recorder.stop()


# The first query of a retention pass (pruning.delete_calls: the oldest calls past the age limit).
RETENTION_QUERY = b'AS "pk", "extproxy_call"."started_at" AS "started_at" FROM "extproxy_call"'


def test_a_retention_pass_the_database_never_answers_does_not_stop_recording(transactional_db, tmp_path):
    """The recorder's loop runs retention passes too, on the same connection: one waiting for
    ever on its query stopped the draining just the same. Its statements carry the deadline."""
    relay = relay_to_database()
    relay.swallow_after(RETENTION_QUERY)  # the pass the recorder runs as it starts
    spool = tmp_path / "spool"
    calls = [make_trace() for _ in range(5)]
    write_calls(spool, *calls)
    recorder = recorder_through(relay, spool)
    try:
        wait_for_drain(spool, recorder, timeout=90)  # on a new connection, past the failed pass
        assert relay.swallowed_bytes > 0  # the pass's query was taken and its answer never came
        assert "retention pass failed" in recorder.output()
        assert stored_once(calls)
    finally:
        recorder.stop()
        relay.close()
