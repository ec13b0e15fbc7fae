"""The type hints are checked: mypy (configured by mypy.ini) passes on the code base."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_it_type_checks() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, f"mypy failed:\n{result.stdout}{result.stderr}"
