"""The web layer's own rules, read from the source: an API view module imports no other (what
they share is in the API's common modules), and nothing in ``webui`` reads the database itself
(reads are selectors, orchestrator/selectors)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
API = ROOT / "webui" / "api"
# What the API's views share: none of these defines a view.
API_COMMON = {
    "authentication",
    "errors",
    "inputs",
    "lookups",
    "pagination",
    "parsers",
    "schema",
    "serializers",
    "urls",
}
# Reading the credentials a socket or a request brings (sessions, tokens) is authentication,
# done as Django's and DRF's own backends do it; the Django admin is the ORM's own page.
ORM_ALLOWED = {"webui/admin.py", "webui/socket_access.py", "webui/api/authentication.py"}
# Queryset methods that read (or build a read); attribute names no other object in webui uses.
QUERY_METHODS = {
    "objects",
    "filter",
    "exclude",
    "order_by",
    "values_list",
    "select_related",
    "prefetch_related",
    "annotate",
    "aggregate",
}


def _tree(path: Path) -> ast.AST:
    return ast.parse(path.read_text(), str(path))


def test_no_api_view_module_imports_another():
    views = {path.stem for path in API.glob("*.py")} - API_COMMON - {"__init__"}
    offenders = []
    for path in sorted(API.glob("*.py")):
        if path.stem not in views:
            continue
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported = node.module.removeprefix("webui.api.")
                if node.module.startswith("webui.api.") and imported in views:
                    offenders.append(f"{path.name} imports {node.module}")
    assert views >= {"runs", "pools", "review"}
    assert offenders == []


def test_webui_reads_the_database_only_through_selectors():
    offenders = []
    for path in sorted((ROOT / "webui").rglob("*.py")):
        name = str(path.relative_to(ROOT))
        if name in ORM_ALLOWED or "/migrations/" in name:
            continue
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.Attribute) and node.attr in QUERY_METHODS:
                offenders.append(f"{name}:{node.lineno} .{node.attr}")
    assert offenders == []
