"""The key that signs export manifests: never empty or short (an empty key made every manifest
forgeable), created whole or not at all, and never created by checking a manifest."""
from __future__ import annotations

import io
import json
import os
import stat
from pathlib import Path

import pytest
from django.core.management.base import CommandError

from extproxy.exportproof import KEY_FILE
from tests.test_api_strict import traffic
from tests.test_export import auditor, fetch, refused, run_command

pytestmark = pytest.mark.django_db


@pytest.fixture
def data_dir(settings, tmp_path) -> Path:
    settings.DATA_DIR = tmp_path / "data"
    settings.EXTPROXY_EXPORT_KEY = ""
    return settings.DATA_DIR


def test_an_empty_key_file_stops_exports_before_their_first_byte(data_dir, tmp_path):
    traffic()
    data_dir.mkdir()
    (data_dir / KEY_FILE).write_bytes(b"")  # a crash between creating the file and writing it
    response = auditor().get("/api/export/?format=csv")
    assert response.status_code == 503
    assert "exports cannot be signed" in response.json()["detail"] and "fewer than 32 bytes" in response.json()["detail"]
    with pytest.raises(CommandError, match="fewer than 32 bytes"):
        run_command("export", "-o", str(tmp_path / "calls.ndjson"), "--no-progress")
    assert not (tmp_path / "calls.ndjson").exists()


def test_a_short_configured_key_is_refused(data_dir, settings):
    traffic()
    settings.EXTPROXY_EXPORT_KEY = "secret"
    response = auditor().get("/api/audit/export/?format=ndjson")
    assert response.status_code == 503 and "shorter than 32 bytes" in response.json()["detail"]


def test_a_new_key_is_whole_private_and_alone(data_dir):
    traffic()
    body, manifest = fetch(auditor(), "format=ndjson")
    key = data_dir / KEY_FILE
    assert len(key.read_bytes()) == 64 and stat.S_IMODE(os.stat(key).st_mode) == 0o600
    assert sorted(p.name for p in data_dir.iterdir()) == [KEY_FILE]  # no temporary file left
    from extproxy.exportproof import verify

    assert verify(io.BytesIO(body), manifest).complete


def test_verify_refuses_rather_than_creates_a_missing_key(data_dir, settings, tmp_path):
    traffic()
    settings.EXTPROXY_EXPORT_KEY = "k" * 40
    body, manifest = fetch(auditor(), "format=ndjson")
    (tmp_path / "calls.ndjson").write_bytes(body)
    (tmp_path / "m.json").write_text(json.dumps(manifest))
    settings.EXTPROXY_EXPORT_KEY = ""  # checked where the key is not configured
    message = refused(tmp_path / "calls.ndjson", tmp_path / "m.json")
    assert "cannot check the manifest's signature: no export key" in message
    assert not (data_dir / KEY_FILE).exists()
