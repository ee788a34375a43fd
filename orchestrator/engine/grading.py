"""Checking answers against reference answers: extraction, normalisation and the graders.

Pure Python. Every grader returns 1.0 (correct) or 0.0 (not), and never raises on what a model
wrote: a malformed answer is simply wrong. Nothing a model wrote is ever passed to ``eval``; the
arithmetic of countdown answers goes through the small parser below, and code answers run in an
OS-level sandbox (``sandbox.py``) or are not graded at all (``GradingUnavailable``).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from fractions import Fraction
from typing import Literal, TypeAlias

from orchestrator.engine import code_grading
from orchestrator.engine.sandbox import SandboxUnavailable

GraderKind: TypeAlias = Literal["exact", "contains", "numeric", "choice", "countdown", "code"]
GRADER_KINDS: tuple[GraderKind, ...] = (
    "exact",
    "contains",
    "numeric",
    "choice",
    "countdown",
    "code",
)

MAX_EXPRESSION_LENGTH = 300

_ANSWER_LINE = re.compile(r"^[\s>*_#-]*answer[\s*_]*:[\s*_]*(.*?)[\s*_]*$", re.IGNORECASE)
_FENCED_BLOCK = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.DOTALL)
_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?|-?\.\d+")


def extract_answer(text: str, *, kind: str | None = None) -> str:
    """The part of a response that is graded.

    Code answers (``kind="code"``) are the last fenced code block. Otherwise the last line that
    starts with "Answer:"; failing that, the last fenced block when the kind is unknown; failing
    that, the whole stripped text.
    """
    if kind == "code":
        return last_code_block(text) or text.strip()
    for line in reversed(text.splitlines()):
        match = _ANSWER_LINE.match(line)
        if match and match.group(1).strip():
            return match.group(1).strip()
    if kind is None:
        block = last_code_block(text)
        if block:
            return block
    return text.strip()


def answer_line(text: str) -> str:
    """The first non-empty line of an extracted answer: what lists and headers show of it, and
    what ``exact`` compares ("Paris\n\nI will now present my answer..." is "Paris")."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def last_code_block(text: str) -> str:
    """The contents of the last fenced (```) block in ``text``, or "" when there is none."""
    blocks = _FENCED_BLOCK.findall(text)
    return blocks[-1][1].strip("\n") if blocks else ""


def grade(answer: str, reference: str, kind: str) -> float:
    """1.0 if ``answer`` is correct against ``reference`` under grader ``kind``, else 0.0.

    ``reference`` means, per kind: exact, the expected text (alternatives separated by "|"),
    compared with the answer's first line; contains, text (alternatives separated by "|") that
    must appear as whole words anywhere in the answer; numeric, a number; choice, a letter; countdown, one valid solution expression (its numbers
    and value define the puzzle); code, Python test code that raises if the answer is wrong,
    run with the answer in the sandbox (GradingUnavailable when the sandbox cannot run here).
    """
    graders = {
        "exact": _grade_exact,
        "contains": _grade_contains,
        "numeric": _grade_numeric,
        "choice": _grade_choice,
        "countdown": _grade_countdown,
        "code": _grade_code,
    }
    if kind not in graders:
        raise ValueError(f"unknown grader kind {kind!r}; expected one of {', '.join(GRADER_KINDS)}")
    return 1.0 if graders[kind](answer, reference) else 0.0


# exact -------------------------------------------------------------------------------------------


def normalise_text(text: str) -> str:
    """Case, accents, surrounding punctuation, a leading article and extra spaces removed."""
    decomposed = unicodedata.normalize("NFKD", text)
    plain = "".join(ch for ch in decomposed if not unicodedata.combining(ch)).casefold()
    plain = re.sub(r"\s+", " ", plain).strip(" \t\n.,;:!?\"'`*()[]")
    return re.sub(r"^(the|a|an) ", "", plain)


def _grade_exact(answer: str, reference: str) -> bool:
    given = normalise_text(answer_line(answer))
    return any(given == normalise_text(option) for option in reference.split("|"))


def _grade_contains(answer: str, reference: str) -> bool:
    given = normalise_text(answer)
    for option in reference.split("|"):
        wanted = normalise_text(option)
        if wanted and re.search(rf"(?<!\w){re.escape(wanted)}(?!\w)", given):
            return True
    return False


def reference_problem(kind: str, reference: str) -> str | None:
    """Why ``reference`` cannot be graded under grader ``kind``, said for its author; None when
    it can. Checked when a run, a dataset item or an experiment is created, before any work."""
    text = reference.strip()
    if kind == "code":
        return code_grading.reference_problem(reference)
    if not text:
        return f"The {kind} grader needs a reference to check against."
    if kind in ("exact", "contains") and not any(normalise_text(o) for o in text.split("|")):
        return f"The {kind} grader needs a reference with some text in it."
    if kind == "numeric" and parse_number(text) is None:
        return f'The numeric grader needs a number as its reference, not "{text[:40]}".'
    if kind == "choice" and not re.fullmatch(r"[A-Ha-h]", text):
        return f'The choice grader needs one option letter (A to H) as its reference, not "{text[:40]}".'
    if kind == "countdown":
        try:
            evaluate_expression(_expression_part(text), countdown_rules=True)
        except ExpressionError as error:
            return f"The countdown grader needs a valid solution as its reference: {error}"
    return None


# numeric -----------------------------------------------------------------------------------------


def parse_number(text: str) -> Fraction | None:
    """The last number written in ``text`` ("$1,234.50", "3/4", "-2"), or None."""
    matches = _NUMBER.findall(text.replace("\u2212", "-"))
    if not matches:
        return None
    raw = matches[-1].replace(",", "")
    try:
        if "/" in raw:
            numerator, denominator = raw.split("/")
            return Fraction(Fraction(numerator), Fraction(denominator))
        return Fraction(raw)
    except (ValueError, ZeroDivisionError):
        return None


def _grade_numeric(answer: str, reference: str) -> bool:
    given, expected = parse_number(answer), parse_number(reference)
    if given is None or expected is None:
        return False
    tolerance = max(Fraction(1, 10**6), abs(expected) * Fraction(1, 10**4))
    return abs(given - expected) <= tolerance


# choice ------------------------------------------------------------------------------------------

_CHOICE_PATTERNS = (
    re.compile(r"^\(?([A-Ha-h])\)?(?:[.):\s]|$)"),
    re.compile(
        r"\b(?:option|choice|answer)\s*(?:is\s*)?\(?([A-Ha-h])\)?(?:[.):\s]|$)", re.IGNORECASE
    ),
)


def parse_choice(text: str) -> str | None:
    """The option letter chosen in ``text`` ("B", "(b)", "B) Paris", "option C"), or None."""
    stripped = text.strip().strip("*_ ")
    for pattern in _CHOICE_PATTERNS:
        match = pattern.search(stripped)
        if match:
            return match.group(1).upper()
    return None


def _grade_choice(answer: str, reference: str) -> bool:
    given = parse_choice(answer)
    return given is not None and given == reference.strip().upper()


# countdown ---------------------------------------------------------------------------------------


class ExpressionError(ValueError):
    """An arithmetic expression that cannot be read or evaluated."""


_TOKEN = re.compile(r"\s*(?:(\d+(?:\.\d+)?)|(.))")
_OPERATOR_ALIASES = str.maketrans({"×": "*", "x": "*", "X": "*", "·": "*", "÷": "/", "−": "-"})


def _tokenize(expression: str) -> list[str | Fraction]:
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise ExpressionError("expression too long")
    tokens: list[str | Fraction] = []
    for number, symbol in _TOKEN.findall(expression.translate(_OPERATOR_ALIASES)):
        if number:
            tokens.append(Fraction(number))
        elif symbol in "+-*/()":
            tokens.append(symbol)
        elif not symbol.isspace():
            raise ExpressionError(f"unexpected character {symbol!r}")
    return tokens


class _ExpressionParser:
    """Recursive descent over + - * / and parentheses, exact with fractions.

    Grammar: expr := term (("+"|"-") term)*; term := factor (("*"|"/") factor)*;
    factor := NUMBER | "(" expr ")" | "-" factor (not under countdown rules).
    """

    def __init__(self, tokens: list[str | Fraction], *, countdown_rules: bool):
        self.tokens = tokens
        self.position = 0
        self.numbers: list[Fraction] = []
        self.countdown_rules = countdown_rules
        self.depth = 0

    def _checked(self, value: Fraction) -> Fraction:
        if self.countdown_rules and (value.denominator != 1 or value <= 0):
            raise ExpressionError(f"intermediate result {value} is not a positive whole number")
        return value

    def parse(self) -> Fraction:
        if not self.tokens:
            raise ExpressionError("empty expression")
        value = self._expr()
        if self.position != len(self.tokens):
            raise ExpressionError(f"unexpected {self.tokens[self.position]!r}")
        return value

    def _peek(self) -> str | Fraction | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def _expr(self) -> Fraction:
        value = self._term()
        while self._peek() in ("+", "-"):
            operator = self.tokens[self.position]
            self.position += 1
            right = self._term()
            value = self._checked(value + right if operator == "+" else value - right)
        return value

    def _term(self) -> Fraction:
        value = self._factor()
        while self._peek() in ("*", "/"):
            operator = self.tokens[self.position]
            self.position += 1
            right = self._factor()
            if operator == "*":
                value = self._checked(value * right)
            elif right == 0:
                raise ExpressionError("division by zero")
            else:
                value = self._checked(value / right)
        return value

    def _factor(self) -> Fraction:
        token = self._peek()
        self.position += 1
        if isinstance(token, Fraction):
            self.numbers.append(token)
            return token
        if token == "(":
            self.depth += 1
            if self.depth > 50:
                raise ExpressionError("too deeply nested")
            value = self._expr()
            if self._peek() != ")":
                raise ExpressionError("missing closing parenthesis")
            self.position += 1
            self.depth -= 1
            return value
        if token == "-" and not self.countdown_rules:
            return -self._factor()
        raise ExpressionError(
            "expected a number or '('" if token is None else f"unexpected {token!r}"
        )


def evaluate_expression(
    expression: str, *, countdown_rules: bool = False
) -> tuple[Fraction, list[Fraction]]:
    """The exact value of an arithmetic expression and the numbers it uses, in order.

    Raises ExpressionError for anything but numbers, + - * / and parentheses. Under
    ``countdown_rules`` there is no unary minus and every intermediate result must be a positive
    whole number.
    """
    parser = _ExpressionParser(_tokenize(expression), countdown_rules=countdown_rules)
    return parser.parse(), parser.numbers


def _expression_part(answer: str) -> str:
    """ "(25 - 5) * 3 = 60" -> "(25 - 5) * 3": the side of an equation that holds the work."""
    sides = [side for side in answer.split("=") if side.strip()]
    if not sides:
        return ""
    return max(sides, key=lambda side: sum(ch in "+-*/×÷x" for ch in side))


def _grade_countdown(answer: str, reference: str) -> bool:
    try:
        target, allowed = evaluate_expression(_expression_part(reference), countdown_rules=True)
        value, used = evaluate_expression(_expression_part(answer), countdown_rules=True)
    except ExpressionError:
        return False
    return value == target and Counter(used) == Counter(allowed)


# code --------------------------------------------------------------------------------------------


class GradingUnavailable(RuntimeError):
    """The answer could not be graded on this server (code grading off or no sandbox). Not a
    wrong answer: the caller records the reason instead of a score."""


def _grade_code(answer: str, reference: str) -> bool:
    code = last_code_block(answer) or answer
    try:
        return code_grading.grade_code(code, reference).passed
    except SandboxUnavailable as error:
        raise GradingUnavailable(str(error)) from error
