"""The audit trail's retention leaves a gap, as the calls' does: an audit export of a range
whose events were pruned says it is not complete (and a calls export does not count them), and
wherever gaps are listed (/api/gaps/, the audit page) such a gap says it is audit events that
are missing, not calls."""
from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest
from django.utils import timezone

from extproxy.audit import audit
from extproxy.config import RetentionConfig
from extproxy.exportsigning import verify_here as verify
from extproxy.gaps import note_gap
from extproxy.models import AuditEvent, RecordingGap
from extproxy.recording.retention import prune
from tests.test_export import auditor

pytestmark = pytest.mark.django_db


def export(client, path: str) -> tuple[bytes, dict]:
    response = client.get(path)
    assert response.status_code == 200, response.content
    body = b"".join(response.streaming_content)
    return body, client.get(f"/api/export/{response['X-Export-Id']}/manifest/").json()


def test_pruned_audit_events_are_a_gap_in_audit_exports_of_their_range():
    now = timezone.now()
    for day in (600, 550, 500, 10):
        audit(None, "login", target=f"day {day}", actor="ann", source="10.0.0.9")
        AuditEvent.objects.filter(target=f"day {day}").update(at=now - timedelta(days=day))
    assert prune(RetentionConfig(max_age_seconds=0)).audit_events == 3  # the default auditMaxAge: 400 days
    gaps = RecordingGap.objects.all()  # one row per hour the pruned events were in
    assert {g.reason for g in gaps} == {"audit-pruned-age"} and sum(g.calls for g in gaps) == 3
    client = auditor()
    old = (now - timedelta(days=700)).strftime("%Y-%m-%dT%H:%M:%SZ")
    body, manifest = export(client, f"/api/audit/export/?format=ndjson&since={old}")
    assert manifest["complete"] is False  # was true: retention's deletions were not reported
    assert [(g["reason"], g["events"]) for g in manifest["gaps"]] == [("audit-pruned-age", 3)]  # was "calls"
    verdict = verify(io.BytesIO(body), manifest)
    assert verdict.ok and not verdict.complete and "3 audit-pruned-age" in verdict.message
    assert "events missing" in verdict.message
    recent = (now - timedelta(days=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    _, manifest = export(client, f"/api/audit/export/?format=csv&since={recent}")
    assert manifest["complete"] is True and manifest["gaps"] == []
    _, manifest = export(client, f"/api/export/?format=ndjson&since={old}")
    assert manifest["gaps"] == [] and manifest["complete"] is True  # not a gap in the calls
    listed = json.loads(client.get("/api/gaps/").content)["results"]  # one row per hour bucket
    assert {(g["reason"], g["kind"], g["calls"]) for g in listed} == {("audit-pruned-age", "audit", None)}
    assert sum(g["events"] for g in listed) == 3


def test_each_gap_says_whether_calls_or_audit_events_are_missing():
    from tests.test_dashboard_pages import viewer

    now = timezone.now()
    for day in (600, 550, 500):
        audit(None, "login", target=f"day {day}", actor="ann", source="10.0.0.9")
        AuditEvent.objects.filter(target=f"day {day}").update(at=now - timedelta(days=day))
    prune(RetentionConfig(max_age_seconds=0))
    note_gap("queue-full", 17, now - timedelta(days=501), now - timedelta(days=501))
    client = auditor()
    rows = client.get("/api/gaps/").json()["results"]
    said = {(g["reason"], g["kind"], g["calls"], g["events"]) for g in rows}
    assert said == {("audit-pruned-age", "audit", None, 1), ("queue-full", "calls", 17, None)}  # was: calls 1
    assert [g["reason"] for g in client.get("/api/gaps/?kind=calls").json()["results"]] == ["queue-full"]
    assert {g["reason"] for g in client.get("/api/gaps/?kind=audit").json()["results"]} == {"audit-pruned-age"}
    response = client.get("/api/gaps/?kind=lost")
    assert response.status_code == 400 and "kind" in response.json()
    page = viewer().get("/audit/").content.decode()
    table = page[page.index('<table class="gaps">'):]
    assert '<tr class="gap-audit">' in table and "<td>audit-pruned-age</td><td>1 audit event</td>" in table
    assert '<tr class="gap-calls">' in table and "<td>queue-full</td><td>17 calls</td>" in table
