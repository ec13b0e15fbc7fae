"""The layout holds: no import cycle among extproxy's and the dashboard's modules, and no module
of either grows past its bound."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "extproxy"
PACKAGES = (PACKAGE, ROOT / "dashboard")
LINE_BOUND = 400  # beyond it, a module says why in its docstring ("Over 400 lines because ...")
# Modules another change is splitting right now; each leaves this list when it is split.
BEING_SPLIT: dict[str, str] = {}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Modules named by every import in ``path`` (function-level and TYPE_CHECKING ones too: a
    cycle hidden there is still two modules that cannot be understood one without the other),
    relative imports resolved to package names."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def import_graph() -> dict[str, set[str]]:
    paths = [p for package in PACKAGES for p in package.rglob("*.py") if "migrations" not in p.parts]
    modules = {module_name(p): p for p in paths if str(p.relative_to(ROOT)) not in BEING_SPLIT}
    return {name: {m for m in imports(path) if m in modules and m != name} for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), each as a sorted list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def test_it_finds_a_cycle_when_there_is_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_it_has_no_import_cycle():
    graph = import_graph()
    assert "extproxy.engine" in graph and "extproxy.combined" in graph["extproxy.engine"]
    assert "dashboard.story" in graph["dashboard.queries"] and "dashboard.queries" in graph["dashboard.feed"]
    assert cycles(graph) == []


def test_it_keeps_modules_small_or_says_why():
    too_long = []
    for path in (p for package in PACKAGES for p in package.rglob("*.py")):
        if "migrations" in path.parts or len(path.read_text().splitlines()) <= LINE_BOUND:
            continue
        if str(path.relative_to(ROOT)) in BEING_SPLIT:
            continue
        docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
        if f"Over {LINE_BOUND} lines because" not in docstring:
            too_long.append(str(path.relative_to(ROOT)))
    assert too_long == []


def test_it_says_what_each_core_module_may_import():
    silent = []
    for package in ("protocol", "semantics", "config"):
        for path in (PACKAGE / package).glob("*.py"):
            if "May import" not in (ast.get_docstring(ast.parse(path.read_text())) or ""):
                silent.append(str(path.relative_to(ROOT)))
    assert silent == []


def test_no_code_reads_a_folder_beside_the_clone():
    """A user's clone has nothing beside it: tests and benches take their data from tests/fixtures."""
    import re

    beside = re.compile(r"""\.\./shared|parent\s*/\s*["']shared""")
    offenders = [
        str(path.relative_to(ROOT))
        for folder in ("extproxy", "dashboard", "tests", "bench")
        for path in (ROOT / folder).rglob("*.py")
        if path.name != "test_plain_clone.py" and beside.search(path.read_text())
    ]
    assert offenders == []
