"""Every dashboard page says when the record behind it cannot be trusted right now: the recorder
behind (calls waiting in the spool), the database away, no recorder reporting, recording off,
calls dropped in the last hour; the pod page, calls dropped since the earliest call it shows.
Through a real spool, a real recorder drain, real gap rows and the pages as a viewer gets them."""
from __future__ import annotations

import re
import socket
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client

from extproxy.config import RecordingConfig, RedactionConfig
from extproxy.engine import Engine, set_engine
from extproxy.models import RecordingGap
from extproxy.recording import SpoolRecorder
from extproxy.recording.observe import write_recorder_counters
from extproxy.recording.spool import SpoolSettings
from extproxy.recording.spool_writer import SpoolWriter
from extproxy.recording.trace import encode_trace
from extproxy.recording.writer import Drainer
from tests.test_dashboard_pages import gpu_attempt, record

pytestmark = pytest.mark.django_db(transaction=True)

XSS = "<script>alert('db')</script>"


@pytest.fixture
def spool(tmp_path):
    """An engine whose recorder spools to a directory of the test's own (recording on)."""
    from extproxy.config import load_config

    root = tmp_path / "spool"
    root.mkdir()
    config = load_config(None)
    previous = set_engine(Engine(config, SpoolRecorder(config.recording, SpoolSettings(root=root))))
    yield root
    set_engine(previous)


def viewer() -> Client:
    User.objects.create_superuser("op", "", "pw")
    client = Client()
    assert client.login(username="op", password="pw")
    return client


def reports(root: Path, ok: bool | None = True, age: float = 0.0, since: float | None = None, error: str = "") -> None:
    """recorder.json as the recorder process writes it, `age` seconds old."""
    write_recorder_counters(root, {"pid": 1, "updated_at": time.time() - age, "written": 0,
                                   "database": {"ok": ok, "failing_since": since, "error": error}})


def warnings(client: Client, path: str = "/") -> list[str]:
    """The warnings above the page, as text."""
    page = client.get(path)
    assert page.status_code == 200, page.content[:300]
    html = page.content.decode()
    block = re.search(r'<div id="record-status".*?</div>', html, re.S)
    assert block is not None, "no record status on the page"
    return [re.sub(r"<[^>]+>", "", item).strip() for item in re.findall(r"<li[^>]*>(.*?)</li>", block.group(0), re.S)]


def gap(reason: str, calls: int, minutes_ago: float, span_minutes: float = 1.0) -> None:
    last = datetime.now(timezone.utc) - timedelta(minutes=minutes_ago)
    RecordingGap.objects.create(reason=reason, calls=calls, first_at=last - timedelta(minutes=span_minutes),
                                last_at=last, noted_at=datetime.now(timezone.utc))


def test_it_says_nothing_while_the_record_is_current(spool):
    client = viewer()
    reports(spool)
    gap("queue-full", 9, minutes_ago=120)  # older than the last hour
    gap("pruned-age", 5000, minutes_ago=5)  # retention's deliberate deletion, not a loss
    for path in ("/", "/pending/", "/backends/", "/replays/", "/pods/ml-team/trainer/"):
        assert warnings(client, path) == [], path


def test_it_says_how_far_behind_the_record_is_until_the_recorder_has_drained_it(spool, settings):
    settings.EXTPROXY_RECORD_BEHIND_SECONDS = 30
    client = viewer()
    reports(spool)
    writer = SpoolWriter(SpoolSettings(root=spool), "serve")
    assert writer.append([encode_trace(t) for t in gpu_attempt(name="waiting")]) == [True] * 3
    writer.close()
    assert warnings(client) == []  # just spooled: the recorder's usual delay is not "behind"
    settings.EXTPROXY_RECORD_BEHIND_SECONDS = 0
    [behind] = warnings(client)
    assert re.match(rf"The record is \d+ s behind: 3 answered calls wait in the spool of replica "
                    rf"{re.escape(socket.gethostname())}, not yet in the database", behind), behind

    drainer = Drainer(spool, RecordingConfig(), RedactionConfig())
    drainer.run(until_idle=True)
    drainer.close()
    assert warnings(client) == []
    assert client.get("/pods/ml-team/waiting/").content.count(b"node-01") > 0  # drained into the record


def test_it_says_since_when_the_recorder_cannot_write_to_the_database(spool):
    client = viewer()
    since = datetime(2026, 12, 5, 21, 40, 7, tzinfo=timezone.utc).timestamp()
    reports(spool, ok=False, since=since, error=f"OperationalError: connection refused {XSS}")
    [failing] = warnings(client)
    assert "cannot write to the database since 2026-12-05 21:40:07 UTC" in failing
    assert "OperationalError: connection refused" in failing
    html = client.get("/").content.decode()
    assert XSS not in html and "&lt;script&gt;alert(&#x27;db&#x27;)&lt;/script&gt;" in html  # text, not markup


def test_it_says_when_no_recorder_reports_and_drops_a_stale_database_state(spool):
    client = viewer()
    [never] = warnings(client)
    assert "No recorder process has reported" in never
    reports(spool, ok=False, age=125, since=time.time() - 600, error="gone")
    [silent] = warnings(client)
    assert re.search(r"last reported 12\d s ago", silent), silent  # not "cannot write since": that is old
    reports(spool, ok=True, age=2)
    assert warnings(client) == []


def test_it_lists_the_last_hours_drops_by_reason(spool):
    client = viewer()
    reports(spool)
    gap("spool-full", 40, minutes_ago=50)
    gap("spool-full", 2, minutes_ago=10)
    gap("queue-full", 7, minutes_ago=58, span_minutes=5)  # began before the hour, reaches into it
    gap("queue-full", 5, minutes_ago=61)  # ended before it
    gap("queue-full", 3, minutes_ago=200)
    found = warnings(client, "/pending/")
    assert [w.split(" dropped")[0] for w in found] == ["7 calls", "42 calls"], found
    assert "(queue-full)" in found[0] and "(spool-full)" in found[1]
    assert '<a href="/api/gaps/?since=' in client.get("/pending/").content.decode()


def test_it_says_when_recording_is_off(tmp_path, write_config):
    from extproxy.config import load_config

    config = load_config(write_config({"backends": [{"name": "a", "urlPrefix": "http://127.0.0.1:9/x", "filterVerb": "filter"}],
                                       "recording": {"enabled": False}}))
    previous = set_engine(Engine(config, SpoolRecorder(config.recording, SpoolSettings(root=tmp_path / "spool"))))
    try:
        [off] = warnings(viewer())
        assert "Recording is off" in off
    finally:
        set_engine(previous)


def test_the_warnings_refresh_in_place_and_need_a_viewer(spool, settings):
    settings.EXTPROXY_RECORD_STATUS_POLL_SECONDS = 7
    anonymous = Client().get("/feed/record-status/")
    assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]
    # An open page whose session ended is reloaded, not given the login page inside it.
    signed_out = Client().get("/feed/record-status/", HTTP_HX_REQUEST="true")
    assert signed_out.status_code == 200 and signed_out["HX-Refresh"] == "true" and not signed_out.content
    User.objects.create_user("nobody", "", "pw")
    nobody = Client()
    assert nobody.login(username="nobody", password="pw")
    assert nobody.get("/feed/record-status/").status_code == 403
    assert nobody.get("/feed/record-status/", HTTP_HX_REQUEST="true")["HX-Refresh"] == "true"
    assert b'id="record-status"' not in nobody.get("/accounts/login/").content

    client = viewer()
    page = client.get("/").content.decode()
    [container] = re.findall(r'<div id="record-status"[^>]*>', page)
    assert 'hx-get="/feed/record-status/"' in container and 'hx-trigger="every 7s"' in container
    assert 'hx-swap="innerHTML"' in container  # the live region stays; its content changes
    fragment = client.get("/feed/record-status/", HTTP_HX_REQUEST="true").content.decode()
    assert fragment.startswith("<ul>") and "<div" not in fragment and "<html" not in fragment
    assert "No recorder process has reported" in fragment


def test_the_warnings_say_the_database_is_away_instead_of_failing(spool, monkeypatch):
    """htmx swaps no 5xx: an open page would go on saying nothing is wrong."""
    from django.db import OperationalError

    from dashboard import views

    client = viewer()
    client.raise_request_exception = False

    def away(request):
        raise OperationalError("connection refused")

    monkeypatch.setattr(views, "_record_status", away)
    answer = client.get("/feed/record-status/", HTTP_HX_REQUEST="true")
    assert answer.status_code == 200
    assert "The database is unavailable (OperationalError): these pages cannot be read" in answer.content.decode()


NEVER, SINCE_REPORT = "No recorder process has reported", "cannot write to the database since"


@pytest.mark.parametrize("report, said", [
    ("[1, 2]", NEVER), ("null", NEVER), ('{"updated_at": "yesterday"}', NEVER), ('{"updated_at": 1e300}', NEVER),
    ('{"updated_at": NOW, "database": "down"}', None),  # the database's state unknown: nothing said
    ('{"updated_at": NOW, "database": {"ok": false, "failing_since": "x"}}', SINCE_REPORT),
    ('{"updated_at": NOW, "database": {"ok": false, "failing_since": NaN}}', SINCE_REPORT),
    ('{"updated_at": NOW, "database": {"ok": false, "failing_since": 1e300}}', SINCE_REPORT),
])
def test_an_odd_recorder_report_never_fails_a_page(spool, report, said):
    """Failing since the report itself when the start it gives is not a time."""
    now = time.time()
    (spool / "recorder.json").write_text(report.replace("NOW", repr(now)))
    found = warnings(viewer())  # answered 200
    if said is None:
        assert found == []
    else:
        [warning] = found
        assert said in warning, warning
        if said == SINCE_REPORT:
            assert datetime.fromtimestamp(now, timezone.utc).strftime("%Y-%m-%d %H:%M") in warning


def test_what_cannot_be_read_is_said_and_logged_not_a_500(spool, monkeypatch, caplog):
    from extproxy.engine import get_engine

    def broken():
        raise PermissionError("spool: permission denied")

    monkeypatch.setattr(get_engine().recorder, "status", broken)
    [unknown] = warnings(viewer())
    assert "status could not be read" in unknown
    assert "PermissionError: spool: permission denied" in caplog.text


def test_the_pod_page_says_calls_were_lost_since_its_earliest_call(spool):
    client = viewer()
    reports(spool)
    started = time.time() - 30 * 60
    record(gpu_attempt(name="lost-calls", at=started))
    gap("spool-full", 12, minutes_ago=20)  # after the pod's earliest call: may be its calls
    gap("queue-full", 4, minutes_ago=45, span_minutes=2)  # before it: not this pod's
    html = client.get("/pods/ml-team/lost-calls/").content.decode()
    [said] = re.findall(r'<p class="record-incomplete">(.*?)</p>', html, re.S)
    assert "the record lost 12 calls (spool-full" in said and "queue-full" not in said, said
    assert "some of this pod's attempts or calls may be missing below" in said
    gap("spool-full", 1, minutes_ago=90)  # far before: nothing changes
    [said] = re.findall(r'<p class="record-incomplete">(.*?)</p>', client.get("/pods/ml-team/lost-calls/").content.decode(), re.S)
    assert "the record lost 12 calls (spool-full" in said, said
    # A pod with no call at all: the last hour's drops, whenever they were, may have been its calls.
    other = client.get("/pods/ml-team/never-seen/").content.decode()
    assert "No calls recorded for this pod." in other and "some of this pod's attempts" not in other
    [said] = re.findall(r'<p class="record-incomplete">(.*?)</p>', other, re.S)
    assert "in the last hour the record lost 4 calls (queue-full" in said and "12 calls (spool-full" in said, said
    assert "13 calls" not in said  # the drop 90 minutes back is not in the last hour
    RecordingGap.objects.all().delete()
    assert "record-incomplete" not in client.get("/pods/ml-team/never-seen/").content.decode()


def test_the_audit_trails_own_retention_is_no_lost_call(spool):
    client = viewer()
    reports(spool)
    record(gpu_attempt(name="audited", at=time.time() - 30 * 60))
    gap("audit-pruned-age", 500, minutes_ago=10)  # the audit trail's retention (auditMaxAge of an hour)
    gap("queue-full", 3, minutes_ago=5)
    assert [w.split(" dropped")[0] for w in warnings(client)] == ["3 calls"]  # was: and "500 calls"
    for pod in ("audited", "never-seen"):
        [said] = re.findall(r'<p class="record-incomplete">(.*?)</p>',
                            client.get(f"/pods/ml-team/{pod}/").content.decode(), re.S)
        assert "3 calls (queue-full" in said and "audit" not in said and "500" not in said, said
