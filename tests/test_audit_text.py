"""Text in the audit trail that UTF-8 cannot carry: a replay request's lone surrogate is made
storable before it is stored, and an event stored with one earlier (SQLite kept them) no longer
ends an audit export mid-stream."""
from __future__ import annotations

import csv
import io
import json

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from extproxy.audit import audit
from extproxy.exportsigning import verify_here as verify
from extproxy.models import AuditEvent
from tests.test_api_strict import traffic
from tests.test_export import auditor, token_client

pytestmark = pytest.mark.django_db


def developer() -> APIClient:
    return token_client("developer", "dev", "10.0.0.6")


def audit_export(client: APIClient, fmt: str) -> tuple[bytes, dict]:
    response = client.get(f"/api/audit/export/?format={fmt}")
    assert response.status_code == 200
    body = b"".join(response.streaming_content)
    manifest = client.get(f"/api/export/{response['X-Export-Id']}/manifest/")
    assert manifest.status_code == 200, "the export did not finish"
    return body, manifest.json()


def test_a_replay_target_with_a_lone_surrogate_is_a_400_naming_it():
    calls = traffic()
    raw = ('{"call": %d, "target": {"kind": "configured", "note": "\\ud800"}}' % calls["bind"]).encode()
    response = developer().generic("POST", "/api/replays/", raw, content_type="application/json")
    assert response.status_code == 400 and "lone surrogate" in response.json()["target"]
    assert not AuditEvent.objects.filter(action="replay").exists()


def test_an_audit_detail_is_made_storable_before_it_is_stored():
    traffic()
    audit(None, "replay", target="replay 7\ud800", actor="dev", source="10.0.0.6",
          detail={"target": {"kind": "configured", "note": "\ud800 and \x00"}, "\ud801": 1})
    event = AuditEvent.objects.get(action="replay")
    assert event.target == "replay 7?" and event.detail == {"target": {"kind": "configured", "note": "? and \ufffd"}, "?": 1}
    client = auditor()
    assert client.get("/api/audit/").status_code == 200
    for fmt in ("ndjson", "csv"):
        body, manifest = audit_export(client, fmt)
        assert verify(io.BytesIO(body), manifest).complete


@pytest.mark.skipif(connection.vendor != "sqlite", reason="only SQLite ever stored a lone surrogate")
def test_an_event_stored_with_a_lone_surrogate_earlier_is_exported_whole():
    AuditEvent.objects.create(at=timezone.now(), actor="dev", action="replay", target="replay 1",
                              source="10.0.0.7", detail={"target": {"kind": "configured", "note": "\ud800"}})
    client = auditor()
    body, manifest = audit_export(client, "ndjson")
    assert verify(io.BytesIO(body), manifest).complete
    [record] = [json.loads(line) for line in body.splitlines() if b'"replay"' in line]
    assert record["detail"]["target"]["note"] == "?"
    body, manifest = audit_export(client, "csv")
    assert verify(io.BytesIO(body), manifest).complete
    [row] = [r for r in csv.DictReader(io.StringIO(body.decode(), newline="")) if r["action"] == "replay"]
    assert json.loads(row["detail"])["target"]["note"] == "?"


@pytest.mark.skipif(connection.vendor != "sqlite",
                    reason="PostgreSQL cannot store such a row (jsonb refuses \\ud800): only SQLite ever kept one")
def test_an_event_stored_with_a_lone_surrogate_earlier_is_listed_and_shown_with_a_question_mark():
    from tests.test_dashboard_pages import viewer

    with connection.cursor() as cursor:  # as SQLite kept it before audit() made texts storable
        cursor.execute("INSERT INTO extproxy_auditevent (at, actor, action, target, source, detail) "
                       "VALUES (%s, 'dev', 'replay', 'replay 1', '10.0.0.7', %s)",
                       [connection.ops.adapt_datetimefield_value(timezone.now()),
                        '{"target": {"kind": "configured", "note": "\\ud800 \\u00e9"}, "\\ud801": 2}'])
    [stored] = AuditEvent.objects.filter(action="replay")
    assert stored.detail["target"]["note"] == "\ud800 \u00e9"  # what a reader gets from the database
    client = auditor()
    listed = client.get("/api/audit/?action=replay")
    assert listed.status_code == 200  # was a 500 (UnicodeEncodeError in the JSON renderer)
    [event] = listed.json()["results"]
    assert event["detail"] == {"target": {"kind": "configured", "note": "? \u00e9"}, "?": 2}
    assert (event["actor"], event["target"], event["source"]) == ("dev", "replay 1", "10.0.0.7")
    assert client.get(f"/api/audit/{stored.pk}/").json()["detail"] == event["detail"]
    page = viewer().get("/audit/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "&quot;note&quot;: &quot;? \u00e9&quot;" in html and "\\ud800" not in html
