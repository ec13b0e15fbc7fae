"""A dropped call's gap is stamped with when the call started, not when it was dropped: exports
select calls by start, so a slow call dropped later must still make its own range incomplete."""
from __future__ import annotations

import json
import time
from datetime import datetime, timezone as tz
from pathlib import Path

import pytest

from extproxy.config import RecordingConfig
from extproxy.models import RecordingGap
from extproxy.recording import SpoolRecorder, dropcount
from extproxy.recording.spool import SpoolSettings
from extproxy.recording.trace import encode_trace
from tests.test_export import run_command
from tests.test_recorder import drain, make_trace

pytestmark = pytest.mark.timeout(120)


def utc(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz.utc)


def iso(epoch: float) -> str:
    return utc(epoch).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def manifest_of(tmp_path: Path, since: float, until: float) -> dict:
    out = tmp_path / "calls.ndjson"
    run_command("export", "-o", str(out), "--since", iso(since), "--until", iso(until), "--no-progress")
    return json.loads(Path(f"{out}.manifest.json").read_text())


def test_calls_dropped_at_a_full_hand_off_are_a_gap_at_their_start(transactional_db, tmp_path):
    started = float(int(time.time())) - 3600  # slow calls: started an hour before they were handed over
    recorder = SpoolRecorder(RecordingConfig(queue_size=2), SpoolSettings(root=tmp_path / "spool"))
    accepted = [recorder.submit(make_trace(started_at=started + i, finished_at=started + i + 0.5)) for i in range(5)]
    assert accepted == [True, True, False, False, False]  # not started: nothing leaves memory
    recorder.start()
    assert recorder.flush(20) and recorder.stop()
    drain(tmp_path)
    gap = RecordingGap.objects.get(reason="queue-full")
    assert (gap.calls, gap.first_at, gap.last_at) == (3, utc(started + 2), utc(started + 4))
    manifest = manifest_of(tmp_path, started, started + 10)
    assert manifest["complete"] is False and [(g["reason"], g["calls"]) for g in manifest["gaps"]] == [("queue-full", 3)]
    assert manifest_of(tmp_path, started + 60, time.time())["complete"] is True  # not where they were dropped (a range ended by now)


def test_calls_refused_by_a_full_spool_are_a_gap_at_their_start(transactional_db, tmp_path, monkeypatch):
    monkeypatch.setattr(dropcount, "GAP_EVERY", 0.0)
    started = float(int(time.time())) - 7200
    one = len(encode_trace(make_trace()))
    recorder = SpoolRecorder(RecordingConfig(), SpoolSettings(root=tmp_path / "spool", max_bytes=one * 10))
    recorder.start()
    for i in range(30):
        assert recorder.submit(make_trace(started_at=started + i, finished_at=started + i + 0.5))
        assert recorder.flush(20)
    assert recorder.stop()
    drain(tmp_path)
    refused = 30 - recorder.spooled
    gaps = list(RecordingGap.objects.filter(reason="spool-full"))
    assert sum(g.calls for g in gaps) == refused > 0
    assert utc(started + recorder.spooled) <= min(g.first_at for g in gaps)
    assert max(g.last_at for g in gaps) <= utc(started + 29)
    assert manifest_of(tmp_path, started, started + 30)["complete"] is False
