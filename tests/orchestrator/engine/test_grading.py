import time
from dataclasses import replace
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.engine import code_grading, sandbox
from orchestrator.engine.grading import (
    ExpressionError,
    GradingUnavailable,
    evaluate_expression,
    extract_answer,
    grade,
)

# extract_answer ----------------------------------------------------------------------------------


def test_extract_answer_takes_the_last_answer_line():
    text = "First try.\nAnswer: 12\nOn reflection that was wrong.\nAnswer: 14\n"
    assert extract_answer(text) == "14"


def test_extract_answer_reads_markdown_decorated_answer_lines():
    assert extract_answer("Work...\n**Answer:** Canberra") == "Canberra"
    assert extract_answer("> answer: B") == "B"


def test_extract_answer_without_an_answer_line_is_the_whole_stripped_text():
    assert extract_answer("  Canberra \n") == "Canberra"


def test_extract_answer_for_code_is_the_last_fenced_block():
    text = "Draft:\n```python\ndef f(): return 1\n```\nFixed:\n```python\ndef f():\n    return 2\n```\nAnswer: done"
    assert extract_answer(text, kind="code") == "def f():\n    return 2"


def test_extract_answer_without_a_kind_falls_back_to_a_code_block():
    assert extract_answer("Here:\n```\nprint(1)\n```") == "print(1)"


# exact -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("answer", ["Brasília", "brasilia", " BRASILIA. ", "the Brasilia"])
def test_exact_ignores_case_accents_punctuation_and_articles(answer):
    assert grade(answer, "Brasília|Brasilia", "exact") == 1.0


def test_exact_accepts_any_listed_alternative_and_rejects_others():
    assert grade("Kiev", "Kyiv|Kiev", "exact") == 1.0
    assert grade("Kharkiv", "Kyiv|Kiev", "exact") == 0.0
    assert grade("Canberra, Australia", "Canberra", "exact") == 0.0


# numeric -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("answer", ["1234.5", "$1,234.50", "1234.50 dollars", "total = 1234.5"])
def test_numeric_reads_the_number_whatever_the_decoration(answer):
    assert grade(answer, "1234.5", "numeric") == 1.0


def test_numeric_has_a_small_tolerance_only():
    assert grade("49.680001", "49.68", "numeric") == 1.0
    assert grade("49.7", "49.68", "numeric") == 0.0
    assert grade("3/4", "0.75", "numeric") == 1.0
    assert grade("-3", "3", "numeric") == 0.0


def test_numeric_without_a_number_is_wrong():
    assert grade("about a dozen", "12", "numeric") == 0.0


# choice ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer", ["B", "b", "(B)", "B) Mercury", "B. Mercury", "The answer is B", "option b"]
)
def test_choice_reads_the_letter(answer):
    assert grade(answer, "B", "choice") == 1.0


@pytest.mark.parametrize("answer", ["C", "Mercury", "", "Because"])
def test_choice_rejects_another_letter_or_no_letter(answer):
    assert grade(answer, "B", "choice") == 0.0


# countdown ---------------------------------------------------------------------------------------

REFERENCE = "(50 - 25) * 3 + 7"  # numbers 50, 25, 3, 7; target 82


@pytest.mark.parametrize(
    "answer", ["(50 - 25) * 3 + 7", "7 + 3 * (50 - 25)", "3 × (50 − 25) + 7 = 82", "((50-25)*3)+7"]
)
def test_countdown_accepts_any_expression_reaching_the_target_with_the_numbers(answer):
    assert grade(answer, REFERENCE, "countdown") == 1.0


@pytest.mark.parametrize(
    "answer, why",
    [
        ("(50 - 25) * 3 + 8", "wrong value"),
        ("(50 - 25) * 3 + 7 + 0", "an extra number"),
        ("(50 - 25) * 3 + 3 + 4", "a number not given"),
        ("50 + 25 + 7", "a number left out"),
        ("(50 - 25) * (3 + 7 - 10) / 0", "division by zero"),
        ("82", "no work at all"),
        ("__import__('os').system('true')", "not arithmetic"),
        ("-(-82)", "unary minus is not a countdown operation"),
        ("7 - (25 - 50) * 3", "a negative intermediate result"),
        ("(" * 400 + "1" + ")" * 400, "absurdly long"),
    ],
)
def test_countdown_rejects(answer, why):
    assert grade(answer, REFERENCE, "countdown") == 0.0, why


def test_countdown_requires_whole_intermediate_results():
    reference = "3 * (7 + 9) / 4"  # 12 from 3, 4, 7, 9
    assert grade("(7 + 9) * 3 / 4", reference, "countdown") == 1.0
    assert grade("3 / 4 * (7 + 9)", reference, "countdown") == 0.0


def test_evaluate_expression_is_exact_and_follows_precedence():
    value, numbers = evaluate_expression("2 + 3 * (7 - 1) / 4")
    assert value == Fraction(13, 2)
    assert numbers == [2, 3, 7, 1, 4]


@pytest.mark.parametrize("expression", ["", "2 +", "(2", "2 ** 3", "abs(2)", "1 / (2 - 2)"])
def test_evaluate_expression_rejects_what_is_not_plain_arithmetic(expression):
    with pytest.raises(ExpressionError):
        evaluate_expression(expression)


# code --------------------------------------------------------------------------------------------
# Code answers run in the sandbox (tests/orchestrator/engine/test_sandbox.py shows what it blocks).

TESTS = "assert add(2, 3) == 5\nassert add(-1, 1) == 0\n"


def test_code_passes_when_the_tests_pass(code_sandbox):
    assert grade("def add(a, b):\n    return a + b\n", TESTS, "code") == 1.0


def test_code_reads_the_last_fenced_block_of_a_reply(code_sandbox):
    reply = "Sure:\n```python\ndef add(a, b):\n    return a + b\n```\nHope it helps."
    assert grade(reply, TESTS, "code") == 1.0


@pytest.mark.parametrize(
    "answer",
    [
        "def add(a, b):\n    return a - b\n",
        "def add(a, b) return a + b",
        "def plus(a, b):\n    return a + b\n",
        "import sys\nsys.exit(0)\n",
        "import os\nos._exit(0)\n",
        "import sys\nprint(sys.argv)\nraise SystemExit(0)\n",
    ],
)
def test_code_fails_on_wrong_broken_or_evasive_code(code_sandbox, answer):
    assert grade(answer, TESTS, "code") == 0.0


def test_code_that_never_ends_is_stopped_by_the_time_limit(code_sandbox, monkeypatch):
    monkeypatch.setattr(
        code_grading, "CODE_LIMITS", replace(code_grading.CODE_LIMITS, wall_seconds=1.0)
    )
    started = time.monotonic()
    assert grade("while True:\n    pass\n", TESTS, "code") == 0.0
    # Stopped by its limit, not left to run: well under what a busy machine could add to 1 s.
    assert time.monotonic() - started < 30


def test_code_under_test_has_no_network(code_sandbox):
    answer = (
        "import socket\n"
        "def probe():\n"
        "    try:\n"
        "        socket.create_connection(('127.0.0.1', 9), timeout=1)\n"
        "    except OSError as error:\n"
        "        return 'refused'\n"
        "    return 'connected'\n"
    )
    assert grade(answer, "assert probe() == 'refused'", "code") == 1.0


def test_without_the_sandbox_code_is_not_graded_and_not_run(monkeypatch, tmp_path):
    marker = tmp_path / "ran"
    monkeypatch.setattr(sandbox, "BWRAP", str(tmp_path / "no-bwrap"))
    answer = f"open({str(marker)!r}, 'w').write('ran')\ndef add(a, b):\n    return a + b\n"
    with pytest.raises(GradingUnavailable, match="apt-get install bubblewrap"):
        grade(answer, TESTS, "code")
    assert not marker.exists()


def test_unknown_grader_kind_is_a_bug_not_a_wrong_answer():
    with pytest.raises(ValueError, match="unknown grader kind"):
        grade("1", "1", "fuzzy")


@settings(max_examples=300, deadline=None)
@given(
    answer=st.text(max_size=200), kind=st.sampled_from(["exact", "numeric", "choice", "countdown"])
)
def test_no_answer_makes_a_grader_raise(answer, kind):
    reference = {"exact": "Paris", "numeric": "42", "choice": "C", "countdown": REFERENCE}[kind]
    assert grade(answer, reference, kind) in (0.0, 1.0)
