"""An export whose records fail mid-stream says so inside its file: the server, its own
generator failing (a real database error while reading a chunk of calls), ends the file with a
last line no record can be (JSON Lines: an object without seq or hash; CSV: a row whose first
cell is `interrupted`) saying after how many records and why, without the error's text; the
manifest says `interrupted`, and verify_export reports the file as interrupted, not complete."""
from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timezone as tz

import pytest
import requests
from django.contrib.auth.models import Group, User
from django.core.management.base import CommandError
from django.db import DatabaseError, connection
from rest_framework.authtoken.models import Token

from extproxy import export, exportproof
from tests.test_export import bulk_calls, check, run_command

READS_BEFORE_FAILING = 3  # chunks of calls read before the database fails
SECRET_SQL = "no_such_column_0b5e"  # in the failing statement: must not reach the file


@pytest.fixture
def failing_database(monkeypatch):
    """The export's per-chunk query (its combined calls' parts) runs a statement the database
    refuses once READS_BEFORE_FAILING chunks of calls were read: a real DatabaseError, raised
    by the driver inside the server's own generator, mid-stream."""
    real = export._failed_parts
    reads = []

    def failed_parts(Call, rows):
        reads.append(len(rows))
        if len(reads) > READS_BEFORE_FAILING:
            with connection.cursor() as cursor:
                cursor.execute(f"SELECT {SECRET_SQL} FROM extproxy_call")
        return real(Call, rows)

    monkeypatch.setattr(export, "CALLS_PER_READ", 10)
    monkeypatch.setattr(export, "CHUNK_BYTES", 1024)  # chunks go out before the failure
    monkeypatch.setattr(export, "_failed_parts", failed_parts)
    return reads


def auditor_session() -> requests.Session:
    user = User.objects.create_user("audrey", password="pw")
    user.groups.add(Group.objects.get(name="auditor"))
    session = requests.Session()
    session.headers["Authorization"] = "Token " + Token.objects.create(user=user).key
    return session


def served(server, session: requests.Session, fmt: str,
           broken_off: bool = True) -> tuple[bytes, list[bytes], requests.Response]:
    """The file as it arrived, its chunks, and its manifest; the transfer must be broken off
    (the connection closed before the stream's end) exactly when the export was interrupted."""
    chunks: list[bytes] = []
    with session.get(f"{server.url}/api/export/?format={fmt}", stream=True, timeout=60) as response:
        assert response.status_code == 200
        try:
            for chunk in response.iter_content(chunk_size=None):
                chunks.append(chunk)
        except requests.exceptions.ChunkedEncodingError:
            assert broken_off, "the transfer of an export that was not interrupted broke off"
        else:
            assert not broken_off, "an interrupted export's transfer ended as if it were whole"
    manifest = session.get(f"{server.url}/api/export/{response.headers['X-Export-Id']}/manifest/", timeout=10)
    assert manifest.status_code == 200, manifest.text  # was 409: no manifest for an interrupted export
    return b"".join(chunks), chunks, manifest


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("fmt", ["ndjson", "csv"])
def test_a_database_error_mid_stream_ends_the_file_with_a_mark_and_the_manifest_says_interrupted(
        proxy, failing_database, fmt, tmp_path):
    server = proxy(None)
    bulk_calls(100, 2, datetime(2026, 12, 1, tzinfo=tz.utc))  # 100 calls, 200 records
    body, chunks, response = served(server, auditor_session(), fmt)
    manifest = response.json()
    assert len(chunks) > 1 and len(failing_database) == READS_BEFORE_FAILING + 1  # failed mid-stream

    lines = body.splitlines()
    last = lines[-1]
    written = 2 * 10 * READS_BEFORE_FAILING  # the records of the chunks read, every one of them
    reason = "the database failed while the records were read"
    if fmt == "ndjson":
        mark = json.loads(last)
        assert mark["interrupted"] is True and mark["after_records"] == written
        assert mark["reason"].startswith(reason) and "seq" not in mark and "hash" not in mark
        assert [json.loads(line)["seq"] for line in lines[:-1]] == list(range(1, written + 1))
    else:
        rows = list(csv.reader(io.StringIO(body.decode())))
        assert rows[-1][:2] == ["interrupted", str(written)] and rows[-1][2].startswith(reason)
        assert [int(r[0]) for r in rows[1:-1]] == list(range(1, written + 1))
    assert SECRET_SQL.encode() not in body and b"Traceback" not in body and b"SELECT" not in body

    assert manifest["interrupted"]["after_records"] == written and manifest["complete"] is False
    assert manifest["records"] == written
    verdict = check(body, manifest)
    assert verdict.ok and not verdict.complete
    assert f"the export was INTERRUPTED after {written} records: {reason}" in verdict.message

    file, saved = tmp_path / f"calls.{fmt}", tmp_path / "manifest.json"
    file.write_bytes(body)
    saved.write_text(json.dumps(manifest))
    with pytest.raises(CommandError, match="INTERRUPTED after"):
        run_command("verify_export", str(file), str(saved))
    # The mark cannot be dropped to pass the file off as a shorter export, nor a record follow it.
    file.write_bytes(b"\n".join(lines[:-1]) + b"\n")
    with pytest.raises(CommandError, match="SHA-256 differs"):
        run_command("verify_export", str(file), str(saved))
    file.write_bytes(body + lines[1] + b"\n")
    with pytest.raises(CommandError, match="after the mark"):
        run_command("verify_export", str(file), str(saved))


@pytest.mark.django_db(transaction=True)
def test_an_export_the_database_does_not_fail_has_no_mark(proxy, failing_database):
    server = proxy(None)
    bulk_calls(30, 2, datetime(2026, 12, 1, tzinfo=tz.utc))  # 3 reads: the failure never comes
    body, _, response = served(server, auditor_session(), "ndjson", broken_off=False)
    manifest = response.json()
    assert manifest["interrupted"] is None and manifest["complete"] is True and manifest["records"] == 60
    assert check(body, manifest).complete and b"interrupted" not in body
