"""EXTPROXY_DB_STATEMENT_DEADLINE (recording/deadline.py) is read like the other settings: a bad
value stops the process at start with the setting's name, not a recorder without a bound."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def read_setting(tmp_path, value: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, EXTPROXY_DATA_DIR=str(tmp_path / "data"), EXTPROXY_DB_STATEMENT_DEADLINE=value,
               DJANGO_SETTINGS_MODULE="extproxy.settings")
    return subprocess.run([sys.executable, "-c", "from extproxy import settings; print(settings.EXTPROXY_DB_STATEMENT_DEADLINE)"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("value, seconds", [("", 60.0), ("0", 0.0), ("2.5", 2.5)])
def test_a_deadline_in_seconds_or_0_is_taken(tmp_path, value, seconds):
    done = read_setting(tmp_path, value)
    assert done.returncode == 0, done.stderr
    assert float(done.stdout.strip().splitlines()[-1]) == seconds


@pytest.mark.parametrize("value", ["-1", "soon", "nan", "inf"])
def test_a_deadline_that_is_no_number_of_seconds_is_refused_by_name(tmp_path, value):
    done = read_setting(tmp_path, value)
    assert done.returncode != 0
    assert f"ValueError: EXTPROXY_DB_STATEMENT_DEADLINE={value!r}" in done.stderr


@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_a_tcp_user_timeout_that_is_no_number_of_seconds_is_refused_by_name(tmp_path, value):
    """EXTPROXY_DB_TCP_USER_TIMEOUT likewise (read with a PostgreSQL DATABASE_URL: nothing connects
    on import). NaN passed its check (`nan < 0` is false) and reached libpq as a timeout."""
    env = dict(os.environ, EXTPROXY_DATA_DIR=str(tmp_path / "data"), EXTPROXY_DB_TCP_USER_TIMEOUT=value,
               DATABASE_URL="postgresql://nobody@127.0.0.1:1/nothing", DJANGO_SETTINGS_MODULE="extproxy.settings")
    done = subprocess.run([sys.executable, "-c", "from extproxy import settings; print(settings.DATABASES)"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0, done.stdout
    assert "ValueError: EXTPROXY_DB_TCP_USER_TIMEOUT=" in done.stderr
