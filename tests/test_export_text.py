"""What an outsider's text becomes in an export: a line break inside a CSV field, a formula at
the start of any field (a pod's or namespace's name too) or of any line of it, NUL. Calls are
stored by the recorder from the captured scheduler's bodies, exported through the API."""
from __future__ import annotations

import csv
import io
import json

import pytest

from extproxy.config import RecordingConfig, RedactionConfig
from extproxy.recorder import Recorder
from tests.conftest import fixture_json
from tests.test_api_strict import trace
from tests.test_export import auditor, check, fetch

pytestmark = pytest.mark.django_db


def store(pod: dict[str, str], reply: dict, *, status: int = 200, raw_reply: bytes | None = None) -> None:
    request = fixture_json("filter-request.nodecache-true.json")
    request["Pod"]["metadata"].update(pod)
    body = raw_reply if raw_reply is not None else json.dumps(reply).encode()
    Recorder(RecordingConfig(), RedactionConfig()).write_batch([trace("filter", json.dumps(request).encode(), body,
                                                                      status=status)])


def csv_rows(body: bytes) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(body.decode(), newline="")))


def test_a_line_break_in_a_field_stays_inside_one_quoted_record_and_each_line_is_guarded():
    reply = {"NodeNames": ["node-01"], "Error": "",
             "FailedNodes": {"node-02": "no free GPU\n=cmd|' /C calc'!A0"}, "FailedAndUnresolvableNodes": {}}
    store({}, reply)
    store({}, {}, status=503, raw_reply=b"upstream connect error\r\nreset reason: overflow\r@SUM(1+1)\n")
    client = auditor()
    body, manifest = fetch(client, "format=csv")
    verdict = check(body, manifest)
    assert verdict.complete, verdict.message  # was "line 3: not a record"
    rows = csv_rows(body)
    assert len(rows) == manifest["records"]
    failed = next(r for r in rows if r["node"] == "node-02")
    assert failed["reason"] == "no free GPU\n'=cmd|' /C calc'!A0"
    [broken] = [r for r in rows if r["http_status"] == "503"]
    assert "\r\n" in broken["error"] and "\r'@SUM(1+1)" in broken["error"]
    # no physical line of the file starts a formula, however a spreadsheet splits it
    assert not [line for line in body.splitlines() if line[:1] in b"=+-@"]
    ndjson, _ = fetch(client, "format=ndjson")
    assert any(json.loads(l)["reason"] == "no free GPU\n=cmd|' /C calc'!A0" for l in ndjson.splitlines())


def test_every_text_column_is_guarded_names_included():
    pod = {"name": "=HYPERLINK(\"http://evil/\",\"x\")", "namespace": "@SUM(1+1)", "uid": "+1"}
    store(pod, {"NodeNames": ["node-01"], "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": ""})
    client = auditor()
    body, manifest = fetch(client, "format=csv")
    assert check(body, manifest).complete
    row = csv_rows(body)[0]
    assert (row["pod"], row["namespace"], row["pod_uid"]) == ("'" + pod["name"], "'@SUM(1+1)", "'+1")
    record = json.loads(fetch(client, "format=ndjson")[0].splitlines()[0])
    assert (record["pod"], record["namespace"]) == (pod["name"], "@SUM(1+1)")


def test_nul_in_a_backends_text_is_written_as_a_replacement_character_in_csv():
    store({}, {}, raw_reply=b'{"NodeNames":[],"FailedNodes":{"node-02":"no room\\u0000\\r\\n=1+1"},"Error":""}')
    body, manifest = fetch(auditor(), "format=csv")
    assert b"\x00" not in body and check(body, manifest).complete
    row = next(r for r in csv_rows(body) if r["node"] == "node-02")
    assert row["reason"] == "no room\ufffd\r\n'=1+1"
