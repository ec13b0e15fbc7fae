"""Exports that prove themselves: the records of every kind of call, the chain, the signed
manifest, verify_export on a 100,000-record file, every kind of tampering, gaps in the range,
the HTTP export streamed by a real server, and the command with its filters and progress."""
from __future__ import annotations

import io
import json
import zlib
from datetime import datetime, timedelta, timezone as tz
from pathlib import Path

import pytest
import requests
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from extproxy.export import CALL_COLUMNS
from extproxy.exportsigning import verify_here as verify
from extproxy.gaps import note_gap
from extproxy.models import AuditEvent, Call, Export
from tests.test_api_strict import traffic

pytestmark = pytest.mark.django_db


def token_client(role: str, username: str, address: str = "10.0.0.5") -> APIClient:
    """An API client with a new user of `role`, by token, from `address`."""
    user = User.objects.create_user(username, password="pw")
    user.groups.add(Group.objects.get(name=role))
    return APIClient(HTTP_AUTHORIZATION="Token " + Token.objects.create(user=user).key, REMOTE_ADDR=address)


def auditor() -> APIClient:
    return token_client("auditor", "audrey")


def fetch(client: APIClient, query: str) -> tuple[bytes, dict]:
    response = client.get("/api/export/?" + query)
    assert response.status_code == 200, response.content
    body = b"".join(response.streaming_content)
    manifest = client.get(f"/api/export/{response['X-Export-Id']}/manifest/")
    assert manifest.status_code == 200
    return body, manifest.json()


def check(body: bytes, manifest: dict):
    return verify(io.BytesIO(body), manifest)


def whole_up_to_now(body: bytes, manifest: dict) -> bool:
    """Unaltered, with no gap, nothing unindexed, not interrupted: all the range holds now. A
    range that ends now while the proxy serves is still open (calls in flight: stored_up_to.py)
    and said so; the tests' proxy serves from a spool of its own, which its recorder reports
    on as another replica's, so the export sees it as any replica's would."""
    return (check(body, manifest).ok and not manifest["gaps"] and not manifest["unindexed"]
            and not manifest["interrupted"] and (manifest["complete"] or manifest["still_open"] is not None))


def run_command(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


# --- what is exported ----------------------------------------------------------------------


def test_it_exports_one_record_per_decision_and_one_per_call_without_decisions():
    calls = traffic()
    body, manifest = fetch(auditor(), "format=ndjson")
    records = [json.loads(line) for line in body.splitlines()]
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
    by_call: dict[int, list[dict]] = {}
    for r in records:
        by_call.setdefault(r["call"], []).append(r)
    names = by_call[calls["names_filter"]]
    assert {(r["node"], r["result"]) for r in names} == {
        ("node-01", "passed"), ("node-02", "failed"), ("node-03", "passed"), ("node-04", "unresolvable"),
        ("node-05", "unresolvable")}
    failed = next(r for r in names if r["node"] == "node-02")
    assert failed["reason"].startswith("example.com/gpu: 2 of 4 devices") and failed["kind"] == "decision"
    assert (failed["namespace"], failed["verb"], failed["backend"], failed["outcome"]) == ("ml-team", "filter", "gpu", "ok")
    assert failed["pod"] and failed["pod_uid"] and failed["attempt"] and failed["latency_ms"] == 3.0
    assert len(by_call[calls["full_filter"]]) == 5  # full Node objects: the same five verdicts
    scored = {r["node"]: (r["score"], r["weighted_score"]) for r in by_call[calls["prioritize"]]}
    assert scored == {"node-01": (8, 160), "node-03": (3, 60)}
    [bind] = by_call[calls["bind"]]
    assert (bind["kind"], bind["node"], bind["outcome"], bind["result"]) == ("call", "node-01", "ok", None)
    [timeout] = by_call[calls["timeout"]]
    assert (timeout["kind"], timeout["outcome"], timeout["error"]) == ("call", "timeout", "timed out after 450 ms")
    combined = by_call[calls["combined"]]
    assert {r["backend"] for r in combined} == {"combined", "gpu"} and {r["call_backend"] for r in combined} == {"combined"}
    assert manifest["records"] == len(records) and manifest["calls"] == 7
    assert manifest["call_records"] == sum(1 for r in records if r["kind"] == "call")
    assert manifest["exported_by"] == "audrey" and manifest["exported_from"] == "10.0.0.5"
    assert check(body, manifest).complete


def test_it_exports_csv_with_the_same_records_and_guards_formulas():
    from extproxy.config import RecordingConfig, RedactionConfig
    from extproxy.recorder import Recorder
    from tests.test_api_strict import trace

    reply = {"NodeNames": ["node-01"], "FailedNodes": {"node-02": "=HYPERLINK(\"http://evil\")\nsecond line, \"quoted\""},
             "FailedAndUnresolvableNodes": {}, "Error": ""}
    request = {"Pod": {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}}, "NodeNames": ["node-01", "node-02"]}
    Recorder(RecordingConfig(), RedactionConfig()).write_batch(
        [trace("filter", json.dumps(request).encode(), json.dumps(reply).encode())])
    client = auditor()
    body, manifest = fetch(client, "format=csv")
    import csv

    rows = list(csv.DictReader(io.StringIO(body.decode())))
    assert list(rows[0]) == manifest["columns"] + ["hash"]
    bad = next(r for r in rows if r["node"] == "node-02")
    assert bad["reason"] == "'=HYPERLINK(\"http://evil\")\nsecond line, \"quoted\""
    assert check(body, manifest).complete  # a quoted newline is inside one record
    ndjson, _ = fetch(client, "format=ndjson")
    assert any(json.loads(l)["reason"] == reply["FailedNodes"]["node-02"] for l in ndjson.splitlines())


def test_it_applies_the_apis_filters_and_refuses_bad_ones():
    calls = traffic()
    client = auditor()
    body, manifest = fetch(client, "format=ndjson&node=node-02&verdict=failed")
    assert {json.loads(l)["call"] for l in body.splitlines()} == {calls[k] for k in ("names_filter", "full_filter", "combined")}
    assert manifest["filters"] == {"format": "ndjson", "node": "node-02", "verdict": "failed"}
    assert client.get("/api/export/?format=xml").json()["format"][0].startswith("must be one of")
    response = client.get("/api/export/?colour=red")
    assert response.status_code == 400 and response.json()["unknown_parameters"] == ["colour"]
    assert client.get("/api/export/?since=yesterday").status_code == 400


def test_it_picks_the_format_from_accept():
    traffic()
    response = auditor().get("/api/export/", HTTP_ACCEPT="text/csv")
    assert response["Content-Type"].startswith("text/csv")
    assert b"".join(response.streaming_content).startswith(b"seq,kind,call,")


def test_it_puts_exports_in_the_audit_trail_and_exports_the_trail_too():
    traffic()
    client = auditor()
    fetch(client, "format=csv&verb=bind")
    [event] = AuditEvent.objects.filter(action="export")
    assert (event.actor, event.source, event.target) == ("audrey", "10.0.0.5", "calls as csv")
    assert event.detail["filters"] == {"format": "csv", "verb": "bind"}
    response = client.get("/api/audit/export/?format=ndjson&action=export")
    body = b"".join(response.streaming_content)
    manifest = client.get(f"/api/export/{response['X-Export-Id']}/manifest/").json()
    assert [json.loads(l)["action"] for l in body.splitlines()] == ["export"]
    assert manifest["kind"] == "audit" and check(body, manifest).ok
    assert AuditEvent.objects.filter(action="audit-export").count() == 1


# Transactional, as served: closing the response mid-way ends the request, and Django closes a
# connection that is inside a test's transaction then (on PostgreSQL the next request failed).
@pytest.mark.django_db(transaction=True)
def test_it_has_no_manifest_for_an_export_that_did_not_finish():
    traffic()
    client = auditor()
    response = client.get("/api/export/?format=ndjson")
    export_id = response["X-Export-Id"]
    next(iter(response.streaming_content))  # the first chunk only: the client went away
    # As Django's test client does around a finished response: closing it fires request_finished,
    # whose close_old_connections would close the test's own connection (inside its transaction).
    from django.core.signals import request_finished
    from django.db import close_old_connections

    request_finished.disconnect(close_old_connections)
    try:
        response.close()
    finally:
        request_finished.connect(close_old_connections)
    assert client.get(f"/api/export/{export_id}/manifest/").status_code == 409
    assert client.get("/api/export/no-such-export/manifest/").status_code == 404


# --- proof -----------------------------------------------------------------------------------


def bulk_calls(count: int, decisions_each: int, start: datetime) -> None:
    """count calls of decisions_each decisions, written in bulk as the recorder stores them."""
    decisions = [{"node": f"node-{n:04d}", "backend": "gpu", "result": "failed" if n % 7 == 0 else "passed",
                  "reason": "no GPU" if n % 7 == 0 else None, "score": None, "weighted_score": None}
                 for n in range(decisions_each)]
    blob = zlib.compress(json.dumps(decisions).encode(), 1)
    Call.objects.bulk_create(
        [Call(verb="filter", backend="gpu", pod_namespace="ml", pod_name=f"pod-{i}", pod_uid=f"uid-{i}",
              attempt=f"a-{i}", started_at=start + timedelta(milliseconds=i), outcome="ok", http_status=200,
              finished_at=start + timedelta(milliseconds=i + 2), node_count=decisions_each, request_body=b"",
              response_body=b"", decisions_blob=blob) for i in range(count)],
        batch_size=500,
    )


def test_it_round_trips_100000_records_through_the_command_and_verify_export(tmp_path):
    start = datetime(2026, 12, 1, tzinfo=tz.utc)
    bulk_calls(1000, 100, start)
    out = tmp_path / "calls.ndjson"
    _, err = run_command("export", "-o", str(out), "--since", "2026-12-01T00:00:00Z")
    assert "1000/1000 calls (100%), 100000 records" in err
    manifest = json.loads(Path(f"{out}.manifest.json").read_text())
    assert manifest["records"] == 100_000 and manifest["first_time"] == "2026-12-01T00:00:00Z"
    assert manifest["exported_by"].startswith("cli") and manifest["complete"] is True
    said, _ = run_command("verify_export", str(out), f"{out}.manifest.json")
    assert "complete and unaltered: 100000 records" in said
    csv_out = tmp_path / "calls.csv"
    run_command("export", "--format", "csv", "-o", str(csv_out), "--no-progress")
    said, _ = run_command("verify_export", str(csv_out), f"{csv_out}.manifest.json")
    assert "complete and unaltered: 100000 records" in said


@pytest.fixture
def exported(tmp_path):
    bulk_calls(50, 4, datetime(2026, 12, 1, tzinfo=tz.utc))
    files = {}
    for fmt in ("ndjson", "csv"):
        out = tmp_path / f"calls.{fmt}"
        run_command("export", "--format", fmt, "-o", str(out), "--no-progress")
        files[fmt] = (out, Path(f"{out}.manifest.json"))
    return files


def refused(file: Path, manifest: Path) -> str:
    with pytest.raises(CommandError) as caught:
        run_command("verify_export", str(file), str(manifest))
    return str(caught.value)


@pytest.mark.parametrize("fmt", ["ndjson", "csv"])
def test_it_finds_one_changed_byte(exported, fmt):
    file, manifest = exported[fmt]
    data = bytearray(file.read_bytes())
    lines = data.split(b"\n")
    target = 80 if fmt == "ndjson" else 81  # record 80 (the CSV header is line 1)
    offset = sum(len(l) + 1 for l in lines[: target - 1]) + lines[target - 1].index(b"pod-") + 4
    data[offset] = ord("9") if data[offset] != ord("9") else ord("8")
    file.write_bytes(bytes(data))
    assert f"line {target}: record 80 was altered" in refused(file, manifest)


@pytest.mark.parametrize("fmt", ["ndjson", "csv"])
def test_it_finds_a_removed_line(exported, fmt):
    file, manifest = exported[fmt]
    lines = file.read_bytes().split(b"\n")
    header = 1 if fmt == "csv" else 0
    del lines[header + 41]  # record 42
    file.write_bytes(b"\n".join(lines))
    assert f"line {header + 42}: record 43 where record 42 belongs: record(s) 42..42 removed" in refused(file, manifest)


@pytest.mark.parametrize("fmt", ["ndjson", "csv"])
def test_it_finds_two_swapped_lines(exported, fmt):
    file, manifest = exported[fmt]
    lines = file.read_bytes().split(b"\n")
    header = 1 if fmt == "csv" else 0
    lines[header + 9], lines[header + 10] = lines[header + 10], lines[header + 9]  # records 10 and 11
    file.write_bytes(b"\n".join(lines))
    assert f"line {header + 10}: record 11 where record 10 belongs" in refused(file, manifest)


@pytest.mark.parametrize("fmt", ["ndjson", "csv"])
def test_it_finds_a_truncated_file(exported, fmt):
    file, manifest = exported[fmt]
    data = file.read_bytes()
    file.write_bytes(data[: len(data) - 30])  # in the middle of the last record
    assert "truncated" in refused(file, manifest)
    lines = data.split(b"\n")
    file.write_bytes(b"\n".join(lines[:-6]) + b"\n")  # whole records missing at the end
    message = refused(file, manifest)
    assert "the file has 195 records, the manifest says 200" in message and "truncated" in message


def test_it_finds_a_forged_manifest(exported):
    file, manifest_path = exported["ndjson"]
    manifest = json.loads(manifest_path.read_text())
    manifest["records"] = 150  # pretend a shorter export
    manifest_path.write_text(json.dumps(manifest))
    assert "signature does not match" in refused(file, manifest_path)
    manifest["records"] = 200
    manifest["signature"] = "0" * 64
    manifest_path.write_text(json.dumps(manifest))
    assert "signature does not match" in refused(file, manifest_path)


def test_it_finds_a_manifest_from_another_export(exported, tmp_path):
    file, _ = exported["ndjson"]
    other = tmp_path / "again.ndjson"
    run_command("export", "-o", str(other), "--no-progress")  # the same calls, another export
    assert other.read_bytes() != file.read_bytes()
    assert "line 1: the first record does not chain from this manifest's export" in refused(file, Path(f"{other}.manifest.json"))


def test_it_finds_added_bytes_outside_the_records(exported):
    file, manifest = exported["ndjson"]
    file.write_bytes(file.read_bytes() + b"\n")
    assert "line 201" in refused(file, manifest)


# --- gaps --------------------------------------------------------------------------------


def test_it_says_in_the_manifest_that_calls_were_dropped_in_the_range(tmp_path):
    start = datetime(2026, 12, 1, tzinfo=tz.utc)
    bulk_calls(20, 2, start)
    note_gap("queue-full", 17, start + timedelta(seconds=1), start + timedelta(seconds=2))
    note_gap("pruned", 5, start - timedelta(days=3), start - timedelta(days=2))  # before the range
    note_gap("spool-full", 2, start + timedelta(days=1.5), start + timedelta(days=1.5))  # after it
    out = tmp_path / "calls.ndjson"
    run_command("export", "-o", str(out), "--since", "2026-12-01T00:00:00Z", "--until", "2026-12-02T00:00:00Z",
                "--no-progress")
    manifest = json.loads(Path(f"{out}.manifest.json").read_text())
    assert manifest["complete"] is False
    assert [(g["reason"], g["calls"]) for g in manifest["gaps"]] == [("queue-full", 17)]
    message = refused(out, Path(f"{out}.manifest.json"))
    assert "unaltered" in message and "NOT complete" in message and "17 queue-full" in message
    everything = tmp_path / "all.ndjson"
    run_command("export", "-o", str(everything), "--no-progress")  # no range: every gap counts
    gaps = json.loads(Path(f"{everything}.manifest.json").read_text())["gaps"]
    assert sorted((g["reason"], g["calls"]) for g in gaps) == [("pruned", 5), ("queue-full", 17), ("spool-full", 2)]


# --- the command -------------------------------------------------------------------------


def test_it_refuses_bad_filters_and_stdout_without_a_manifest(tmp_path):
    with pytest.raises(CommandError, match="verb"):
        run_command("export", "--verb", "sort", "-o", str(tmp_path / "x"))
    with pytest.raises(CommandError, match="--manifest"):
        run_command("export")
    with pytest.raises(CommandError, match="not a filter of the audit trail: verb"):
        run_command("export", "--audit", "--verb", "bind", "-o", str(tmp_path / "x"))
    with pytest.raises(CommandError, match="needs node"):
        run_command("export", "--verdict", "failed", "-o", str(tmp_path / "x"))


def test_it_writes_to_stdout_with_the_manifest_beside(tmp_path, capsysbinary):
    bulk_calls(3, 2, datetime(2026, 12, 1, tzinfo=tz.utc))
    manifest = tmp_path / "m.json"
    call_command("export", "--manifest", str(manifest), "--no-progress", stderr=io.StringIO())
    body = capsysbinary.readouterr().out
    assert len(body.splitlines()) == 6
    assert check(body, json.loads(manifest.read_text())).complete
    assert Export.objects.get().manifest == json.loads(manifest.read_text())


# --- over a real server ------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_it_streams_an_export_from_the_asgi_server(proxy, write_config):
    server = proxy(None)
    bulk_calls(300, 50, datetime(2026, 12, 1, tzinfo=tz.utc))
    user = User.objects.create_user("audrey", password="pw")
    user.groups.add(Group.objects.get(name="auditor"))
    session = requests.Session()
    session.headers["Authorization"] = "Token " + Token.objects.create(user=user).key
    with session.get(f"{server.url}/api/export/?format=csv", stream=True, timeout=60) as response:
        assert response.status_code == 200 and response.headers["Content-Type"].startswith("text/csv")
        chunks = [c for c in response.iter_content(chunk_size=None)]
        export_id = response.headers["X-Export-Id"]
    assert len(chunks) > 1  # sent as it was made, not in one piece
    manifest = session.get(f"{server.url}/api/export/{export_id}/manifest/", timeout=10).json()
    assert manifest["records"] == 15_000
    assert check(b"".join(chunks), manifest).complete
    assert session.get(f"{server.url}/api/export/", headers={"Authorization": "Token wrong"}).status_code == 401


def test_it_verifies_an_empty_export(tmp_path):
    out = tmp_path / "none.csv"
    run_command("export", "--format", "csv", "-o", str(out), "--no-progress")
    assert out.read_bytes() == (",".join(CALL_COLUMNS) + ",hash\n").encode()  # the header alone
    said, _ = run_command("verify_export", str(out), f"{out}.manifest.json")
    assert "complete and unaltered: 0 records, an empty export" in said


def test_it_exports_with_a_time_offset_postgresql_would_refuse():
    traffic()
    body, manifest = fetch(auditor(), "format=ndjson&until=2955-04-13T20:02:02.3%2B20:50")
    assert manifest["range"]["until"] == "2955-04-12T23:12:02.300000Z" and check(body, manifest).ok
    assert "has not ended" in manifest["still_open"]["reason"]  # a range in the future is not complete
