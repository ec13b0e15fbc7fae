"""verify_export on a CSV whose quotes do not balance: the verdict names the line where the
open field starts, whether the file ends inside it or it runs past the bound on a record's
size, and reading it stays linear (lines gathered, joined once)."""
from __future__ import annotations

import json
import re
from datetime import datetime, timezone as tz
from pathlib import Path

import pytest
from django.core.management.base import CommandError

from extproxy import exportproof, exportsigning
from tests.test_export import bulk_calls, refused, run_command

pytestmark = pytest.mark.django_db


@pytest.fixture
def csv_export(tmp_path) -> tuple[Path, Path]:
    bulk_calls(300, 10, datetime(2026, 12, 1, tzinfo=tz.utc))  # 3,000 records
    out = tmp_path / "calls.csv"
    run_command("export", "--format", "csv", "-o", str(out), "--no-progress")
    return out, Path(f"{out}.manifest.json")


def with_stray_quote(file: Path, line: int) -> None:
    lines = file.read_bytes().splitlines(keepends=True)
    lines[line - 1] = b'"' + lines[line - 1]
    file.write_bytes(b"".join(lines))


def test_a_stray_quote_is_named_with_its_line(csv_export):
    file, manifest = csv_export
    with_stray_quote(file, 7)
    message = refused(file, manifest)
    assert "unbalanced quote at line 7" in message and "still open at the end of the file" in message
    assert "cut short (the file is truncated)" not in message  # what it said before


def test_a_record_past_the_size_bound_is_refused_at_its_first_line(csv_export, monkeypatch):
    file, manifest = csv_export
    monkeypatch.setattr(exportproof, "MAX_RECORD_BYTES", 64 * 1024)  # the file is ~600 KiB
    with_stray_quote(file, 3)
    message = refused(file, manifest)
    assert "unbalanced quote at line 3" in message and "runs past" in message
    with file.open("rb") as handle:
        verdict = exportproof.verify(handle, json.loads(manifest.read_text()), exportsigning.trust())
    assert (verdict.ok, verdict.line) == (False, 3)


def test_the_manifest_is_found_beside_the_export_when_not_named(csv_export, tmp_path):
    """`export -o FILE` writes FILE.manifest.json; both checks look there when given FILE alone."""
    file, manifest = csv_export
    said, _ = run_command("verify_export", str(file))
    assert said.startswith(f"{file}: ") and "3000 records" in said.replace(",", ""), said
    key = tmp_path / "server.pub"
    key.write_text(exportsigning.published()["pem"])
    assert exportproof.main([str(file), "--public-key", str(key)]) == 0

    with_stray_quote(file, 5)  # the file is what is checked: a change is still found
    with pytest.raises(CommandError, match="unbalanced quote at line 5"):
        run_command("verify_export", str(file))
    assert exportproof.main([str(file), "--public-key", str(key)]) == 1
    manifest.unlink()  # and a missing manifest is named where it was looked for
    with pytest.raises(CommandError, match=re.escape(f"{manifest}: not a readable manifest")):
        run_command("verify_export", str(file))
