"""An audit export's manifest counts the audit events its retention pruned under `events` (no
call is missing), and a manifest made before that (its audit gaps counted under `calls`) still
verifies: through verify_export on the server and through exportproof.py on its own."""
from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management.base import CommandError
from django.utils import timezone

from extproxy import exportproof, exportsigning
from extproxy.audit import audit
from extproxy.gaps import note_gap
from tests.test_audit_gaps import export
from tests.test_export import auditor, run_command

pytestmark = pytest.mark.django_db


@pytest.fixture
def audit_export(tmp_path) -> tuple[Path, dict]:
    now = timezone.now()
    audit(None, "login", target="kept", actor="ann", source="10.0.0.9")
    note_gap("audit-pruned-age", 3, now - timedelta(days=500), now - timedelta(days=499))
    since = (now - timedelta(days=600)).strftime("%Y-%m-%dT%H:%M:%SZ")
    body, manifest = export(auditor(), f"/api/audit/export/?format=csv&since={since}")
    path = tmp_path / "audit.csv"
    path.write_bytes(body)
    return path, manifest


def verified(tmp_path: Path, file: Path, manifest: dict) -> tuple[str, str]:
    """What verify_export (refusing: not complete) and exportproof.py's main say of the file."""
    saved = tmp_path / "manifest.json"
    saved.write_text(json.dumps(manifest))
    with pytest.raises(CommandError) as refused:
        run_command("verify_export", str(file), str(saved))
    key = tmp_path / "server.pub"
    key.write_text(exportsigning.published()["pem"])
    return str(refused.value), _standalone(file, saved, key)


def _standalone(file: Path, manifest: Path, key: Path) -> str:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = exportproof.main([str(file), str(manifest), "--public-key", str(key)])
    assert status == 1  # unaltered, not complete
    return out.getvalue()


def test_an_audit_exports_gaps_count_events(audit_export, tmp_path):
    file, manifest = audit_export
    assert [(g["reason"], g["events"]) for g in manifest["gaps"]] == [("audit-pruned-age", 3)]
    assert "calls" not in manifest["gaps"][0] and "calls" not in manifest  # was: the gap's count under "calls"
    for said in verified(tmp_path, file, manifest):
        assert "NOT complete (events missing from the records: 3 audit-pruned-age)" in said, said


def test_an_audit_manifest_made_before_it_said_events_still_verifies(audit_export, tmp_path):
    file, manifest = audit_export
    old = {k: v for k, v in manifest.items() if k not in ("signature", "signed_with")}
    old["gaps"] = [{("calls" if k == "events" else k): v for k, v in g.items()} for g in manifest["gaps"]]
    old = exportsigning.sign(old)  # as the server signed it then: the same key, the old key name
    for said in verified(tmp_path, file, old):
        assert "NOT complete (events missing from the records: 3 audit-pruned-age)" in said, said


def test_a_calls_exports_gaps_still_count_calls(tmp_path):
    now = timezone.now()
    note_gap("queue-full", 4, now - timedelta(minutes=5), now - timedelta(minutes=4))
    since = (now - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    body, manifest = export(auditor(), f"/api/export/?format=ndjson&since={since}")
    assert [(g["reason"], g["calls"]) for g in manifest["gaps"]] == [("queue-full", 4)]
    file = tmp_path / "calls.ndjson"
    file.write_bytes(body)
    for said in verified(tmp_path, file, manifest):
        assert "calls missing from the records: 4 queue-full" in said, said
