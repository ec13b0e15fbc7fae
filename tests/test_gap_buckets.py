"""Retention's gaps stay within an hour each: calls pruned over three days are not all counted
by an export of one hour of them (a row counts whole in any export it overlaps)."""
from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone as tz
from pathlib import Path

import pytest

from extproxy.config import RecordingConfig, RedactionConfig, RetentionConfig
from extproxy.models import Call, RecordingGap
from extproxy.recorder import Recorder
from extproxy.retention import prune
from tests.test_export import run_command
from tests.test_recorder import make_trace

pytestmark = pytest.mark.django_db


def test_calls_pruned_over_days_are_counted_by_the_hour_in_an_export(tmp_path):
    start = time.time() // 3600 * 3600 - 20 * 86400  # on the hour, twenty days ago
    Recorder(RecordingConfig(), RedactionConfig()).write_batch(  # one call every hour for three days
        [make_trace(started_at=start + h * 3600 + 120, finished_at=start + h * 3600 + 120.01) for h in range(72)])
    assert prune(RetentionConfig(max_age_seconds=15 * 86400)).calls == 72  # one chunk: every row of it
    assert Call.objects.count() == 0 and sum(RecordingGap.objects.values_list("calls", flat=True)) == 72
    assert all(g.last_at - g.first_at < timedelta(hours=1) for g in RecordingGap.objects.all())
    since = datetime.fromtimestamp(start + 30 * 3600, tz.utc)
    out = tmp_path / "hour.ndjson"
    run_command("export", "-o", str(out), "--since", since.isoformat(), "--until",
                (since + timedelta(hours=1)).isoformat(), "--no-progress")
    manifest = json.loads(Path(f"{out}.manifest.json").read_text())
    assert manifest["complete"] is False
    assert [(g["reason"], g["calls"]) for g in manifest["gaps"]] == [("pruned-age", 1)]  # was 72
