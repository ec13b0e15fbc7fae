"""The dashboard's latency roll-up runs as a thread of the recorder process, on a connection of
its own. Facing a database alive at the TCP level that never answers, its pass waited for ever
(the backends page then showed old latencies). Now each pass has the recorder's deadline
(EXTPROXY_DB_STATEMENT_DEADLINE): it fails, is counted and logged, the connection is replaced,
and once the database answers the roll-up catches up. PostgreSQL only, as
tests/test_database_hung.py."""
from __future__ import annotations

import os
import re

import pytest

from dashboard.models import LatencyCell, RollupMark
from dashboard.rollup import MARK
from extproxy.models import Call
from tests.conftest import wait_for_drain
from tests.tcprelay import FreezableRelay
from tests.test_database_hung import metrics_of, recorder_through, relay_to_database, serving_on
from tests.test_database_keepalive import wait_for, write_calls
from tests.test_recorder import make_trace

pytestmark = [
    pytest.mark.skipif(not os.environ.get("DATABASE_URL", "").startswith("postgres"),
                       reason="PostgreSQL only (DATABASE_URL)"),
    pytest.mark.timeout(240),
]

# The first query of a roll-up pass: the mark's row, taken for update.
ROLLUP_QUERY = b'FROM "dashboard_rollupmark"'


def failed_passes(output: str) -> int:
    counts = [int(n) for n in re.findall(r"latency roll-up failed \((\d+) passes so far", output)]
    return max(counts, default=0)


def counted_calls() -> int:
    return sum(LatencyCell.objects.values_list("calls", flat=True))


def test_a_rollup_pass_the_database_never_answers_fails_is_counted_and_catches_up_later(transactional_db, tmp_path):
    relay: FreezableRelay = relay_to_database()
    relay.swallow_after(ROLLUP_QUERY)  # the roll-up's connections only: the recorder's own go on
    spool = tmp_path / "spool"
    calls = [make_trace() for _ in range(8)]
    write_calls(spool, *calls)
    recorder = recorder_through(relay, spool)
    try:
        wait_for_drain(spool, recorder, timeout=60)  # storing is not held up by the roll-up
        # Each pass fails at the deadline and is counted; the next, on a new connection, too.
        wait_for(lambda: failed_passes(recorder.output()) >= 2, 90)
        assert relay.swallowed_bytes > 0
        assert "EXTPROXY_DB_STATEMENT_DEADLINE" in recorder.output()
        assert counted_calls() == 0
        assert recorder.process.poll() is None
        relay.relay_again()
        last = Call.objects.order_by("-id").values_list("id", flat=True).first()
        wait_for(lambda: RollupMark.objects.filter(name=MARK, last_id__gte=last).exists(), 90)
        assert counted_calls() == len(calls)
        later = [make_trace() for _ in range(3)]  # and it goes on counting
        write_calls(spool, *later)
        wait_for_drain(spool, recorder, timeout=60)
        wait_for(lambda: counted_calls() == len(calls + later), 60)
    finally:
        recorder.stop()
        relay.close()


def backends_page(spool) -> str:
    """The backends page of a serving process on `spool`."""
    from django.contrib.auth.models import Group, User
    from django.test import Client

    from extproxy.engine import get_engine

    get_engine()  # made at its first use, with a spool of its own: the page would report that one
    serving_on(spool)

    viewer, created = User.objects.get_or_create(username="rollup-viewer")
    if created:
        viewer.groups.add(Group.objects.get(name="viewer"))
    page = Client()
    page.force_login(viewer)
    answer = page.get("/backends/")
    assert answer.status_code == 200
    return answer.content.decode()


def test_a_rollup_that_completes_no_pass_shows_on_metrics_and_on_the_backends_page(transactional_db, tmp_path):
    """Before, its failures were only in the recorder's log: /metrics did not count them and the
    backends page showed old latencies as if current."""
    relay: FreezableRelay = relay_to_database()
    relay.swallow_after(ROLLUP_QUERY)
    spool = tmp_path / "spool"
    write_calls(spool, make_trace())
    recorder = recorder_through(relay, spool)
    try:
        wait_for_drain(spool, recorder, timeout=60)
        wait_for(lambda: 'id="rollup-behind"' in backends_page(spool), 90)
        assert "latency roll-up has not completed a pass for" in backends_page(spool)
        wait_for(lambda: metrics_of(spool).get("extproxy_rollup_failed_passes_total", 0) >= 2, 90)
        assert metrics_of(spool)["extproxy_rollup_last_pass_age_seconds"] == -1  # none completed
        relay.relay_again()
        wait_for(lambda: 'id="rollup-behind"' not in backends_page(spool), 90)  # a pass completed: current again
        assert metrics_of(spool)["extproxy_rollup_last_pass_age_seconds"] >= 0
    finally:
        recorder.stop()
        relay.close()
