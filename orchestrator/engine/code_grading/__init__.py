"""Grading code answers: the answer and the tests in two sandboxes, the verdict where the answer
cannot reach.

A code answer is graded by two sandboxes started together, each with its own slot (host uid and
cgroup, ``engine.sandbox``):

- the *answer's* sandbox runs the answer and nothing else (``answer_host.py``): it never holds the
  tests' text or any expected value;
- the *tests'* sandbox runs the reference's tests (``tests_host.py``) with a stand-in for each
  name the answer defines. A call of a stand-in goes over a pipe to the answer's sandbox, and the
  result comes back as tagged JSON data (``codec.py``; never pickle), or as a stand-in for one of
  the answer's objects, equal to nothing of the tests'. So every comparison with an expected value
  is made in the tests' process, by Python's own types, and the verdict is that process's.

The answer can make its own functions return anything, as a wrong answer would, but it cannot
read the tests, print the verdict, replace the test functions or ``assertEqual``, stop the tests
early, or hand back an object that equals everything. A value that does not serialise is not
equal to any expected value, so it is wrong. A reference is checked before any run is created
(``reference_problem``): plain ``assert`` lines, ``unittest`` classes (``unittest.main()`` or
not) and doctest-like ``>>>`` examples are accepted; anything else is refused with the reason.
"""

from __future__ import annotations

import ast
import doctest
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from orchestrator.engine.code_grading.reading import looks_like_doctest, module_asserts
from orchestrator.engine.sandbox import (
    Limits,
    Outcome,
    SandboxUnavailable,
    Slot,
    empty_slot,
    run_python,
    slots,
)

# What each of the two sandboxes of one grading may use: a short function's tests need far less.
CODE_LIMITS = Limits(cpu_seconds=10, wall_seconds=15.0, memory_bytes=512 * 2**20, processes=64)
MAX_REFERENCE_CHARS = 64 * 1024

_HERE = Path(__file__).resolve().parent
_INLINED = "  # inlined"


def _program(name: str) -> str:
    """A sandboxed program's text, each of its ``# inlined`` imports of this package replaced by
    that module's text (the sandbox's Python sees nothing of the project)."""
    parts: list[str] = []
    body: list[str] = []
    for line in (_HERE / name).read_text(encoding="utf-8").splitlines(keepends=True):
        if line.rstrip().endswith(_INLINED):
            module = line.split(" import ", 1)[0].removeprefix("from ").rsplit(".", 1)[-1]
            parts.append(_without_future((_HERE / f"{module}.py").read_text(encoding="utf-8")))
        else:
            body.append(line)
    return (
        "from __future__ import annotations\n" + "\n".join(parts) + _without_future("".join(body))
    )


def _without_future(source: str) -> str:
    return source.replace("from __future__ import annotations\n", "")


ANSWER_PROGRAM = _program("answer_host.py")
TESTS_PROGRAM = _program("tests_host.py")


@dataclass(frozen=True, slots=True)
class CodeVerdict:
    """How a code answer fared: ``passed`` only when every test ran and held; ``checks`` counts
    the asserts, test methods or examples run; ``failure`` says what failed first."""

    passed: bool
    checks: int
    failure: str


def reference_problem(reference: str) -> str | None:
    """Why ``reference`` cannot serve as the tests of a code answer, said for its author; None
    when it can. Read only (``ast`` and doctest's parser): nothing of it runs here."""
    text = reference.strip()
    if not text:
        return "A code reference holds the tests: it is empty."
    if len(reference) > MAX_REFERENCE_CHARS:
        return f"A code reference is at most {MAX_REFERENCE_CHARS:,} characters."
    try:
        if looks_like_doctest(text):
            examples = doctest.DocTestParser().get_examples(text)
            for example in examples:
                ast.parse(example.source, "tests.py")
            if not examples:
                return "The reference has no >>> example to run."
            return None
        tree = ast.parse(text, "tests.py")
    except SyntaxError as error:
        return f"The reference is not valid Python: line {error.lineno}: {error.msg}."
    except (ValueError, RecursionError, MemoryError) as error:
        return f"The reference cannot be read as tests ({type(error).__name__})."
    if module_asserts(tree) or _test_methods(tree):
        return None
    return (
        "The reference has no test to run: write assert lines (assert add(2, 3) == 5), "
        "unittest.TestCase classes with test_ methods, or >>> examples."
    )


def grade_code(answer_code: str, reference: str, *, limits: Limits | None = None) -> CodeVerdict:
    """Run ``reference``'s tests against ``answer_code``, each in a sandbox of its own, within
    ``limits`` each (``CODE_LIMITS`` by default).

    Raises SandboxUnavailable when the sandboxes cannot run here (nothing is run then)."""
    limits = limits or CODE_LIMITS
    with slots(2) as (answer_slot, tests_slot):
        requests_read, requests_write = os.pipe()
        responses_read, responses_write = os.pipe()
        outcomes: dict[str, Outcome | BaseException] = {}

        def run(program: str, files: dict[str, str], fds: tuple[int, int], slot: Slot) -> Outcome:
            return run_python(
                script=program, files=files, argv=[str(fd) for fd in fds],
                handover_fds=list(fds), limits=limits, slot=slot,
            )  # fmt: skip

        def run_answer() -> None:
            try:
                outcomes["answer"] = run(
                    ANSWER_PROGRAM, {"solution.py": answer_code},
                    (requests_read, responses_write), answer_slot,
                )  # fmt: skip
            except BaseException as error:  # noqa: BLE001 - re-raised below, in the caller
                outcomes["answer"] = error

        answer_thread = threading.Thread(target=run_answer, name="code-grading-answer")
        answer_thread.start()
        try:
            tests = run(
                TESTS_PROGRAM, {"tests.py": reference}, (requests_write, responses_read), tests_slot
            )
        finally:
            # The verdict is in: whatever the answer still does is of no interest.
            empty_slot(answer_slot)
            answer_thread.join()
    answered = outcomes.get("answer")
    if isinstance(answered, SandboxUnavailable):
        raise answered
    return _verdict(tests)


def _verdict(tests: Outcome) -> CodeVerdict:
    if tests.timed_out:
        return CodeVerdict(passed=False, checks=0, failure="The tests ran out of time.")
    report = None
    for line in reversed(tests.stdout.splitlines()):
        if line.startswith("REPORT "):
            try:
                report = json.loads(line.removeprefix("REPORT "))
            except ValueError:
                report = None
            break
    if not tests.ok or not isinstance(report, dict):
        detail = tests.stderr.strip().splitlines()[-1:] or [f"exit status {tests.exit_code}"]
        return CodeVerdict(passed=False, checks=0, failure=f"The tests did not finish: {detail[0]}")
    checks = report.get("checks")
    checks = checks if type(checks) is int else 0
    return CodeVerdict(
        passed=report.get("passed") is True and checks > 0,
        checks=checks,
        failure=str(report.get("failure") or ""),
    )


def _test_methods(tree: ast.Module) -> int:
    """``test*`` methods of module-level classes that derive from something named TestCase."""
    count = 0
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        bases = [ast.unparse(base) for base in node.bases]
        if not any(base.split(".")[-1] == "TestCase" for base in bases):
            continue
        count += sum(
            1
            for item in node.body
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
            and item.name.startswith("test")
        )
    return count
