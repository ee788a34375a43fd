"""The bundled task suite: questions with checkable reference answers in four domains.

Arithmetic word problems, countdown number puzzles and short code tasks are generated from a
fixed seed; lookups come from the fact tables in ``facts``. The suite is the same on every
machine, so simulated runs and benchmarks are reproducible.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from functools import cache
from typing import Any, Literal, TypeAlias

from orchestrator.engine.grading import GraderKind, evaluate_expression
from orchestrator.providers.simulator import facts

Domain: TypeAlias = Literal["arithmetic", "countdown", "code", "lookup"]
DOMAINS: tuple[Domain, ...] = ("arithmetic", "countdown", "code", "lookup")
SUITE_SEED = 20251130


@dataclass(frozen=True, slots=True)
class Task:
    """One question of the suite and what it takes to check and to solve it.

    ``reference`` is what ``grade(answer, reference, grader)`` checks against (for code tasks, the
    test code). ``solution`` is a correct final answer as a solver writes it, ``work`` the brief
    work behind it (for arithmetic, the formula to compute). ``mistakes`` are plausible wrong
    answers (arithmetic: wrong formulas; code: buggy implementations). ``plan`` is a sound
    outline of the solution and ``misleading_plan`` a flawed one.
    """

    id: str
    domain: Domain
    question: str
    reference: str
    grader: GraderKind
    solution: str
    work: str = ""
    mistakes: tuple[str, ...] = ()
    plan: str = ""
    misleading_plan: str = ""


def format_number(value: Fraction) -> str:
    """An exact value as people write it: "42", "-3", "12.5" (at most two decimals)."""
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):.2f}".rstrip("0").rstrip(".")


# arithmetic --------------------------------------------------------------------------------------

_NAMES = ("Ada", "Bilal", "Chen", "Dana", "Emeka", "Farah", "Goran", "Hana", "Ines", "Jonas")

ArithmeticTemplate: TypeAlias = Callable[[random.Random], tuple[str, str, list[str]]]


def _bakery(rng: random.Random) -> tuple[str, str, list[str]]:
    trays, per_tray = rng.randint(3, 12), rng.choice((12, 16, 20, 24))
    sold = rng.randint(10, trays * per_tray - 5)
    question = (
        f"A baker bakes {trays} trays of {per_tray} cookies each and sells {sold} cookies. "
        "How many cookies are left?"
    )
    return (
        question,
        f"{trays} * {per_tray} - {sold}",
        [
            f"{trays} * {per_tray} + {sold}",
            f"{trays} + {per_tray} - {sold}"
            if trays + per_tray > sold
            else f"{trays} * {per_tray}",
            f"({trays} - 1) * {per_tray} - {sold}",
        ],
    )


def _train(rng: random.Random) -> tuple[str, str, list[str]]:
    v, t, w, u = rng.randint(40, 120), rng.randint(2, 6), rng.randint(30, 110), rng.randint(1, 5)
    question = (
        f"A train travels at {v} km/h for {t} hours and then at {w} km/h for {u} hours. "
        "How many kilometres does it travel in total?"
    )
    return (
        question,
        f"{v} * {t} + {w} * {u}",
        [
            f"({v} + {w}) * ({t} + {u}) / 2",
            f"{v} * {t} + {w}",
            f"{v} * {u} + {w} * {t}",
        ],
    )


def _change(rng: random.Random) -> tuple[str, str, list[str]]:
    name, count, price = (
        rng.choice(_NAMES),
        rng.randint(2, 9),
        rng.choice((1.25, 2.5, 3.75, 4.5, 6)),
    )
    bill = 50 if count * price < 50 else 100
    question = (
        f"{name} buys {count} notebooks at ${price:.2f} each and pays with a ${bill} bill. "
        "How much change, in dollars, does {name} get?"
    ).replace("{name}", name)
    return (
        question,
        f"{bill} - {count} * {price}",
        [
            f"{bill} - {price}",
            f"{bill} - ({count} - 1) * {price}",
            f"{count} * {price}",
        ],
    )


def _tank(rng: random.Random) -> tuple[str, str, list[str]]:
    rate = rng.choice((4, 5, 8, 10, 12, 15))
    minutes_full = rng.randint(10, 40)
    capacity = rate * minutes_full * 4
    percent = rng.choice((25, 50, 75))
    question = (
        f"An empty tank holds {capacity} litres and is filled at {rate} litres per minute. "
        f"How many minutes does it take to become {percent}% full?"
    )
    return (
        question,
        f"{capacity} * {percent} / 100 / {rate}",
        [
            f"{capacity} / {rate}",
            f"{capacity} * {percent} / 100",
            f"{capacity} * (100 - {percent}) / 100 / {rate}",
        ],
    )


def _discount(rng: random.Random) -> tuple[str, str, list[str]]:
    price, discount, tax = (
        rng.choice((40, 60, 80, 120, 200, 250)),
        rng.choice((10, 20, 25)),
        rng.choice((5, 8, 10)),
    )
    question = (
        f"A jacket costs ${price}. It is discounted by {discount}%, and then a {tax}% sales tax is "
        "added to the discounted price. What is the final price in dollars?"
    )
    return (
        question,
        f"{price} * (100 - {discount}) / 100 * (100 + {tax}) / 100",
        [
            f"{price} * (100 - {discount} + {tax}) / 100",
            f"{price} * (100 - {discount}) / 100",
            f"{price} * (100 + {discount}) / 100 * (100 + {tax}) / 100",
        ],
    )


def _clubs(rng: random.Random) -> tuple[str, str, list[str]]:
    students = rng.choice((200, 240, 300, 360, 400, 480))
    percent = rng.choice((25, 50, 75))
    per = rng.choice((3, 4, 5, 6))
    students = students - students % (per * 4)
    question = (
        f"A school has {students} students. {percent}% of them play football, and of the football "
        f"players, 1 in every {per} also plays chess. How many students play both?"
    )
    return (
        question,
        f"{students} * {percent} / 100 / {per}",
        [
            f"{students} / {per}",
            f"{students} * {percent} / 100",
            f"{students} * {percent} / 100 - {students} / {per}"
            if percent * per > 100
            else f"{students} * (100 - {percent}) / 100 / {per}",
        ],
    )


def _garden(rng: random.Random) -> tuple[str, str, list[str]]:
    length, width, path = rng.randint(8, 30), rng.randint(5, 20), rng.randint(1, 3)
    question = (
        f"A rectangular garden is {length} m long and {width} m wide. A path {path} m wide runs "
        "around the outside of it. What is the area of the path in square metres?"
    )
    return (
        question,
        f"({length} + 2 * {path}) * ({width} + 2 * {path}) - {length} * {width}",
        [
            f"({length} + {path}) * ({width} + {path}) - {length} * {width}",
            f"2 * ({length} + {width}) * {path}",
            f"({length} + 2 * {path}) * ({width} + 2 * {path})",
        ],
    )


def _reading(rng: random.Random) -> tuple[str, str, list[str]]:
    name, weekday, weekend, weeks = (
        rng.choice(_NAMES),
        rng.randint(10, 40),
        rng.randint(20, 80),
        rng.randint(2, 8),
    )
    question = (
        f"{name} reads {weekday} pages on each weekday and {weekend} pages on each day of the "
        f"weekend. How many pages does {name} read in {weeks} weeks?"
    )
    return (
        question,
        f"{weeks} * (5 * {weekday} + 2 * {weekend})",
        [
            f"{weeks} * 7 * {weekday}",
            f"{weeks} * ({weekday} + {weekend})",
            f"{weeks} * (5 * {weekday} + {weekend})",
        ],
    )


def _average(rng: random.Random) -> tuple[str, str, list[str]]:
    count, mean = rng.randint(4, 12), rng.randint(20, 80)
    new_mean = mean + rng.choice((-3, -2, 2, 3, 4))
    question = (
        f"The average of {count} numbers is {mean}. After one more number is added, the average "
        f"is {new_mean}. What number was added?"
    )
    return (
        question,
        f"({count} + 1) * {new_mean} - {count} * {mean}",
        [
            f"{new_mean} + ({new_mean} - {mean})",
            f"{count} * {new_mean} - {count} * {mean}",
            f"({count} + 1) * {mean} - {count} * {new_mean}",
        ],
    )


def _factory(rng: random.Random) -> tuple[str, str, list[str]]:
    per_hour, hours, days = rng.choice((40, 50, 60, 80, 120)), rng.randint(6, 10), rng.randint(3, 7)
    faulty = rng.choice((5, 10, 20, 25))
    question = (
        f"A machine makes {per_hour} parts per hour and runs {hours} hours a day for {days} days. "
        f"{faulty}% of the parts are faulty. How many good parts does it make?"
    )
    return (
        question,
        f"{per_hour} * {hours} * {days} * (100 - {faulty}) / 100",
        [
            f"{per_hour} * {hours} * {days} * {faulty} / 100",
            f"{per_hour} * {hours} * {days} - {faulty}",
            f"{per_hour} * {hours} * (100 - {faulty}) / 100",
        ],
    )


_ARITHMETIC_TEMPLATES: tuple[ArithmeticTemplate, ...] = (
    _bakery,
    _train,
    _change,
    _tank,
    _discount,
    _clubs,
    _garden,
    _reading,
    _average,
    _factory,
)


def _arithmetic_tasks(rng: random.Random, per_template: int) -> Iterator[Task]:
    seen: set[str] = set()
    number = 0
    for template in _ARITHMETIC_TEMPLATES:
        made = 0
        while made < per_template:
            question, formula, wrong_formulas = template(rng)
            if question in seen:
                continue
            value = evaluate_expression(formula)[0]
            mistakes = tuple(
                f for f in dict.fromkeys(wrong_formulas) if evaluate_expression(f)[0] != value
            )
            if not mistakes:
                continue
            seen.add(question)
            made += 1
            number += 1
            answer = format_number(value)
            yield Task(
                id=f"arithmetic-{number:03d}",
                domain="arithmetic",
                question=question,
                reference=answer,
                grader="numeric",
                solution=answer,
                work=formula,
                mistakes=mistakes,
                plan=f"Set up the computation as {formula} and evaluate it carefully.",
                misleading_plan=f"Set up the computation as {mistakes[0]} and evaluate it.",
            )


# countdown ---------------------------------------------------------------------------------------

_LARGE = (25, 50, 75, 100)


def _combine(a: tuple[int, str], b: tuple[int, str], op: str) -> tuple[int, str] | None:
    """Countdown rules: every intermediate result is a positive whole number."""
    (x, ex), (y, ey) = a, b
    if op == "+":
        return x + y, f"({ex} + {ey})"
    if op == "*":
        return x * y, f"({ex} * {ey})"
    if op == "-":
        return (x - y, f"({ex} - {ey})") if x > y else None
    return (x // y, f"({ex} / {ey})") if y > 1 and x % y == 0 else None


def strip_outer(expression: str) -> str:
    """The expression without one pair of parentheses around all of it, if it has one."""
    if expression.startswith("(") and expression.endswith(")"):
        depth = 0
        for position, char in enumerate(expression):
            depth += {"(": 1, ")": -1}.get(char, 0)
            if depth == 0 and position < len(expression) - 1:
                return expression
        return expression[1:-1]
    return expression


def _random_countdown(rng: random.Random) -> tuple[tuple[int, ...], int, str] | None:
    count = rng.choice((4, 4, 5))
    numbers = [rng.randint(1, 10) for _ in range(count)]
    if rng.random() < 0.6:
        numbers[0] = rng.choice(_LARGE)
    items = [(n, str(n)) for n in numbers]
    rng.shuffle(items)
    while len(items) > 1:
        i, j = rng.sample(range(len(items)), 2)
        made = _combine(items[i], items[j], rng.choice("+-*/*+"))
        if made is None:
            return None
        items = [item for k, item in enumerate(items) if k not in (i, j)] + [made]
    target, expression = items[0]
    if not 10 <= target <= 999 or target in numbers:
        return None
    return tuple(sorted(numbers)), target, strip_outer(expression)


def countdown_question(numbers: tuple[int, ...], target: int) -> str:
    shown = ", ".join(str(n) for n in numbers[:-1]) + f" and {numbers[-1]}"
    return (
        f"Countdown: using each of the numbers {shown} exactly once, with + - * / and "
        f"parentheses, make {target}. Every intermediate result must be a positive whole number. "
        "Give the expression."
    )


def _countdown_tasks(rng: random.Random, count: int) -> Iterator[Task]:
    seen: set[tuple[tuple[int, ...], int]] = set()
    number = 0
    while number < count:
        made = _random_countdown(rng)
        if made is None or made[:2] in seen:
            continue
        numbers, target, expression = made
        seen.add((numbers, target))
        number += 1
        yield Task(
            id=f"countdown-{number:03d}",
            domain="countdown",
            question=countdown_question(numbers, target),
            reference=expression,
            grader="countdown",
            solution=expression,
            work=f"{expression} = {target}",
            plan=f"Search combinations systematically; one route is {expression}.",
            misleading_plan=f"Get close to {target} with the largest numbers first, then adjust.",
        )


# code --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _CodeTemplate:
    """A family of code tasks: one function, parameterised by a constant in the question."""

    function: str
    describe: Callable[..., str]
    correct: Callable[..., str]
    buggy: Callable[..., str]
    inputs: Callable[..., list[tuple[Any, ...]]]
    plan: Callable[..., str]
    misleading_plan: Callable[..., str]
    variants: tuple[dict[str, Any], ...]


_CODE_TEMPLATES: tuple[_CodeTemplate, ...] = (
    _CodeTemplate(
        function="sum_multiples",
        describe=lambda a, b: (
            f"returns the sum of all positive integers strictly below n that are divisible by {a} "
            f"or by {b} (each such integer counted once)"
        ),
        correct=lambda a, b: (
            "def sum_multiples(n):\n"
            f"    return sum(i for i in range(1, n) if i % {a} == 0 or i % {b} == 0)\n"
        ),
        buggy=lambda a, b: (
            "def sum_multiples(n):\n"
            f"    return sum(i for i in range(1, n + 1) if i % {a} == 0 or i % {b} == 0)\n"
        ),
        inputs=lambda a, b: [(1,), (10,), (a * b,), (3 * a,), (100,)],
        plan=lambda a, b: (
            "Loop over 1..n-1 (strictly below n); add i when i % a == 0 or i % b == 0."
        ),
        misleading_plan=lambda a, b: (
            "Loop over 1..n inclusive and add the multiples of a and of b."
        ),
        variants=(
            {"a": 3, "b": 5},
            {"a": 2, "b": 7},
            {"a": 4, "b": 6},
            {"a": 3, "b": 11},
            {"a": 5, "b": 8},
        ),
    ),
    _CodeTemplate(
        function="count_letters",
        describe=lambda letters: (
            f"returns how many characters of the string s are one of the letters '{letters}', "
            "ignoring case"
        ),
        correct=lambda letters: (
            f"def count_letters(s):\n    return sum(1 for c in s.lower() if c in {letters!r})\n"
        ),
        buggy=lambda letters: (
            f"def count_letters(s):\n    return sum(1 for c in s if c in {letters!r})\n"
        ),
        inputs=lambda letters: [
            ("",),
            (letters,),
            (letters.upper(),),
            ("Hello World, ABC xyz!",),
            ("Mississippi RIVER",),
        ],
        plan=lambda letters: (
            "Lower-case s first, then count characters that are in the letter set."
        ),
        misleading_plan=lambda letters: (
            "Count characters of s that are in the letter set as given."
        ),
        variants=(
            {"letters": "aeiou"},
            {"letters": "xyz"},
            {"letters": "rstln"},
            {"letters": "aeiouy"},
            {"letters": "bcd"},
        ),
    ),
    _CodeTemplate(
        function="fizz",
        describe=lambda p, q, w1, w2: (
            f"returns a list for i = 1..n: '{w1}{w2}' if i is divisible by both {p} and {q}, "
            f"'{w1}' if only by {p}, '{w2}' if only by {q}, otherwise str(i)"
        ),
        correct=lambda p, q, w1, w2: (
            "def fizz(n):\n"
            "    out = []\n"
            "    for i in range(1, n + 1):\n"
            f"        word = ({w1!r} if i % {p} == 0 else '') + ({w2!r} if i % {q} == 0 else '')\n"
            "        out.append(word or str(i))\n"
            "    return out\n"
        ),
        buggy=lambda p, q, w1, w2: (
            "def fizz(n):\n"
            "    out = []\n"
            "    for i in range(1, n + 1):\n"
            f"        if i % {p} == 0:\n"
            f"            out.append({w1!r})\n"
            f"        elif i % {q} == 0:\n"
            f"            out.append({w2!r})\n"
            "        else:\n"
            "            out.append(str(i))\n"
            "    return out\n"
        ),
        inputs=lambda p, q, w1, w2: [(0,), (1,), (p * q,), (2 * p * q + 1,)],
        plan=lambda p, q, w1, w2: (
            "Build each word from both divisibility tests together, so both words appear when both divide."
        ),
        misleading_plan=lambda p, q, w1, w2: (
            "Test divisibility by p first, else by q, else use the number."
        ),
        variants=(
            {"p": 3, "q": 5, "w1": "Fizz", "w2": "Buzz"},
            {"p": 2, "q": 3, "w1": "Foo", "w2": "Bar"},
            {"p": 4, "q": 7, "w1": "Ping", "w2": "Pong"},
            {"p": 3, "q": 7, "w1": "Tic", "w2": "Tac"},
            {"p": 5, "q": 6, "w1": "Hop", "w2": "Skip"},
        ),
    ),
    _CodeTemplate(
        function="shift_letters",
        describe=lambda k: (
            f"returns s with every lowercase letter a-z moved {k} places forward in the alphabet, "
            "wrapping around from z to a, and every other character unchanged"
        ),
        correct=lambda k: (
            "def shift_letters(s):\n"
            "    return ''.join(\n"
            f"        chr((ord(c) - 97 + {k}) % 26 + 97) if 'a' <= c <= 'z' else c for c in s\n"
            "    )\n"
        ),
        buggy=lambda k: (
            "def shift_letters(s):\n"
            f"    return ''.join(chr(ord(c) + {k}) if 'a' <= c <= 'z' else c for c in s)\n"
        ),
        inputs=lambda k: [
            ("",),
            ("abc",),
            ("xyz",),
            ("Hello, World!",),
            ("the quick brown fox jumps",),
        ],
        plan=lambda k: (
            "Map each lowercase letter through (ord(c) - 97 + k) % 26 + 97 so it wraps; keep others."
        ),
        misleading_plan=lambda k: (
            "Add k to the character code of each lowercase letter; keep others."
        ),
        variants=({"k": 3}, {"k": 5}, {"k": 7}, {"k": 13}, {"k": 20}),
    ),
    _CodeTemplate(
        function="sequence_term",
        describe=lambda a, b: (
            f"returns term n (counting from 0) of the sequence that starts {a}, {b} and in which "
            "every later term is the sum of the two before it"
        ),
        correct=lambda a, b: (
            "def sequence_term(n):\n"
            f"    x, y = {a}, {b}\n"
            "    for _ in range(n):\n"
            "        x, y = y, x + y\n"
            "    return x\n"
        ),
        buggy=lambda a, b: (
            "def sequence_term(n):\n"
            f"    x, y = {a}, {b}\n"
            "    for _ in range(n):\n"
            "        x, y = y, x + y\n"
            "    return y\n"
        ),
        inputs=lambda a, b: [(0,), (1,), (2,), (10,), (25,)],
        plan=lambda a, b: (
            "Keep the pair (term i, term i+1), advance it n times and return the first of the pair."
        ),
        misleading_plan=lambda a, b: (
            "Keep the pair of the last two terms, advance it n times and return the newer one."
        ),
        variants=(
            {"a": 0, "b": 1},
            {"a": 2, "b": 1},
            {"a": 1, "b": 3},
            {"a": 3, "b": 4},
            {"a": 5, "b": 2},
        ),
    ),
    _CodeTemplate(
        function="count_primes",
        describe=lambda m, r: (
            f"returns how many prime numbers p with p <= n satisfy p % {m} == {r}"
        ),
        correct=lambda m, r: (
            "def count_primes(n):\n"
            "    def is_prime(k):\n"
            "        return k > 1 and all(k % d for d in range(2, int(k ** 0.5) + 1))\n"
            f"    return sum(1 for p in range(2, n + 1) if is_prime(p) and p % {m} == {r})\n"
        ),
        buggy=lambda m, r: (
            "def count_primes(n):\n"
            "    def is_prime(k):\n"
            "        return k > 1 and all(k % d for d in range(2, int(k ** 0.5) + 1))\n"
            f"    return sum(1 for p in range(2, n) if is_prime(p) and p % {m} == {r})\n"
        ),
        inputs=lambda m, r: [(1,), (2,), (50,), (_first_prime(m, r),), (200,)],
        plan=lambda m, r: (
            "Test every p from 2 to n inclusive for primality by trial division up to sqrt(p)."
        ),
        misleading_plan=lambda m, r: "Test every p in range(2, n) for primality by trial division.",
        variants=(
            {"m": 4, "r": 1},
            {"m": 4, "r": 3},
            {"m": 6, "r": 1},
            {"m": 6, "r": 5},
            {"m": 10, "r": 3},
        ),
    ),
    _CodeTemplate(
        function="kth_largest",
        describe=lambda k: (
            f"returns the {_ordinal(k)} largest distinct value in the list xs, or None if xs has "
            f"fewer than {k} distinct values"
        ),
        correct=lambda k: (
            "def kth_largest(xs):\n"
            "    values = sorted(set(xs), reverse=True)\n"
            f"    return values[{k - 1}] if len(values) >= {k} else None\n"
        ),
        buggy=lambda k: (
            "def kth_largest(xs):\n"
            "    values = sorted(xs, reverse=True)\n"
            f"    return values[{k - 1}] if len(values) >= {k} else None\n"
        ),
        inputs=lambda k: [
            ([],),
            (list(range(k + 2)),),
            ([9, 9, 9] + list(range(k + 1)),),
            ([5] * (k + 1),),
        ],
        plan=lambda k: (
            "Remove duplicates with set(), sort descending, and index k-1 if there are enough values."
        ),
        misleading_plan=lambda k: (
            "Sort xs descending and take index k-1 if the list is long enough."
        ),
        variants=({"k": 2}, {"k": 3}, {"k": 4}, {"k": 5}, {"k": 6}),
    ),
    _CodeTemplate(
        function="chunk_sums",
        describe=lambda k: (
            f"splits the list xs into consecutive chunks of {k} items (the last chunk may be "
            "shorter) and returns the list of the chunks' sums"
        ),
        correct=lambda k: (
            "def chunk_sums(xs):\n"
            f"    return [sum(xs[i:i + {k}]) for i in range(0, len(xs), {k})]\n"
        ),
        buggy=lambda k: (
            "def chunk_sums(xs):\n"
            f"    return [sum(xs[i:i + {k}]) for i in range(0, len(xs) - {k} + 1, {k})]\n"
        ),
        inputs=lambda k: [
            ([],),
            (list(range(k)),),
            (list(range(3 * k + 1)),),
            ([7] * (2 * k - 1),),
        ],
        plan=lambda k: (
            "Step i through range(0, len(xs), k) so the last, shorter chunk is included."
        ),
        misleading_plan=lambda k: "Step i through range(0, len(xs) - k + 1, k) and sum each slice.",
        variants=({"k": 2}, {"k": 3}, {"k": 4}, {"k": 5}, {"k": 6}),
    ),
    _CodeTemplate(
        function="digit_power_sum",
        describe=lambda p: (
            f"returns the sum of the digits of the non-negative integer n, each raised to the power {p}"
        ),
        correct=lambda p: (
            f"def digit_power_sum(n):\n    return sum(int(d) ** {p} for d in str(n))\n"
        ),
        buggy=lambda p: (
            "def digit_power_sum(n):\n"
            "    total = 0\n"
            "    while n > 9:\n"
            f"        total += (n % 10) ** {p}\n"
            "        n //= 10\n"
            "    return total\n"
        ),
        inputs=lambda p: [(0,), (7,), (153,), (9474,), (120034,)],
        plan=lambda p: (
            "Walk over every digit of str(n), including the leading one, and add digit ** p."
        ),
        misleading_plan=lambda p: "Peel digits with n % 10 while n > 9 and add each digit ** p.",
        variants=({"p": 1}, {"p": 2}, {"p": 3}, {"p": 4}, {"p": 5}),
    ),
)


def _ordinal(k: int) -> str:
    return {2: "2nd", 3: "3rd"}.get(k, f"{k}th")


def _first_prime(m: int, r: int) -> int:
    candidate = max(r, 2)
    while not (
        candidate % m == r and all(candidate % d for d in range(2, int(candidate**0.5) + 1))
    ):
        candidate += 1
    return candidate


def _run_reference(source: str, function: str, inputs: list[tuple[Any, ...]]) -> list[object]:
    """Expected outputs, computed by the package's own reference implementation (trusted code)."""
    namespace: dict[str, object] = {}
    exec(compile(source, f"<reference {function}>", "exec"), namespace)  # noqa: S102 - our own source
    implementation = namespace[function]
    return [implementation(*args) for args in inputs]  # type: ignore[operator]


def _code_tasks() -> Iterator[Task]:
    number = 0
    for template in _CODE_TEMPLATES:
        for params in template.variants:
            number += 1
            source = template.correct(**params)
            inputs = template.inputs(**params)
            expected = _run_reference(source, template.function, inputs)
            tests = "".join(
                f"assert {template.function}{_call_args(args)} == {value!r}, "
                f"{f'{template.function}{_call_args(args)}'!r}\n"
                for args, value in zip(inputs, expected, strict=True)
            )
            question = (
                f"Write a Python function `{template.function}` that {template.describe(**params)}. "
                "Reply with the code in one fenced python block."
            ).replace(f"`{template.function}`", f"`{template.function}({_parameters(source)})`")
            yield Task(
                id=f"code-{number:03d}",
                domain="code",
                question=question,
                reference=tests,
                grader="code",
                solution=source,
                work=template.plan(**params),
                mistakes=(template.buggy(**params),),
                plan=template.plan(**params),
                misleading_plan=template.misleading_plan(**params),
            )


def _call_args(args: tuple[Any, ...]) -> str:
    return "(" + ", ".join(repr(arg) for arg in args) + ")"


def _parameters(source: str) -> str:
    header = source.splitlines()[0]
    return header[header.index("(") + 1 : header.index(")")]


# lookup ------------------------------------------------------------------------------------------


def _lookup_tasks() -> Iterator[Task]:
    number = 0
    for country, capital, confusion in facts.CAPITALS:
        number += 1
        answer = capital.split("|")[0]
        yield Task(
            id=f"lookup-{number:03d}",
            domain="lookup",
            question=f"What is the capital city of {country}?",
            reference=capital,
            grader="exact",
            solution=answer,
            work=f"The capital of {country} is {answer}.",
            mistakes=(confusion,),
            plan="Recall the seat of government, not the largest city.",
            misleading_plan="Name the country's largest and best-known city.",
        )
    for element, symbol, confusion in facts.ELEMENT_SYMBOLS:
        number += 1
        yield Task(
            id=f"lookup-{number:03d}",
            domain="lookup",
            question=f"What is the chemical symbol of {element}?",
            reference=symbol,
            grader="exact",
            solution=symbol,
            work=f"The symbol of {element} is {symbol}.",
            mistakes=(confusion,),
            plan="Recall the symbol from the periodic table; many come from Latin names.",
            misleading_plan="Take the first letters of the English name.",
        )
    for question, options, correct in facts.MULTIPLE_CHOICE:
        number += 1
        letters = "ABCDEFGH"[: len(options)]
        shown = "\n".join(
            f"{letter}) {option}" for letter, option in zip(letters, options, strict=True)
        )
        yield Task(
            id=f"lookup-{number:03d}",
            domain="lookup",
            question=f"{question}\n{shown}\nAnswer with the letter of the correct option.",
            reference=letters[correct],
            grader="choice",
            solution=letters[correct],
            work=f"{letters[correct]}) {options[correct]} is correct.",
            mistakes=tuple(letter for letter in letters if letter != letters[correct]),
            plan="Eliminate options that are clearly wrong, then choose.",
            misleading_plan="Choose the option that sounds most familiar.",
        )


# the suite ---------------------------------------------------------------------------------------


@cache
def load_suite() -> tuple[Task, ...]:
    """Every task of the bundled suite, in a fixed order (cached; built in a few milliseconds)."""
    rng = random.Random(SUITE_SEED)
    tasks = [
        *_arithmetic_tasks(rng, per_template=6),
        *_countdown_tasks(rng, count=50),
        *_code_tasks(),
        *_lookup_tasks(),
    ]
    return tuple(tasks)


@cache
def _by_question() -> dict[str, Task]:
    return {task.question.strip(): task for task in load_suite()}


def task_for_question(text: str) -> Task | None:
    """The suite task whose question is exactly ``text`` (surrounding whitespace ignored)."""
    return _by_question().get(text.strip())
