"""The import direction of docs/ARCHITECTURE.md, read from the source: no layer reaches past the
one it may use, and nothing imports the Celery tasks (services send them by name)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def imports_of(package: str) -> dict[str, set[str]]:
    """Every module each file of ``package`` imports (function-local imports included)."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
        found[str(path.relative_to(ROOT))] = names
    return found


def offenders(package: str, forbidden: tuple[str, ...]) -> list[str]:
    return [
        f"{path} imports {name}"
        for path, names in imports_of(package).items()
        for name in sorted(names)
        if name.startswith(forbidden)
    ]


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("orchestrator", ("webui", "harness", "tests", "bench")),
        ("orchestrator/engine", ("django", "orchestrator.models", "orchestrator.providers")),
        ("webui", ("orchestrator.engine", "orchestrator.tasks")),
        ("bench", ("tests",)),
        ("orchestrator/services", ("orchestrator.tasks",)),
    ],
)
def test_layers_import_only_what_they_may(package, forbidden):
    assert offenders(package, forbidden) == []
