"""Reading a reference's form without running it: shared by the grader and the tests' sandbox.

Inlined into ``tests_host.py``, so stdlib only.
"""

from __future__ import annotations

import ast


def looks_like_doctest(reference: str) -> bool:
    """Whether the reference is doctest-like ``>>>`` examples rather than a Python module."""
    first = next((line for line in reference.splitlines() if line.strip()), "")
    return first.lstrip().startswith(">>>")


def module_asserts(tree: ast.Module) -> int:
    """The ``assert`` statements that run when the module does (not those inside a function or
    a class, which run only if called)."""
    count = 0
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Assert):
            count += 1
        pending.extend(ast.iter_child_nodes(node))
    return count
