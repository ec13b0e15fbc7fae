"""The key that signs export manifests, where it cannot be used: exports are refused before
their first byte, by the API and the command alike, saying why (the signing key's own tests:
test_export_signing.py)."""
from __future__ import annotations

from pathlib import Path

import pytest
from django.core.management.base import CommandError

from extproxy.exportsigning import KEY_FILE
from tests.test_api_strict import traffic
from tests.test_export import auditor, run_command

pytestmark = pytest.mark.django_db


@pytest.fixture
def data_dir(settings, tmp_path) -> Path:
    settings.DATA_DIR = tmp_path / "data"
    settings.EXTPROXY_EXPORT_SIGNING_KEY = ""
    return settings.DATA_DIR


def test_an_empty_key_file_stops_exports_before_their_first_byte(data_dir, tmp_path):
    traffic()
    data_dir.mkdir()
    (data_dir / KEY_FILE).write_bytes(b"")  # a crash between creating the file and writing it
    response = auditor().get("/api/export/?format=csv")
    assert response.status_code == 503
    assert "signing key" in response.json()["detail"] and "not a PEM private key" in response.json()["detail"]
    with pytest.raises(CommandError, match="not a PEM private key"):
        run_command("export", "-o", str(tmp_path / "calls.ndjson"), "--no-progress")
    assert not (tmp_path / "calls.ndjson").exists()
    assert (data_dir / KEY_FILE).read_bytes() == b""  # not replaced: manifests it signed would no longer verify


def test_a_configured_key_that_is_not_one_is_refused(data_dir, settings):
    traffic()
    settings.EXTPROXY_EXPORT_SIGNING_KEY = "secret"
    response = auditor().get("/api/audit/export/?format=ndjson")
    assert response.status_code == 503 and "EXTPROXY_EXPORT_SIGNING_KEY: not a PEM private key" in response.json()["detail"]


def test_a_data_directory_that_cannot_be_written_refuses_exports_with_the_reason(settings, tmp_path):
    traffic()
    settings.DATA_DIR = Path("/proc/self/extproxy-data")  # no one creates a directory there, root neither
    settings.EXTPROXY_EXPORT_SIGNING_KEY = ""
    response = auditor().get("/api/export/?format=csv")
    assert response.status_code == 503 and "cannot be written" in response.json()["detail"]
