"""A batch that truly takes longer than EXTPROXY_DB_STATEMENT_DEADLINE to store, while the
database answers everything else: before, it was retried whole for ever (same batch, same
outcome) while the spool filled behind it. Now it is stored in halves, down to a single call;
a single call that alone takes longer stays in the spool (never dropped), is counted under
`over-deadline` and raises the alarm `over_deadline` (extproxy_recorder_over_deadline) until it
is stored. The store is made slow in the database itself: a trigger that sleeps per row inserted
into the call table. A real recorder process, a real PostgreSQL; PostgreSQL only (SQLite has no
deadline, deadline.py)."""
from __future__ import annotations

import os

import pytest
from django.db import connection

from extproxy.models import Call
from extproxy.recording.observe import read_recorder_counters, spool_status
from tests.conftest import RecorderProcess, wait_for_drain
from tests.test_database_hung import counters_past, metrics_of, stored_once
from tests.test_database_keepalive import wait_for, write_calls
from tests.test_recorder import make_trace

pytestmark = [
    pytest.mark.skipif(not os.environ.get("DATABASE_URL", "").startswith("postgres"),
                       reason="PostgreSQL only (DATABASE_URL)"),
    pytest.mark.timeout(240),
]

DEADLINE = "2"  # seconds
PER_CALL = 0.7  # seconds a call's row takes: two calls fit the deadline, four do not
ALONE_TOO_SLOW = 5  # seconds the row of a call of backend `slow` takes: more than the deadline


def slow_rows(per_call: float, slow_backend: float) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"""
            CREATE OR REPLACE FUNCTION extproxy_test_slow_row() RETURNS trigger AS $$
            BEGIN
                PERFORM pg_sleep(CASE WHEN NEW.backend = 'slow' THEN {slow_backend} ELSE {per_call} END);
                RETURN NEW;
            END $$ LANGUAGE plpgsql""")
        cursor.execute(f"""
            CREATE OR REPLACE TRIGGER extproxy_test_slow_row BEFORE INSERT ON {Call._meta.db_table}
            FOR EACH ROW EXECUTE FUNCTION extproxy_test_slow_row()""")


def no_slow_rows() -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TRIGGER IF EXISTS extproxy_test_slow_row ON {Call._meta.db_table}")
        cursor.execute("DROP FUNCTION IF EXISTS extproxy_test_slow_row()")


@pytest.fixture
def recorder_of(transactional_db):
    started = []

    def start(spool):
        started.append(RecorderProcess(spool, None, {"EXTPROXY_DB_STATEMENT_DEADLINE": DEADLINE}))
        return started[0]

    yield start
    for recorder in started:
        recorder.stop()
    no_slow_rows()


def test_a_batch_too_long_for_the_deadline_is_stored_in_halves(recorder_of, tmp_path):
    spool = tmp_path / "spool"
    write_calls(spool, make_trace())
    recorder = recorder_of(spool)
    wait_for_drain(spool, recorder, timeout=60)
    slow_rows(PER_CALL, PER_CALL)
    batch = [make_trace() for _ in range(8)]  # one batch: 5.6 s of rows
    write_calls(spool, *batch)
    wait_for_drain(spool, recorder, timeout=120)
    assert stored_once(batch)
    counters = read_recorder_counters(spool)
    assert counters["halved"] >= 2  # 8 -> 4 -> 2 at least
    assert counters["written"] == 1 + len(batch)
    assert counters["over_deadline"] == 0
    assert counters["database"]["ok"] is True


def test_a_single_call_too_long_for_the_deadline_stays_in_the_spool_with_an_alarm_until_stored(
        recorder_of, tmp_path):
    spool = tmp_path / "spool"
    write_calls(spool, make_trace())
    recorder = recorder_of(spool)
    wait_for_drain(spool, recorder, timeout=60)
    slow_rows(0, ALONE_TOO_SLOW)
    slow = make_trace(backend="slow")
    after = [make_trace() for _ in range(3)]
    write_calls(spool, slow, *after)
    counters = wait_for(lambda: (c := read_recorder_counters(spool)).get("over_deadline") and c, 90)
    assert counters["over_deadline"] == 1
    counters = counters_past(spool, "write_errors", counters["write_errors"])  # retried, not dropped
    assert counters["held"]["over-deadline"] >= 2
    assert counters["dropped"] == {}
    assert not Call.objects.filter(call_id=slow.call_id).exists()
    assert spool_status(spool).depth == 1 + len(after)  # the calls behind it wait too
    assert recorder.process.poll() is None
    assert "alone take longer than EXTPROXY_DB_STATEMENT_DEADLINE" in recorder.output()
    metrics = metrics_of(spool)
    assert metrics["extproxy_recorder_over_deadline"] == 1
    assert metrics['extproxy_recorder_held_total{reason="over-deadline"}'] >= 2
    slow_rows(0, 0)  # now it fits
    wait_for_drain(spool, recorder, timeout=120)
    assert stored_once([slow, *after])
    counters = read_recorder_counters(spool)
    assert counters["over_deadline"] == 0
    assert counters["written"] == 2 + len(after)
    assert metrics_of(spool)["extproxy_recorder_over_deadline"] == 0
