"""The latency roll-up behind the backends page: log buckets, each call counted once, a gap in
ids (a batch not committed yet) waited for, and percentiles read back per backend and verb."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from dashboard import rollup
from dashboard.models import LatencyCell, RollupMark

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime(2026, 12, 3, 8, 0, 0, tzinfo=timezone.utc)


def call(id_: int, ms: float, backend: str = "gpu", verb: str = "filter", outcome: str = "ok", at: datetime = T0):
    from extproxy.models import Call

    return Call.objects.create(id=id_, verb=verb, backend=backend, started_at=at, finished_at=at + timedelta(milliseconds=ms),
                               outcome=outcome, request_body=b"", response_body=b"", decisions_blob=b"")


@pytest.mark.parametrize("ms,bucket", [(0.01, 0), (0.17, 0), (0.18, 1), (1.0, 3), (1.01, 4), (10.0, 7), (250, 13),
                                       (5000, 18), (1e9, rollup.BUCKETS - 1)])
def test_it_puts_latencies_in_log_buckets(ms, bucket):
    assert rollup.bucket_of(ms) == bucket
    low, high = rollup.bucket_bounds(bucket)
    assert low < ms <= high or bucket in (0, rollup.BUCKETS - 1)


def test_it_counts_each_call_once_per_backend_verb_minute_and_bucket():
    for i, ms in enumerate([2, 2, 3, 40, 900], start=1):
        call(i, ms, outcome="timeout" if ms == 900 else "ok")
    call(6, 2, verb="bind", outcome="error")

    assert rollup.catch_up() == 6
    assert rollup.catch_up() == 0  # nothing new: nothing counted twice

    cells = {(c.verb, c.bucket): (c.calls, c.errors, c.timeouts) for c in LatencyCell.objects.all()}
    # (1.78, 3.16] ms holds 2, 2 and 3; (31.6, 56.2] 40; (562, 1000] 900
    assert cells == {("filter", 5): (3, 0, 0), ("filter", 10): (1, 0, 0), ("filter", 15): (1, 0, 1),
                     ("bind", 5): (1, 1, 0)}
    call(7, 2)
    assert rollup.catch_up() == 1
    assert LatencyCell.objects.get(verb="filter", bucket=5).calls == 4


def test_it_waits_for_a_gap_in_ids_then_counts_past_it():
    for i in (1, 2, 3, 6, 7):
        call(i, 5)
    assert rollup.catch_up(now=T0) == 3  # 4 and 5 may be a batch still being committed
    assert rollup.catch_up(now=T0 + timedelta(seconds=5)) == 0
    assert RollupMark.objects.get(name=rollup.MARK).last_id == 3
    assert rollup.catch_up(now=T0 + timedelta(seconds=11)) == 2  # they never came
    assert sum(c.calls for c in LatencyCell.objects.all()) == 5


def part(call_id: int, id_: int, backend: str, ms: float, outcome: str = "ok", verb: str = "filter"):
    from extproxy.models import BackendCall

    return BackendCall.objects.create(id=id_, call_id=call_id, backend=backend, verb=verb, started_at=T0,
                                      finished_at=T0 + timedelta(milliseconds=ms), outcome=outcome,
                                      request_body=b"", response_body=b"", decisions_blob=b"")


def test_it_counts_each_backend_of_a_combined_call_under_its_own_name_once():
    """The combined form's calls are all `combined`: counted by that name only, every backend's
    section of the backends page said "No calls in this window"."""
    from extproxy.models import Call

    call(1, 12, backend="combined")
    part(1, 1, "gpu", 2)
    part(1, 2, "quota", 9, outcome="error")
    replayed = call(2, 12, backend="combined")
    Call.objects.filter(pk=replayed.pk).update(is_replay=True)
    part(2, 3, "gpu", 2)  # a replay's part: not the scheduler's traffic

    assert rollup.catch_up() == 5
    assert rollup.catch_up() == 0  # nothing counted twice
    cells = {(c.backend, c.bucket): (c.calls, c.errors, c.timeouts) for c in LatencyCell.objects.all()}
    assert cells == {("combined", 8): (1, 0, 0), ("gpu", 5): (1, 0, 0), ("quota", 7): (1, 1, 0)}  # 12, 2, 9 ms
    part(1, 4, "gpu", 2)
    assert rollup.catch_up() == 1
    assert LatencyCell.objects.get(backend="gpu").calls == 2


def test_the_backends_page_shows_each_backend_of_the_combined_form(backend_server, proxy, write_config):
    """Real traffic: one combined entry before two backends on loopback, one of them failing."""
    from django.contrib.auth.models import User
    from django.test import Client

    from tests.conftest import fixture_bytes, pass_all
    from tests.test_combined import backend, post

    good = backend_server({"filter": pass_all})
    broken = backend_server({"filter": lambda h, body: h.answer(500, b"down")})
    server = proxy(write_config({"backends": [backend("good", good, filterVerb="filter"),
                                              backend("broken", broken, filterVerb="filter", ignorable=True)]}))
    for _ in range(3):
        assert post(server, "filter", fixture_bytes("filter-request.nodecache-false.json")).status_code == 200
    server.flush()

    viewer = Client()
    viewer.force_login(User.objects.create_superuser("viewer", "", "pw"))
    page = viewer.get("/backends/").content.decode()
    glance = page.split('id="glance"', 1)[1].split("</table>", 1)[0]
    rows = {cells[0]: cells for cells in (_cells(tr) for tr in glance.split("<tr")[1:]) if cells}
    assert rows["good"][1:3] == ["filter", "3"] and rows["good"][4] == "0.0 %"
    assert rows["broken"][1:3] == ["filter", "3"] and rows["broken"][4] == "100.0 %"
    assert rows["combined"][1:3] == ["filter", "3"]
    # Each backend's own contract findings, under its own section: the 500 and its body.
    broken_section = page.split('id="backend-broken"', 1)[1].split("</section>", 1)[0]
    assert "non-200" in broken_section and "down" in broken_section
    good_section = page.split('id="backend-good"', 1)[1].split("</section>", 1)[0]
    assert "None found in recent calls." in good_section


def _cells(row: str) -> list[str]:
    import re

    return [re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]


def test_it_reads_percentiles_and_rates_from_the_cells_in_sql():
    from dashboard.backend_stats import backend_series

    now = datetime.now(timezone.utc)
    latencies = [1.0] * 50 + [10.0] * 40 + [100.0] * 9 + [1000.0]
    for i, ms in enumerate(latencies, start=1):
        call(i, ms, at=now - timedelta(minutes=3), outcome="error" if i <= 5 else "ok")

    [s] = backend_series(60, now=now)

    assert (s["backend"], s["verb"], s["calls"], s["errors"], s["timeouts"]) == ("gpu", "filter", 100, 5, 0)
    assert (s["p50"], s["p90"], s["p99"]) == (1.0, 10.0, 100.0)  # upper edges of the buckets holding them
    assert s["rate"] == round(100 / 3600, 3)
    assert sum(c for _, _, c in s["heat"]) == 100 and len(s["points"]) == 30


def test_it_counts_a_call_in_its_utc_minute_whatever_the_process_time_zone(monkeypatch):
    import time

    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        call(1, 5, at=T0 + timedelta(seconds=30))
        assert rollup.catch_up() == 1
    finally:
        monkeypatch.undo()
        time.tzset()
    assert LatencyCell.objects.get().minute == int(T0.timestamp()) // 60


def test_a_percentile_is_no_higher_than_the_slowest_call_in_its_bucket(backend_server, proxy, write_config):
    """Calls cut off at a backend's httpTimeout: the page said "p99 ≤ 316.228 ms, 105 % of
    httpTimeout" for calls that could not take longer than 300 ms plus the time to answer (at
    1.8 s: "≤ 3162 ms, 158 %"), the upper edge of their bucket. The slowest call counted in the
    bucket bounds it too. Real traffic: a backend slower than its timeout, on loopback."""
    from django.contrib.auth.models import User
    from django.test import Client

    from extproxy.models import Call
    from tests.conftest import fixture_bytes, reply, slow
    from tests.test_per_backend import config_for, post

    sleepy = backend_server({"filter": slow(2.0, reply(200, b"{}"))})
    server = proxy(write_config(config_for(sleepy.url, httpTimeout="0.3s")))
    for _ in range(3):
        post(server, "/extender/gpu/filter", fixture_bytes("filter-request.nodecache-false.json"))
    server.flush()
    slowest = max((c.finished_at - c.started_at).total_seconds() * 1000 for c in Call.objects.all())
    assert Call.objects.filter(outcome="timeout").count() == 3

    viewer = Client()
    viewer.force_login(User.objects.create_superuser("viewer", "", "pw"))
    page = viewer.get("/backends/").content.decode()
    glance = page.split('id="glance"', 1)[1].split("</table>", 1)[0]
    [row] = [cells for cells in (_cells(tr) for tr in glance.split("<tr")[1:]) if cells]
    assert row[8] == f"≤ {round(slowest, 3)}"  # p99, where it said the bucket's upper edge
    shown = int(row[9].removesuffix(" %"))  # p99 / httpTimeout, rounded twice on its way to the page
    assert abs(shown - slowest / 300 * 100) <= 1, (row[9], slowest)


def test_the_slowest_call_of_a_bucket_is_kept_across_slots_and_passes():
    from dashboard.backend_stats import backend_series

    now = datetime.now(timezone.utc)
    for i in range(1, 5):
        call(i, 250.0, at=now - timedelta(minutes=2))
    assert rollup.catch_up() == 4
    assert backend_series(60, now=now)[0]["p99"] == 250.0  # the bucket's edge is 316.228
    call(5, 260.0, at=now - timedelta(minutes=40))  # another slot, another pass: the slowest of both
    assert rollup.catch_up() == 1
    assert backend_series(60, now=now)[0]["p99"] == 260.0
    call(6, 200.0, at=now - timedelta(minutes=2))  # a faster call in a counted cell leaves it as it was
    assert rollup.catch_up() == 1
    assert LatencyCell.objects.get(minute=rollup.epoch_minute(now - timedelta(minutes=2))).slowest_ms == 250.0


def test_a_cell_counted_before_the_slowest_call_was_kept_gives_its_buckets_upper_edge():
    """Migration 0002 on a cell the roll-up counted before it: the page shows it as it did."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    from dashboard.backend_stats import backend_series

    now = datetime.now(timezone.utc)
    before, after = [("dashboard", "0001_views")], [("dashboard", "0002_latency_cell_slowest")]
    try:
        executor = MigrationExecutor(connection)
        executor.migrate(before)
        old_cell = executor.loader.project_state(before).apps.get_model("dashboard", "LatencyCell")
        old_cell.objects.create(backend="gpu", verb="filter", minute=rollup.epoch_minute(now - timedelta(minutes=2)),
                                bucket=rollup.bucket_of(250.0), calls=4)
    finally:
        MigrationExecutor(connection).migrate(after)
    edge = rollup.UPPER_EDGES_MS[rollup.bucket_of(250.0)]
    assert LatencyCell.objects.get().slowest_ms == pytest.approx(edge)
    assert backend_series(60, now=now)[0]["p99"] == round(edge, 3)
