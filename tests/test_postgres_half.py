"""tests/postgres_half.txt (the tests CI runs again on PostgreSQL and Redis) names only files
that are there: a renamed or removed test file must not silently leave that run."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def selection() -> list[str]:
    lines = (ROOT / "tests" / "postgres_half.txt").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def chosen() -> set[Path]:
    """The files the selection's lines name, globs expanded as the shell in .ci/run expands them."""
    return {path for line in selection() for path in ROOT.glob(line)}


def test_every_line_of_the_postgres_half_names_a_test_file():
    lines = selection()
    assert lines
    for line in lines:
        found = sorted(ROOT.glob(line))
        assert found, f"tests/postgres_half.txt: {line!r} names no file"
        assert all(path.name.startswith("test_") and path.suffix == ".py" for path in found), line


def test_the_postgres_half_names_the_tests_of_the_database_and_not_the_hot_path():
    names = {path.name for path in chosen()}
    assert {"test_production_postgres.py", "test_database_outage.py", "test_export.py", "test_recorder.py",
            "test_live_redis.py"} <= names
    assert not {"test_relay.py", "test_policies.py", "test_live_browser.py"} & names


def test_every_test_that_runs_only_on_postgresql_is_in_the_postgres_half():
    # They skip on SQLite (make test): outside the list, no run of CI would ever run them.
    marks = ('startswith("postgres")', "run by CI on PostgreSQL")
    only_there = {path for path in (ROOT / "tests").glob("test_*.py")
                  if path.name != Path(__file__).name and any(mark in path.read_text() for mark in marks)}
    assert len(only_there) >= 10  # the search still finds them
    assert sorted(p.name for p in only_there - chosen()) == []
