"""A range whose calls may still arrive is not complete: while the spool holds calls not yet
stored (the recorder behind, the database away), an export ending after the stored-up-to point
says the range is still open; once they are stored, the same range is complete."""
from __future__ import annotations

import io
from datetime import datetime, timedelta, timezone as tz

import pytest

from extproxy.config import RecordingConfig
from extproxy.exportsigning import verify_here as verify
from extproxy.recording import SpoolRecorder
from extproxy.recording.spool import SpoolSettings
from tests.test_api_strict import traffic
from tests.test_export import auditor, fetch
from tests.test_recorder import drain, make_trace

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_export_past_the_spools_backlog_says_the_range_is_still_open(tmp_path, settings):
    settings.EXTPROXY_SPOOL_DIR = str(tmp_path / "spool")
    traffic()  # stored calls of the last seconds
    recorder = SpoolRecorder(RecordingConfig(), SpoolSettings(root=tmp_path / "spool"))
    recorder.start()
    assert recorder.submit(make_trace()) and recorder.flush(20) and recorder.stop()  # spooled, not stored
    client = auditor()
    body, manifest = fetch(client, "format=ndjson")
    assert manifest["complete"] is False and manifest["gaps"] == []  # was complete: the call was not in it
    assert manifest["still_open"]["undrained"] == 1
    stored_up_to = datetime.fromisoformat(manifest["still_open"]["stored_up_to"].replace("Z", "+00:00"))
    assert stored_up_to < datetime.now(tz.utc) - timedelta(seconds=59)
    verdict = verify(io.BytesIO(body), manifest)
    assert verdict.ok and not verdict.complete and "still open" in verdict.message
    earlier = (datetime.now(tz.utc) - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert fetch(client, f"format=ndjson&until={earlier}")[1]["complete"] is True  # before it: nothing can arrive
    drain(tmp_path)
    body, manifest = fetch(client, "format=ndjson")
    assert manifest["complete"] is True and manifest["still_open"] is None and verify(io.BytesIO(body), manifest).complete


def test_a_spool_that_cannot_be_read_leaves_the_range_open_and_the_export_whole(tmp_path, settings, monkeypatch):
    """Asked once the file is sent: an error there cut the stream and left no manifest."""
    import extproxy.recording.observe as observe

    def unreadable(root):
        raise PermissionError(13, "Permission denied", str(root))

    settings.EXTPROXY_SPOOL_DIR = str(tmp_path / "spool")
    traffic()
    monkeypatch.setattr(observe, "spool_status", unreadable)
    body, manifest = fetch(auditor(), "format=ndjson")
    assert manifest["complete"] is False and "spool could not be read (PermissionError" in manifest["still_open"]["reason"]
    assert verify(io.BytesIO(body), manifest).ok
