"""The package's shape, as docs/architecture.md draws it: no import circle, the client and the
programs never import the daemon, the model never imports dbus-fast, modules stay readable in
one sitting, and nothing cites notes kept outside the repository."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "hostagent"
MAX_LINES = 400
# The model and the pure decisions: no bus, no I/O edges.
MODEL = {
    "hostagent.session",
    "hostagent.activity",
    "hostagent.recovery",
    "hostagent.launch",
    "hostagent.options",
    "hostagent.config",
    "hostagent.presets",
    "hostagent.errors",
    "hostagent.daemon.registry",
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every module path imports, TYPE_CHECKING and function-local imports included."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}
GRAPH = {m: {i for i in imports(p) if i in MODULES and i != m} for m, p in MODULES.items()}


def reach(start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in GRAPH[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def test_no_import_circle() -> None:
    circles = sorted(m for m in MODULES if m in reach(m))
    assert circles == []


@pytest.mark.parametrize("side", ["hostagent.client", "hostagent.cli"])
def test_the_clients_never_import_the_daemon(side: str) -> None:
    for module in (m for m in MODULES if m.startswith(side)):
        daemon = sorted(m for m in reach(module) if m.startswith("hostagent.daemon"))
        assert daemon == [], f"{module} reaches {daemon}"


def test_the_model_never_imports_dbus_fast() -> None:
    for module in sorted(MODEL):
        outside = {i for m in reach(module) | {module} for i in imports(MODULES[m])}
        assert not any(i.startswith("dbus_fast") for i in outside), module


def test_modules_are_readable_in_one_sitting() -> None:
    long = {m: n for m, p in MODULES.items() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_nothing_cites_notes_outside_the_repository() -> None:
    # Spelled in pieces, so that this file does not match what it looks for.
    notes = ["DESIGN" + " §", "STYLE" + " rule", "research" + "/agent-clis", r"\.\./" + "shared/"]
    pattern = re.compile("|".join(notes))
    files = [
        p
        for d in ("hostagent", "tests", "bench", "dev", "docs", "man", "packaging", "units")
        for p in (ROOT / d).rglob("*")
        if p.is_file() and p.suffix in ("", ".py", ".md", ".yaml", ".1", ".5", ".8", ".spec")
    ] + [ROOT / "README.md"]
    citing = sorted(str(p.relative_to(ROOT)) for p in files if pattern.search(p.read_text()))
    assert citing == []
