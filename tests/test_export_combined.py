"""The combined form in an export: a backend's own timeout or error, hidden behind the combined
answer, is a record of its own (kind backend-call), in both formats."""
from __future__ import annotations

import csv
import io
import json
import time

import pytest

from extproxy.config import RecordingConfig, RedactionConfig
from extproxy.recorder import Recorder
from tests.conftest import fixture_bytes
from tests.test_api_strict import trace
from tests.test_export import auditor, check, fetch

pytestmark = pytest.mark.django_db


def test_a_combined_calls_failed_backend_parts_are_records():
    now = float(int(time.time()))
    request = fixture_bytes("filter-request.nodecache-true.json")
    ok = trace("filter", request, fixture_bytes("filter-result.nodecache-true.json"), at=now - 5)
    slow = trace("filter", request, b"", status=None, timed_out=True, transport_error="timed out after 450 ms",
                 at=now - 5, duration=0.45, backend="slow")
    broken = trace("filter", request, b"upstream reset", status=503, at=now - 5, backend="flaky")
    combined = trace("filter", request, fixture_bytes("filter-result.nodecache-true.json"), at=now - 5,
                     duration=0.46, backend="combined", form="combined", backend_calls=[ok, slow, broken])
    [stored] = Recorder(RecordingConfig(), RedactionConfig()).write_batch([combined])
    client = auditor()
    body, manifest = fetch(client, "format=ndjson")
    records = [json.loads(line) for line in body.splitlines()]
    parts = [r for r in records if r["kind"] == "backend-call"]
    assert [(r["call"], r["call_backend"], r["backend"], r["outcome"]) for r in parts] == [
        (stored["id"], "combined", "slow", "timeout"), (stored["id"], "combined", "flaky", "error")]
    assert parts[0]["error"] == "timed out after 450 ms" and parts[0]["latency_ms"] == 450.0
    assert parts[1]["http_status"] == 503 and parts[0]["pod"] == records[0]["pod"]
    assert manifest["call_records"] == 2 and manifest["records"] == len(records) and check(body, manifest).complete
    body, manifest = fetch(client, "format=csv")
    rows = [r for r in csv.DictReader(io.StringIO(body.decode(), newline="")) if r["kind"] == "backend-call"]
    assert [r["backend"] for r in rows] == ["slow", "flaky"] and check(body, manifest).complete
