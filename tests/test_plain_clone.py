"""A plain clone runs the suite: `git clone` of the current commit into a temporary directory
with nothing beside it (no folder of the workplace's data), then a fast part of the suite there (pure protocol tests, the
fixtures through a real proxy and backend, bootstrap on a fresh database). The clone's own
code is what runs (checked), with this checkout's installed packages."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FAST_PART = ["tests/protocol", "tests/test_per_backend.py", "tests/test_bootstrap.py"]


def test_it_runs_a_fast_part_of_the_suite_from_a_plain_clone(tmp_path):
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if head.returncode != 0:
        pytest.fail(f"not a git checkout, cannot clone it: {head.stderr}")
    clone = tmp_path / "somewhere" / "extproxy"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(clone)], check=True, capture_output=True)
    subprocess.run(["git", "checkout", "-q", head.stdout.strip()], cwd=clone, check=True, capture_output=True)
    assert list(clone.parent.iterdir()) == [clone] and not (clone / "var").exists()  # nothing beside it to read

    env = {k: v for k, v in os.environ.items() if not k.startswith(("EXTPROXY_", "DJANGO_", "PYTEST_"))}
    env.pop("DATABASE_URL", None)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    where = subprocess.run([sys.executable, "-c", "import extproxy, tests; print(extproxy.__file__, tests.__file__)"],
                           cwd=clone, env=env, capture_output=True, text=True, timeout=60)
    assert where.stdout.split() == [str(clone / "extproxy" / "__init__.py"), str(clone / "tests" / "__init__.py")]

    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *FAST_PART],
                            cwd=clone, env=env, capture_output=True, text=True, timeout=600)

    tail = result.stdout[-3000:] + result.stderr[-3000:]
    assert result.returncode == 0, tail
    assert " passed" in result.stdout and " failed" not in result.stdout and "skipped" not in result.stdout, tail
