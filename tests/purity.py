"""What a pure package imports, seen from outside: the modules a fresh interpreter loads for it,
and the imports written in its own files. Used by each pure package's test_purity.py."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Django and everything that talks to a network, a database, a process or a log.
IMPURE = frozenset({
    "django", "channels", "rest_framework", "asgiref", "socket", "ssl", "asyncio", "selectors",
    "aiohttp", "http", "urllib.request", "requests", "subprocess", "multiprocessing", "threading",
    "sqlite3", "psycopg", "psycopg2", "redis", "kubernetes", "logging", "tempfile", "shutil",
})


def loaded_modules(package: str) -> set[str]:
    """Every module a fresh interpreter holds after importing ``package`` and nothing else."""
    code = f"import json, sys; import {package}; print(json.dumps(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return set(json.loads(result.stdout))


def impure_modules(package: str) -> set[str]:
    """The IMPURE modules that importing ``package`` loads, beyond a bare interpreter's own."""
    baseline = loaded_modules("json")
    extra = loaded_modules(package) - baseline
    return {m for m in extra if m in IMPURE or m.split(".")[0] in IMPURE}


def written_imports(package: str) -> set[str]:
    """Top-level names of the modules the package's (or one module's) own files import (relative imports left out).

    Calls that run or load code by name (``open``, ``exec``, ``eval``, ``__import__``) count as
    imports of ``builtins.<name>``, so a test can refuse them too.
    """
    found: set[str] = set()
    where = ROOT / package.replace(".", "/")
    paths = [where.with_suffix(".py")] if where.with_suffix(".py").is_file() else where.rglob("*.py")
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                found.add((node.module or "").split(".")[0])
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                if node.func.id in ("open", "exec", "eval", "__import__"):
                    found.add(f"builtins.{node.func.id}")
    return found
