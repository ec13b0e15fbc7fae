"""Retention by size (the writer and `manage.py prune`), the gaps every pruning leaves for
exports to report, and the audit trail's own retention."""
from __future__ import annotations

import io
import json
import time
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from extproxy.config import ConfigError, RecordingConfig, RedactionConfig, RetentionConfig, load_config
from extproxy.models import AuditEvent, Call, RecordingGap
from extproxy.pruning import stored_bytes
from extproxy.recorder import Recorder
from extproxy.retention import prune
from tests.conftest import fixture_bytes
from tests.test_recorder import make_trace

pytestmark = pytest.mark.django_db(transaction=True)


def record_calls(count: int, start: float, full: bool = False) -> None:
    body = fixture_bytes("filter-request.nodecache-false.json" if full else "filter-request.nodecache-true.json")
    reply = fixture_bytes("filter-result.nodecache-false.json" if full else "filter-result.nodecache-true.json")
    Recorder(RecordingConfig(), RedactionConfig()).write_batch(
        [make_trace(body=body, response=reply, started_at=start + i, finished_at=start + i + 0.01,
                    node_cache_capable=not full) for i in range(count)]
    )


def hour_ago() -> float:
    """A minute into the last hour: calls a second apart from it stay in one gap bucket (an hour)."""
    return time.time() // 3600 * 3600 - 3600 + 60


def test_it_deletes_the_oldest_calls_until_the_store_fits_and_notes_the_gap():
    start = hour_ago()
    record_calls(40, start)
    per_call = stored_bytes() / 40
    bound = int(per_call * 25.5)
    result = prune(RetentionConfig(max_age_seconds=0, max_bytes=bound))
    assert result.calls == 15 and stored_bytes() <= bound
    kept = sorted(Call.objects.values_list("started_at", flat=True))
    assert kept[0].timestamp() == pytest.approx(start + 15, abs=0.01)  # the oldest went first
    [gap] = RecordingGap.objects.all()
    assert (gap.reason, gap.calls) == ("pruned-size", 15)
    assert gap.first_at.timestamp() == pytest.approx(start, abs=0.01)
    assert gap.last_at.timestamp() == pytest.approx(start + 14, abs=0.01)
    assert prune(RetentionConfig(max_age_seconds=0, max_bytes=bound)).calls == 0  # within the bound: nothing


def test_it_counts_node_objects_and_backend_calls_in_the_size():
    record_calls(3, time.time() - 100, full=True)
    from extproxy.models import NodeObject

    calls_only = sum(len(c.request_body) + len(c.response_body) + len(c.decisions_blob) for c in Call.objects.all())
    nodes = sum(len(n.data) for n in NodeObject.objects.all())
    assert NodeObject.objects.count() == 5 and stored_bytes() == calls_only + nodes


def test_it_bounds_the_size_in_the_writer_as_it_records():
    from extproxy.recorder import Recorder

    record_calls(30, hour_ago())
    bound = stored_bytes() // 3
    recorder = Recorder(RecordingConfig(), RedactionConfig(), retention=RetentionConfig(max_age_seconds=0, max_bytes=bound))
    recorder.submit(make_trace())  # the writer starts and prunes before its first batch
    assert recorder.flush(20)
    recorder.stop()
    assert stored_bytes() <= bound + stored_bytes() / Call.objects.count()  # the bound, plus the call just written
    assert RecordingGap.objects.get(reason="pruned-size").calls >= 19


def test_it_notes_age_and_count_pruning_as_one_growing_gap_per_reason_and_hour():
    now = hour_ago() + 3600
    record_calls(10, now - 20 * 86400)
    prune(RetentionConfig(max_age_seconds=15 * 86400))
    record_calls(5, now - 16 * 86400)  # arrived late (a replayed spool): pruned on the next pass
    prune(RetentionConfig(max_age_seconds=15 * 86400))
    record_calls(6, now - 100)
    prune(RetentionConfig(max_age_seconds=15 * 86400, max_calls=4))
    gaps = {g.reason: g for g in RecordingGap.objects.all()}
    # the late calls are four days on: another hour, another row
    assert list(RecordingGap.objects.filter(reason="pruned-age").order_by("first_at").values_list("calls", flat=True)) == [10, 5]
    assert gaps["pruned-count"].calls == 2
    assert Call.objects.count() == 4


def test_two_passes_at_once_note_each_call_they_delete_once(monkeypatch):
    """Another pass (a replica's recorder, `manage.py prune`) deletes the calls this pass picked
    between the pick and the delete: this pass notes what it deleted, none."""
    from extproxy import pruning

    record_calls(10, time.time() - 20 * 86400)
    real_atomic, raced = pruning.transaction.atomic, []

    def atomic(*args, **kwargs):
        if not raced:
            raced.append(True)
            prune(RetentionConfig(max_age_seconds=15 * 86400))  # the other pass, first to its delete
        return real_atomic(*args, **kwargs)

    monkeypatch.setattr(pruning.transaction, "atomic", atomic)
    prune(RetentionConfig(max_age_seconds=15 * 86400))
    assert raced and Call.objects.count() == 0
    assert sum(RecordingGap.objects.values_list("calls", flat=True)) == 10


def test_it_reports_pruned_ranges_in_an_export_manifest(tmp_path):
    now = time.time()
    record_calls(10, now - 3600)
    bound = int(stored_bytes() * 0.55)
    prune(RetentionConfig(max_age_seconds=0, max_bytes=bound))
    out = tmp_path / "calls.ndjson"
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - 7200))
    call_command("export", "-o", str(out), "--since", since, "--no-progress", stdout=io.StringIO(), stderr=io.StringIO())
    manifest = json.loads((tmp_path / "calls.ndjson.manifest.json").read_text())
    assert manifest["complete"] is False
    assert [(g["reason"], g["calls"]) for g in manifest["gaps"]] == [("pruned-size", 10 - Call.objects.count())]
    later = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - 60))
    call_command("export", "-o", str(out), "--since", later, "--no-progress", stdout=io.StringIO(), stderr=io.StringIO())
    assert json.loads((tmp_path / "calls.ndjson.manifest.json").read_text())["complete"] is True


def test_it_keeps_the_audit_trail_for_its_own_age_and_says_when_it_pruned():
    from extproxy.audit import audit

    audit(None, "login", target="old", actor="old")
    audit(None, "login", target="new", actor="new")
    AuditEvent.objects.filter(target="old").update(at=timezone.now() - timedelta(days=500))
    result = prune(RetentionConfig(max_age_seconds=0))  # the default auditMaxAge: 400 days
    assert result.audit_events == 1
    assert list(AuditEvent.objects.filter(action="login").values_list("target", flat=True)) == ["new"]
    [note] = AuditEvent.objects.filter(action="audit-pruned")
    assert note.detail["events"] == 1 and note.actor == "retention"
    AuditEvent.objects.update(at=timezone.now() - timedelta(days=5000))
    assert prune(RetentionConfig(max_age_seconds=0, audit_max_age_seconds=0)).audit_events == 0


def test_it_prunes_by_size_from_the_command(tmp_path, settings):
    record_calls(20, time.time() - 3600)
    bound = stored_bytes() // 2
    config = tmp_path / "extproxy.yaml"
    config.write_text(json.dumps({"backends": [{"name": "p", "policy": "default"}], "policies": {"default": {}},
                                  "retention": {"maxAge": "0s", "maxBytes": bound}}))
    settings.EXTPROXY_CONFIG = str(config)
    out = io.StringIO()
    call_command("prune", stdout=out)
    assert "pruned 10 call(s)" in out.getvalue() and stored_bytes() <= bound


@pytest.mark.parametrize("value, expected", [(1024, 1024), ("512Mi", 512 * 2**20), ("10Gi", 10 * 2**30),
                                             ("2G", 2 * 10**9), ("0", 0)])
def test_it_reads_max_bytes_as_bytes_or_a_size(write_config, value, expected):
    path = write_config({"backends": [{"name": "p", "policy": "default"}], "policies": {"default": {}},
                         "retention": {"maxBytes": value, "auditMaxAge": "90d"}})
    retention = load_config(path).retention
    assert retention.max_bytes == expected and retention.audit_max_age_seconds == 90 * 86400


@pytest.mark.parametrize("value", ["ten", "-5", "5 GB", 1.5, -1])
def test_it_refuses_a_bad_max_bytes_naming_it(write_config, value):
    path = write_config({"backends": [{"name": "p", "policy": "default"}], "policies": {"default": {}},
                         "retention": {"maxBytes": value}})
    with pytest.raises(ConfigError, match="retention.maxBytes"):
        load_config(path)
