"""The data directory and the SQLite database are private to extproxy's user at every start,
an existing, wider directory included (it holds the database with the API token keys in
plaintext). Settings loaded in a fresh process, as at a real start."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def start(data: Path, **more: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EXTPROXY_", "DJANGO_")) and k != "DATABASE_URL"}
    env.update(EXTPROXY_DATA_DIR=str(data), DJANGO_SETTINGS_MODULE="extproxy.settings", **more)
    return subprocess.run([sys.executable, "-c", "import django; django.setup()"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=True)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_an_existing_wide_data_directory_and_database_are_made_private(tmp_path):
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    data.chmod(0o755)
    for name in ("extproxy.sqlite3", "extproxy.sqlite3-wal"):
        (data / name).write_bytes(b"")
        (data / name).chmod(0o644)

    started = start(data)

    assert mode(data) == 0o700
    assert mode(data / "extproxy.sqlite3") == 0o600 and mode(data / "extproxy.sqlite3-wal") == 0o600
    assert "readable by others" in started.stderr
    assert "readable by others" not in start(data).stderr  # once private, nothing to say


def test_a_new_database_file_is_private_from_the_start(tmp_path):
    start(tmp_path / "new")
    assert mode(tmp_path / "new") == 0o700 and mode(tmp_path / "new" / "extproxy.sqlite3") == 0o600


def test_the_directory_is_private_with_postgresql_too_and_an_odd_sqlite_path_starts(tmp_path):
    """With DATABASE_URL the directory still holds the secret key, the signing key and the spool;
    an EXTPROXY_SQLITE_PATH in a directory that is not there fails at SQLite's open, not at start."""
    data = tmp_path / "pg"
    data.mkdir(mode=0o755)
    data.chmod(0o755)
    start(data, DATABASE_URL="postgresql://postgres@127.0.0.1:1/none")  # settings only: nothing connects
    assert mode(data) == 0o700
    start(tmp_path / "other", EXTPROXY_SQLITE_PATH=str(tmp_path / "missing" / "db.sqlite3"))
    start(tmp_path / "memory", EXTPROXY_SQLITE_PATH=":memory:")
    assert not (ROOT / ":memory:").exists()
