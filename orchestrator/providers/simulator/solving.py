"""How the simulator actually solves suite tasks, and the plausible mistakes it makes.

Arithmetic answers are computed from the task's formula, countdown puzzles are searched, code
tasks get the reference implementation, lookups come from the fact tables. A wrong answer is a
real mistake of the kind people make (a wrong formula, a near miss, a buggy implementation, a
common confusion), never noise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from functools import cache

from orchestrator.engine.grading import ExpressionError, evaluate_expression, extract_answer, grade
from orchestrator.providers.simulator.suite import Task, format_number, strip_outer

_COUNTDOWN_NUMBERS = re.compile(r"numbers ([\d, and]+?) exactly once")
_COUNTDOWN_TARGET = re.compile(r"make (\d+)\.")


@dataclass(frozen=True, slots=True)
class Attempt:
    """An answer with the brief work shown for it."""

    answer: str
    work: str


def countdown_puzzle(question: str) -> tuple[tuple[int, ...], int] | None:
    """The numbers and target of a countdown question as the suite words it, or None."""
    numbers, target = _COUNTDOWN_NUMBERS.search(question), _COUNTDOWN_TARGET.search(question)
    if not numbers or not target:
        return None
    return tuple(int(n) for n in re.findall(r"\d+", numbers.group(1))), int(target.group(1))


@cache
def _countdown_search(numbers: tuple[int, ...], target: int) -> tuple[str | None, str, int]:
    """Depth-first search over countdown expressions using every number once.

    Returns a solution (or None) and the closest wrong expression with its value.
    """
    best_miss: tuple[int, str, int] = (10**9, "", 0)
    seen: set[tuple[tuple[int, str], ...]] = set()

    def search(items: tuple[tuple[int, str], ...]) -> str | None:
        nonlocal best_miss
        if len(items) == 1:
            value, expression = items[0]
            if value == target:
                return expression
            if abs(value - target) < best_miss[0]:
                best_miss = (abs(value - target), expression, value)
            return None
        key = tuple(sorted(items))
        if key in seen:
            return None
        seen.add(key)
        for i in range(len(items)):
            for j in range(len(items)):
                if i == j:
                    continue
                (x, ex), (y, ey) = items[i], items[j]
                rest = tuple(item for k, item in enumerate(items) if k not in (i, j))
                candidates = []
                if i < j:
                    candidates += [(x + y, f"({ex} + {ey})"), (x * y, f"({ex} * {ey})")]
                if x > y:
                    candidates.append((x - y, f"({ex} - {ey})"))
                if y > 1 and x % y == 0:
                    candidates.append((x // y, f"({ex} / {ey})"))
                for candidate in candidates:
                    found = search(rest + (candidate,))
                    if found:
                        return found
        return None

    solution = search(tuple((n, str(n)) for n in numbers))
    return (strip_outer(solution) if solution else None), strip_outer(best_miss[1]), best_miss[2]


def solve(task: Task) -> Attempt:
    """A correct answer to ``task``, found the way the domain needs."""
    if task.domain == "arithmetic":
        value = evaluate_expression(task.work)[0]
        return Attempt(format_number(value), f"{task.work} = {format_number(value)}")
    if task.domain == "countdown":
        puzzle = countdown_puzzle(task.question)
        found = _countdown_search(*puzzle)[0] if puzzle else None
        expression = found or task.solution
        return Attempt(expression, f"{expression} = {puzzle[1] if puzzle else '?'}")
    return Attempt(task.solution, task.work)


def mistake(task: Task, pick: float) -> Attempt:
    """A plausible wrong answer to ``task``; ``pick`` in [0, 1) chooses among the mistakes."""
    if task.domain == "arithmetic":
        formula = task.mistakes[int(pick * len(task.mistakes))]
        value = format_number(evaluate_expression(formula)[0])
        return Attempt(value, f"{formula} = {value}")
    if task.domain == "countdown":
        puzzle = countdown_puzzle(task.question)
        if puzzle:
            _, near_miss, near_value = _countdown_search(*puzzle)
            if near_miss and near_value != puzzle[1]:
                return Attempt(near_miss, f"{near_miss} = {near_value}")
        return Attempt(task.solution + " + 1", "close enough")
    if task.domain == "code":
        return Attempt(task.mistakes[int(pick * len(task.mistakes))], task.misleading_plan)
    wrong = task.mistakes[int(pick * len(task.mistakes))]
    return Attempt(wrong, f"Recalled {wrong}.")


def is_correct(task: Task, answer: str) -> bool | None:
    """Whether ``answer`` is right, as the simulator can tell cheaply; None when it cannot.

    Code answers are recognised (not run): the reference implementation is right, a known
    mistake is wrong, anything else is unknown.
    """
    if task.domain == "code":
        code = answer.strip()
        if code == task.solution.strip():
            return True
        if any(code == wrong.strip() for wrong in task.mistakes):
            return False
        return None
    return grade(answer, task.reference, task.grader) == 1.0


def answer_of(task: Task, response: str) -> str | None:
    """The answer a response gives to ``task``, or None if it gives none (a plan, a refusal)."""
    if task.domain == "code":
        extracted = extract_answer(response, kind="code")
        return extracted if "```" in response else None
    if not re.search(r"^[\s>*_#-]*answer[\s*_]*:", response, re.IGNORECASE | re.MULTILINE):
        return None
    return extract_answer(response, kind=task.grader)


def plain_arithmetic(question: str) -> Fraction | None:
    """The value of a question that is just an arithmetic expression ("What is (3 + 4) * 12?")."""
    match = re.search(r"[-(\d][\d\s+\-*/().×÷]*\d\)*", question)
    if not match or not re.search(r"\d\s*[-+*/×÷]\s*[(\d]", match.group(0)):
        return None
    remainder = question.replace(match.group(0), " ")
    if re.search(r"[A-Za-z]{3,}", remainder) and not re.fullmatch(
        r"\s*(what\s+is|compute|calculate|evaluate)?\s*[?=.]*\s*", remainder, re.IGNORECASE
    ):
        return None
    try:
        return evaluate_expression(match.group(0))[0]
    except ExpressionError:
        return None
