"""How fast the plan parser reads valid workflows and rejects hostile text.

Method: each input is parsed in a loop (``repeat`` batches of ``number`` parses, timed with
``time.perf_counter``); the fastest batch is reported, which filters out noise from other
processes on the machine. Valid plans are reported in microseconds per parse; 10,000-character
garbage inputs of several kinds in microseconds per kilobyte, against a budget of 1,000 µs/KB
(the requirement is "well under a millisecond per kilobyte").

Run from the repository root: ``python -m bench.parse``. Ends with one JSON line.
"""

from __future__ import annotations

import json
import random
import string
import time
from collections.abc import Callable

from orchestrator.engine.plan import WorkflowError, format_workflow, parse_workflow
from orchestrator.engine.types import ALL, StepSpec, Workflow

GARBAGE_CHARS = 10_000
BUDGET_US_PER_KB = 1_000.0

FIVE_STEPS = Workflow(
    steps=(
        StepSpec(2, "Work out an efficient algorithm for the problem and explain it.", ()),
        StepSpec(0, "Implement the algorithm described above in Python.", (0,)),
        StepSpec(1, "Write five test cases, including edge cases, for the problem.", ()),
        StepSpec(3, "Run the tests above against the code mentally; list failures.", (1, 2)),
        StepSpec(0, "Fix the code using the failures found and return the final code.", ALL),
    )
)
CHAIN = Workflow(
    steps=(StepSpec(1, "Solve the problem step by step.", ()), StepSpec(0, "Check it.", ALL))
)
REASONING = (
    "The question asks for an algorithm and an implementation. Model 2 is strongest at "
    "reasoning, Model 0 at code. A tester should work independently of the coder. " * 20
)


def valid_inputs() -> dict[str, str]:
    steps = ", ".join(
        json.dumps({"worker": s.worker, "instruction": s.instruction, "access": list(s.access)})
        if s.access != ALL
        else json.dumps({"worker": s.worker, "instruction": s.instruction, "access": "all"})
        for s in FIVE_STEPS.steps
    )
    return {
        "chain_lists": format_workflow(CHAIN),
        "five_steps_lists": format_workflow(FIVE_STEPS),
        "five_steps_after_2kb_reasoning_fenced": (
            f"{REASONING}\n```python\n{format_workflow(FIVE_STEPS)}\n```\n"
        ),
        "five_steps_json": '{"steps": [' + steps + "]}",
        "accept_empty_lists": "model_id = []\nsubtasks = []\naccess_list = []",
    }


def garbage_inputs() -> dict[str, str]:
    rng = random.Random(20261130)
    printable = "".join(rng.choice(string.printable) for _ in range(GARBAGE_CHARS))
    words = ["model_id", "subtasks", "access_list", '"steps"', "=", "[", "]", '"', "'", ",", "0"]
    sprinkled = " ".join(rng.choice(words) for _ in range(GARBAGE_CHARS // 3))
    kinds = {
        "random_printable": printable,
        "random_grammar_tokens": sprinkled,
        "deep_brackets": "model_id = " + "[" * GARBAGE_CHARS,
        "deep_brackets_no_name": "[" * GARBAGE_CHARS,
        "unterminated_string": 'subtasks = ["' + "x" * GARBAGE_CHARS,
        "unterminated_triple_string": 'subtasks = ["""' + 'a"' * GARBAGE_CHARS,
        "unterminated_escapes": 'subtasks = ["' + "\\n" * GARBAGE_CHARS,
        "huge_list": "model_id = [" + "0, " * GARBAGE_CHARS,
        "huge_nested_list": "access_list = [[" + "0, " * GARBAGE_CHARS,
        "repeated_assignments": "model_id = [" * GARBAGE_CHARS,
        "repeated_open_strings": 'subtasks = ["' * GARBAGE_CHARS,
        "repeated_deep_brackets": ("model_id = " + "[" * 20) * GARBAGE_CHARS,
        "repeated_long_nested_lists": ("access_list = [[" + "0," * 60 + " ") * GARBAGE_CHARS,
        "repeated_names_not_assigned": '"steps" ' * GARBAGE_CHARS,
    }
    return {kind: text[:GARBAGE_CHARS] for kind, text in kinds.items()}


def fastest_seconds(run: Callable[[], object], *, number: int, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        for _ in range(number):
            run()
        best = min(best, (time.perf_counter() - started) / number)
    return best


def parse_valid(text: str) -> Callable[[], object]:
    return lambda: parse_workflow(text, pool_size=4)


def parse_garbage(text: str) -> Callable[[], object]:
    def run() -> None:
        try:
            parse_workflow(text, pool_size=4)
        except WorkflowError:
            return
        raise AssertionError("garbage was accepted")

    return run


def main() -> None:
    valid_us = {}
    print("valid plans (µs per parse)")
    for name, text in valid_inputs().items():
        parse_valid(text)()  # must parse
        valid_us[name] = round(fastest_seconds(parse_valid(text), number=2_000) * 1e6, 2)
        print(f"  {name:40} {len(text):6} chars {valid_us[name]:9.2f} µs")

    garbage_us_per_kb = {}
    print(f"garbage, {GARBAGE_CHARS:,} characters each (µs per KB; budget {BUDGET_US_PER_KB:,.0f})")
    for name, text in garbage_inputs().items():
        seconds = fastest_seconds(parse_garbage(text), number=50)
        garbage_us_per_kb[name] = round(seconds * 1e6 / (len(text) / 1000), 2)
        print(f"  {name:40} {seconds * 1e6:9.1f} µs  {garbage_us_per_kb[name]:8.2f} µs/KB")

    worst_kind = max(garbage_us_per_kb, key=garbage_us_per_kb.__getitem__)
    worst = garbage_us_per_kb[worst_kind]
    print(f"worst: {worst_kind} at {worst:.1f} µs/KB = {worst / BUDGET_US_PER_KB:.1%} of budget")
    print(
        json.dumps(
            {
                "bench": "parse",
                "valid_us_per_parse": valid_us,
                "garbage_us_per_kb": garbage_us_per_kb,
                "worst_garbage_kind": worst_kind,
                "worst_garbage_us_per_kb": worst,
                "worst_fraction_of_budget": round(worst / BUDGET_US_PER_KB, 4),
            }
        )
    )


if __name__ == "__main__":
    main()
