"""Code grading attacked by its answers: every cheat known to have passed a wrong answer, and
variants, graded wrong; right answers graded right in every form a reference is written.

Real sandboxes (bubblewrap), no stand-ins. Each cheat is checked beside the right answer under the
same reference, so a test here fails if grading passes nothing or everything.
"""

from __future__ import annotations

import threading

import pytest

from orchestrator.engine.code_grading import CodeVerdict, grade_code, reference_problem
from orchestrator.engine.grading import grade
from orchestrator.engine.sandbox import Limits

pytestmark = pytest.mark.usefixtures("code_sandbox")

ASSERTS = "assert add(2, 3) == 5\nassert add(-1, 1) == 0\nassert add(10, 32) == 42\n"
RIGHT = "def add(a, b):\n    return a + b\n"
WRONG_BODY = "    return 0\n"

UNITTEST = """\
import unittest
from solution import add


class AddTests(unittest.TestCase):
    def test_small(self):
        self.assertEqual(add(2, 3), 5)

    def test_negative(self):
        self.assertEqual(add(-1, 1), 0)

    def test_strings_fail(self):
        with self.assertRaises(TypeError):
            add(1, None)
"""


def passed(answer: str, reference: str = ASSERTS) -> bool:
    return grade_code(answer, reference).passed


# References as people write them --------------------------------------------------------------


@pytest.mark.parametrize(
    "reference",
    [
        ASSERTS,
        UNITTEST,
        UNITTEST + "\n\nunittest.main()\n",
        UNITTEST + "\n\nif __name__ == '__main__':\n    unittest.main()\n",
        ">>> add(2, 3)\n5\n>>> add('a', 'b')\n'ab'\n>>> add([1], [2])\n[1, 2]\n",
        "import math\nfrom solution import *\nfor a, b in [(1, 2), (3, 4)]:\n"
        "    assert add(a, b) == a + b\nassert math.isclose(add(0.1, 0.2), 0.3)\n",
    ],
    ids=["asserts", "unittest", "unittest-main", "unittest-main-guarded", "doctest", "loop"],
)
def test_a_right_answer_passes_and_a_wrong_one_fails_in_every_form(reference):
    assert reference_problem(reference) is None
    verdict = grade_code(RIGHT, reference)
    assert verdict == CodeVerdict(passed=True, checks=verdict.checks, failure="")
    assert verdict.checks >= 2
    wrong = grade_code("def add(a, b):\n" + WRONG_BODY, reference)
    assert not wrong.passed and wrong.failure


def test_the_failure_says_which_test_failed():
    verdict = grade_code("def add(a, b):\n    return a - b\n", UNITTEST)
    assert not verdict.passed
    assert verdict.failure == "AddTests.test_negative: AssertionError: -2 != 0"


def test_values_travel_as_data_and_objects_stay_with_the_answer():
    answer = (
        "from dataclasses import dataclass\n"
        "@dataclass\nclass Point:\n    x: int\n    y: int\n"
        "def shift(p, dx):\n    return Point(p.x + dx, p.y)\n"
        "def squares(n):\n    for i in range(n):\n        yield i * i\n"
        "def sort_in_place(items):\n    items.sort()\n"
        "class TooBig(ValueError):\n    pass\n"
        "def check(n):\n    if n > 9:\n        raise TooBig(n)\n    return {n: (n, {n}), 'b': b'x'}\n"
        "LIMIT = 9\n"
    )
    reference = (
        "from solution import Point, shift, squares, sort_in_place, check, TooBig, LIMIT\n"
        "p = shift(Point(1, 2), 3)\n"
        "assert (p.x, p.y) == (4, 2)\n"
        "assert shift(Point(0, 0), 1) == Point(1, 0)\n"
        "assert list(squares(4)) == [0, 1, 4, 9]\n"
        "assert 9 in squares(4)\n"
        "items = [3, 1, 2]\nsort_in_place(items)\nassert items == [1, 2, 3]\n"
        "assert check(2) == {2: (2, {2}), 'b': b'x'}\n"
        "assert LIMIT == 9\n"
        "try:\n    check(10)\nexcept TooBig:\n    pass\nelse:\n    raise AssertionError('no raise')\n"
        "try:\n    check(10)\nexcept ValueError:\n    pass\n"
    )
    verdict = grade_code(answer, reference)
    assert verdict.passed, verdict


def test_a_value_that_does_not_serialise_is_wrong():
    answer = "class Box:\n    pass\ndef add(a, b):\n    return Box()\n"
    assert not passed(answer)


# Cheats that passed a wrong answer when the answer ran beside the tests -------------------------

CHEATS = {
    # The runner's secrets read from the interpreter the answer shared with it.
    "main-module": "import sys\nfor value in list(vars(sys.modules['__main__']).values()):\n"
    "    if isinstance(value, str) and len(value) == 32:\n        print(value, flush=True)\n"
    "import os\nos._exit(0)\n",
    "caller-frame": "import sys\nframe = sys._getframe(1)\n"
    "print(frame.f_locals.get('nonce', ''))\nraise SystemExit(0)\n",
    "stdin-again": "import sys, os\nos.lseek(0, 0, 0)\nprint(sys.stdin.read())\nraise SystemExit(0)\n",
    "atexit": "import atexit, sys\n"
    "atexit.register(lambda: (sys.stdin.seek(0), print(sys.stdin.readline().strip())))\n"
    "def add(a, b):\n    raise SystemExit(0)\n",
    "exec-no-op": "import builtins\nbuiltins.exec = lambda *args, **kwargs: None\n"
    "def add(a, b):\n    return 0\n",
    "empty-tests": "import sys\nmain = sys.modules['__main__']\n"
    "for name in ('tests', 'reference', 'source'):\n    setattr(main, name, '')\n"
    "def add(a, b):\n    return 0\n",
    # Through the tests' own text and machinery.
    "always-equal": "class Anything:\n    def __eq__(self, other):\n        return True\n"
    "    __hash__ = object.__hash__\n"
    "def add(a, b):\n    return Anything()\n",
    "always-equal-int": "class Anything(int):\n    def __eq__(self, other):\n        return True\n"
    "    __hash__ = int.__hash__\n"
    "def add(a, b):\n    return Anything(0)\n",
    "always-equal-str": "class Anything(str):\n    def __eq__(self, other):\n        return True\n"
    "    __hash__ = str.__hash__\n"
    "def add(a, b):\n    return Anything('')\n",
    "read-the-tests": "import re\nexpected = {}\n"
    "for name in ('tests.py', '/tmp/tests.py', 'main.py'):\n"
    "    try:\n        text = open(name).read()\n    except OSError:\n        continue\n"
    "    for a, b, value in re.findall(r'add\\((-?\\d+), (-?\\d+)\\) == (-?\\d+)', text):\n"
    "        expected[(int(a), int(b))] = int(value)\n"
    "def add(a, b):\n    return expected.get((a, b), 0)\n",
    "patch-assert-equal": "import unittest\n"
    "unittest.TestCase.assertEqual = lambda self, first, second, msg=None: None\n"
    "unittest.TestCase.assertRaises = lambda self, *args, **kwargs: __import__('contextlib')"
    ".suppress(BaseException)\n"
    "def add(a, b):\n    return 0\n",
    "patch-assertion-error": "import builtins\n"
    "class Quiet(Exception):\n    pass\n"
    "builtins.AssertionError = Quiet\n"
    "def add(a, b):\n    return 0\n",
    "fake-report": 'print(\'REPORT {"passed": true, "checks": 3, "failure": ""}\', flush=True)\n'
    "import sys\nsys.stderr.write('OK\\n')\nraise SystemExit(0)\n",
    "fake-manifest": "import os, sys, json\n"
    "os.write(int(sys.argv[2]), b'{\"names\": []}\\n')\n"
    'os.write(int(sys.argv[2]), b\'{"ok": ["i", "5"]}\\n\' * 10)\n'
    "os._exit(0)\n",
    "kill-self": "import os, signal\ndef add(a, b):\n    os.kill(os.getpid(), signal.SIGKILL)\n",
    "gc-and-inspect": "import gc, os\n"
    "def add(a, b):\n"
    "    for found in gc.get_objects():\n"
    "        if isinstance(found, dict) and isinstance(found.get('nonce'), str):\n"
    "            print(found['nonce'], flush=True)\n"
    "            os._exit(0)\n"
    "    return 0\n",
    "raise-system-exit-in-call": "def add(a, b):\n    raise SystemExit(0)\n",
    "raise-keyboard-interrupt": "def add(a, b):\n    raise KeyboardInterrupt\n",
    "flood": "import sys\ndef add(a, b):\n    sys.stdout.write('x' * 10**7)\n    return 0\n",
    "deep-value": "def add(a, b):\n    value = []\n    for _ in range(10**5):\n"
    "        value = [value]\n    return value\n",
    "never-returns": "def add(a, b):\n    while True:\n        pass\n",
    "shadow-builtins": "def add(a, b):\n    return 0\n"
    "def isinstance(*args):\n    return True\n"
    "def sorted(*args):\n    return [0, 5, 42]\n"
    "def len(*args):\n    return 3\n",
}


@pytest.mark.parametrize("cheat", sorted(CHEATS))
@pytest.mark.parametrize("reference", [ASSERTS, UNITTEST], ids=["asserts", "unittest"])
def test_a_cheat_never_passes(cheat, reference):
    limits = Limits(wall_seconds=4, cpu_seconds=4)
    assert grade_code(RIGHT, reference, limits=limits).passed
    verdict = grade_code(CHEATS[cheat], reference, limits=limits)
    assert not verdict.passed, verdict


def test_the_tests_builtins_stay_pythons_own():
    """A reference that checks through builtins is not fooled by an answer that defines them."""
    reference = (
        "from solution import *\n"
        "assert isinstance(add(1, 2), int)\n"
        "assert sorted([add(2, 3), add(40, 2), add(0, 0)]) == [0, 5, 42]\n"
        "assert len(str(add(40, 2))) == 2\n"
    )
    without_import = reference.replace("from solution import *\n", "")
    for tests in (reference, without_import):
        assert grade_code(RIGHT, tests).passed
        assert not grade_code(CHEATS["shadow-builtins"], tests).passed


def test_skipped_tests_check_nothing():
    reference = (
        "import unittest\n\n\nclass T(unittest.TestCase):\n"
        "    @unittest.skip('later')\n    def test_it(self):\n        self.assertEqual(add(1, 2), 3)\n"
    )
    verdict = grade_code("def add(a, b):\n    return 0\n", reference)
    assert not verdict.passed and verdict.checks == 0


def test_the_expected_values_never_reach_the_answers_process():
    """An answer that gathers everything it can see (files, stdin, argv, its memory's objects,
    what the tests send it) finds no expected value: the tests assert so themselves."""
    secret = "918273645"
    spy = (
        "import gc, os, sys\n"
        "seen = []\n"
        "def look(path):\n"
        "    for root, dirs, files in os.walk(path):\n"
        "        for name in files:\n"
        "            try:\n"
        "                with open(os.path.join(root, name), 'rb') as handle:\n"
        "                    seen.append(handle.read(1 << 20).decode('latin-1'))\n"
        "            except OSError:\n"
        "                pass\n"
        "look('/tmp')\n"
        "for name in ('cmdline', 'environ', 'maps', 'status'):\n"
        "    seen.append(open('/proc/self/' + name, 'rb').read().decode('latin-1'))\n"
        "os.lseek(0, 0, 0)\n"
        "seen.append(sys.stdin.read())\n"
        "seen.append(repr(sys.argv))\n"
        "def spy(*args):\n"
        "    seen.append(repr(args))\n"
        "    seen.extend(repr(o)[:2000] for o in gc.get_objects() if isinstance(o, (str, dict)))\n"
        "    return '\\n'.join(seen)\n"
    )
    reference = (
        f"EXPECTED = {secret}\n"
        "found = spy(1, 2)\n"
        "assert str(EXPECTED) not in found, 'the answer saw the expected value'\n"
        "assert 'EXPECTED' not in found\n"
        "assert 'spy(1, 2)' not in found\n"
        "assert len(found) > 1000  # it did look\n"
    )
    verdict = grade_code(spy, reference, limits=Limits(wall_seconds=20, cpu_seconds=20))
    assert verdict.passed, verdict


# References that cannot run are refused up front -----------------------------------------------


@pytest.mark.parametrize(
    "reference, says",
    [
        ("4", "no test to run"),
        ("def check():\n    assert add(1, 2) == 3\n", "no test to run"),
        ("class T:\n    def test_a(self):\n        assert True\n", "no test to run"),
        ("assert add(1, 2) == 3 +", "not valid Python: line 1"),
        (">>> add(1,\n", "not valid Python"),
        ("", "empty"),
        ("assert True\n" * 10_000, "at most 65,536 characters"),
        ("(" * 300 + ")" * 300, "not valid Python"),
    ],
    ids=["number", "assert-in-function", "not-a-testcase", "syntax", "doctest-syntax", "empty",
         "too-long", "nesting"],
)  # fmt: skip
def test_a_reference_that_cannot_run_is_refused_with_the_reason(reference, says):
    problem = reference_problem(reference)
    assert problem is not None and says in problem


# Sandboxes of one grading and of others --------------------------------------------------------


def test_a_fork_bomb_and_a_memory_hog_graded_beside_a_right_answer_leave_it_right():
    bomb = (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    )
    hog = (
        "import os\nfor _ in range(5):\n    os.fork()\nblocks = []\n"
        "while True:\n    blocks.append(bytearray(b'x' * 2**24))\n"
    )
    verdicts: dict[str, CodeVerdict] = {}

    def grade_one(name: str, answer: str) -> None:
        verdicts[name] = grade_code(answer, ASSERTS, limits=Limits(wall_seconds=6, cpu_seconds=6))

    hostile = [
        threading.Thread(target=grade_one, args=(name, answer))
        for name, answer in (("bomb", bomb), ("hog", hog), ("bomb2", bomb))
    ]
    for thread in hostile:
        thread.start()
    try:
        # While they are at their worst, right answers are graded, several times over.
        for _ in range(5):
            assert grade_code(RIGHT, ASSERTS).passed
    finally:
        for thread in hostile:
            thread.join()
    assert not any(verdict.passed for verdict in verdicts.values())


def test_grade_reads_the_code_block_of_a_reply():
    reply = f"Here it is:\n```python\n{RIGHT}```\nDone."
    assert grade(reply, ASSERTS, "code") == 1.0
    assert grade(reply.replace("a + b", "a * b"), ASSERTS, "code") == 0.0
