"""Comparing runs: their steps aligned by (round, index), each position marked against the first
run, word diffs of what changed, and the outcomes side by side (``wire.Comparison``).

Plain data in (``wire.RunSummary`` and ``wire.Step`` dicts, plus each step's response), one
``wire.Comparison`` out; ``selectors.run_compare`` does the reading.

Word diffs come from diff-match-patch (Google's Myers-based diff with its semantic cleanup), in
its C++ build (``fast_diff_match_patch``). Texts are cut into words, runs of spaces and single
punctuation marks; each distinct token becomes one character, the strings of those characters are
diffed (the library's documented way to diff by lines or words), and the result is read back as
tokens, so a change never splits a word. The C++ build diffs two unrelated 300-word responses in
about 10 ms where the pure-Python one takes about half a second, so a comparison of hundreds of
changed steps stays fast.

Bounds: each diff has a time limit (the library then settles for a valid, coarser diff) taken
from the comparison's budget; once the budget is spent, a changed text is shown deleted and
inserted whole. Past its time limit the library still does work that grows with the square of
the length, so a text of more than ``MAX_DIFF_TOKENS`` words is diffed by lines, and one of more
lines than that is shown deleted and inserted whole.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from itertools import chain
from typing import Any, Final

import fast_diff_match_patch

from orchestrator import wire

MAX_RUNS: Final = 4
"""How many runs one comparison takes at most."""
MAX_STEPS: Final = 20_000
"""How many steps the compared runs may hold together."""
DIFF_TIME_LIMIT: Final = 0.2
"""Seconds one word diff may take before the library settles for a coarser one."""
DIFF_BUDGET: Final = 2.0
"""Seconds all the word diffs of one comparison may take together."""
MAX_DIFF_TOKENS: Final = 4000
"""The most words (else lines) a side of one diff may have (a worst case then takes 0.2 s)."""

_WORD = re.compile(r"\w+|\s+|[^\w\s]")
_LINE = re.compile(r"[^\n]*\n|[^\n]+")
_ALPHABET: Final = "".join(map(chr, range(1, 2 * MAX_DIFF_TOKENS + 1)))
_OPS: Final = {"=": "equal", "+": "insert", "-": "delete"}


class WordDiffer:
    """Word diffs within one time budget (one per comparison)."""

    def __init__(self, *, budget: float = DIFF_BUDGET, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.deadline = clock() + budget

    def diff(self, old: str, new: str) -> list[wire.DiffPart]:
        """The word diff of ``old`` into ``new``: its parts' texts, joined without the inserted
        ones, give ``old``; without the deleted ones, ``new``."""
        if old == new:
            return [{"op": "equal", "text": old}] if old else []
        remaining = self.deadline - self.clock()
        if remaining <= 0:  # 0 would mean "no limit" to the library
            return _replaced(old, new)
        old_tokens, new_tokens = _WORD.findall(old), _WORD.findall(new)
        if max(len(old_tokens), len(new_tokens)) > MAX_DIFF_TOKENS:
            old_tokens, new_tokens = _LINE.findall(old), _LINE.findall(new)
            if max(len(old_tokens), len(new_tokens)) > MAX_DIFF_TOKENS:
                return _replaced(old, new)
        # Each distinct token one character (there are fewer than the characters before the
        # surrogates, and the library keeps 0 free).
        codes = dict(zip(dict.fromkeys(chain(old_tokens, new_tokens)), _ALPHABET, strict=False))
        text_of = dict(zip(codes.values(), codes, strict=True))
        changes = fast_diff_match_patch.diff(
            "".join(map(codes.__getitem__, old_tokens)),
            "".join(map(codes.__getitem__, new_tokens)),
            timelimit=min(DIFF_TIME_LIMIT, remaining),
            checklines=False,
            cleanup="Semantic",
            counts_only=False,
        )
        parts: list[wire.DiffPart] = []
        for op, chars in changes:
            text = "".join(map(text_of.__getitem__, chars))
            if parts and parts[-1]["op"] == _OPS[op]:
                parts[-1]["text"] += text
            elif text:
                parts.append({"op": _OPS[op], "text": text})  # type: ignore[typeddict-item]
        return parts


def _replaced(old: str, new: str) -> list[wire.DiffPart]:
    parts: list[wire.DiffPart] = []
    if old:
        parts.append({"op": "delete", "text": old})
    if new:
        parts.append({"op": "insert", "text": new})
    return parts


def access_text(access: Any) -> str:
    """An access list as the diff shows it: "all", "none", or the indices it reads."""
    if access == "all":
        return "all"
    if isinstance(access, list):
        return ", ".join(str(index) for index in access) if access else "none"
    return str(access)


def _field(step: Mapping[str, Any], response: str, name: str) -> str:
    if name == "response":
        return response
    if name == "access":
        return access_text(step["access"])
    return str(step[name])


def step_diff(
    first: Mapping[str, Any],
    first_response: str,
    other: Mapping[str, Any],
    other_response: str,
    *,
    differ: WordDiffer,
) -> wire.StepDiff | None:
    """How ``other`` differs from ``first`` (two steps at one position), or None if it does not."""
    changed = changed_fields(first, first_response, other, other_response)
    if not changed:
        return None
    diff: dict[str, Any] = {"changed": changed}
    for name in wire.DIFF_FIELDS:
        diff[name] = differ.diff(
            _field(first, first_response, name), _field(other, other_response, name)
        )
    return diff  # type: ignore[return-value]


def changed_fields(
    first: Mapping[str, Any], first_response: str, other: Mapping[str, Any], other_response: str
) -> list[str]:
    """The compared fields in which ``other`` differs from ``first`` (no word diffs)."""
    return [
        name
        for name in wire.COMPARED_FIELDS
        if _field(first, first_response, name) != _field(other, other_response, name)
    ]


def _overall(first_present: bool, later: Sequence[wire.ChangeKind | None]) -> wire.ChangeKind:
    """A position's kind from each later run's: only in later runs, the same everywhere, gone from
    every later run, or otherwise changed."""
    kinds = [change for change in later if change is not None]
    if not first_present:
        return "added"
    if all(change == "same" for change in kinds):
        return "same"
    if all(change == "removed" for change in kinds):
        return "removed"
    return "changed"


def align(
    steps_of_runs: Sequence[Sequence[wire.Step]],
    responses: Mapping[int, str],
    *,
    differ: WordDiffer,
    word_diffs: bool = True,
) -> list[wire.CompareRow]:
    """One row per (round, index) that any run has, in order, each marked against the first run.
    Without ``word_diffs`` every diff is None (the kinds of change are still found)."""
    by_position = [
        {(step["round"], step["index"]): step for step in steps} for steps in steps_of_runs
    ]
    positions = sorted(set().union(*by_position))
    rows: list[wire.CompareRow] = []
    for position in positions:
        steps = [steps.get(position) for steps in by_position]
        first = steps[0]
        changes: list[wire.ChangeKind | None] = [None]
        diffs: list[wire.StepDiff | None] = [None]
        for step in steps[1:]:
            diff = None
            if first is None:
                change: wire.ChangeKind | None = None if step is None else "added"
            elif step is None:
                change = "removed"
            elif word_diffs:
                diff = step_diff(
                    first,
                    responses.get(first["id"], ""),
                    step,
                    responses.get(step["id"], ""),
                    differ=differ,
                )
                change = "same" if diff is None else "changed"
            else:
                same = not changed_fields(
                    first, responses.get(first["id"], ""), step, responses.get(step["id"], "")
                )
                change = "same" if same else "changed"
            changes.append(change)
            diffs.append(diff)
        rows.append(
            {
                "round": position[0],
                "index": position[1],
                "change": _overall(first is not None, changes[1:]),
                "changes": changes,
                "steps": steps,
                "diffs": diffs,
            }
        )
    return rows


# The outcome table's lines: key, label, and how to read the figure from a run summary.
_OUTCOME: Final[tuple[tuple[str, str, Callable[[wire.RunSummary], Any]], ...]] = (
    ("status", "Status", lambda run: run["status"]),
    ("answer", "Final answer", lambda run: run["answer"]),
    ("score", "Score", lambda run: run["score"]),
    ("tokens", "Tokens", lambda run: run["totals"]["tokens_in"] + run["totals"]["tokens_out"]),
    ("cost", "Cost", lambda run: run["totals"]["cost"]),
    ("model_calls", "Model calls", lambda run: run["totals"]["model_calls"]),
    ("wall_time", "Wall time (s)", lambda run: run["totals"]["wall_time"]),
    ("step_count", "Steps", lambda run: run["totals"]["step_count"]),
)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def outcome(runs: Sequence[wire.RunSummary], *, differ: WordDiffer) -> list[wire.OutcomeRow]:
    """The outcome table: each figure of each run, and how it differs from the first run's."""
    rows: list[wire.OutcomeRow] = []
    for key, label, read in _OUTCOME:
        values = [read(run) for run in runs]
        first = values[0]
        rows.append(
            {
                "key": key,
                "label": label,
                "values": values,
                "differs": [value != first for value in values],
                "deltas": [
                    value - first if _is_number(value) and _is_number(first) else None
                    for value in values
                ],
                "diffs": [
                    differ.diff(first, value) if key == "answer" and i else None
                    for i, value in enumerate(values)
                ],
            }
        )
    return rows


def compare(
    *,
    runs: Sequence[wire.CompareRun],
    steps_of_runs: Sequence[Sequence[wire.Step]],
    responses: Mapping[int, str],
    differ: WordDiffer | None = None,
    word_diffs: bool = True,
) -> wire.Comparison:
    """The comparison of ``runs`` (the first is the reference), given each run's steps in order
    and the responses of their steps by step id; without ``word_diffs``, the steps' diffs are
    left out (None) and only their kinds of change found."""
    differ = differ or WordDiffer()
    rows = align(steps_of_runs, responses, differ=differ, word_diffs=word_diffs)
    counts = dict.fromkeys(wire.CHANGE_KINDS, 0)
    for row in rows:
        counts[row["change"]] += 1
    return {
        "runs": list(runs),
        "steps": rows,
        "counts": counts,
        "outcome": outcome([run["run"] for run in runs], differ=differ),
    }
