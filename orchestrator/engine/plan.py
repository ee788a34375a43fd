"""The plan format: reading what a conductor wrote into a Workflow, and writing one back.

A conductor answers with free-text reasoning followed by three Python-style lists of equal length::

    model_id    = [2, 0]
    subtasks    = ["Work out an efficient algorithm for ...", "Implement it in Python"]
    access_list = [[], ["all"]]

or, in JSON (what a pool whose ``conductor_output`` is "json" asks for, constrained to
``plan_schema``; accepted from any conductor), ``{"steps": [{"worker": 2, "instruction": "...",
"access": []}, ...]}``, or that list of step objects alone as the whole text. Either may sit
inside a ``` code fence or not. ``parse_plan`` says which form it read.

How the text is read (the rules a conductor can rely on):

- The text is scanned from left to right for assignments: a name (``model_id``, ``subtasks``,
  ``access_list``, optionally quoted) followed by ``=`` or ``:`` and ``[``; and ``"steps"`` followed
  by ``:`` and ``[``. Each assignment's list is read as a literal. A list that reads cleanly is
  skipped over as a whole, so a name mentioned inside an instruction is never mistaken for an
  assignment.
- For each name the **last** assignment counts, so a draft in the reasoning is overridden by the
  final lists. If that last assignment cannot be read (say the output was cut off), the error
  says so; an earlier draft is never silently used instead.
- If both forms occur, the one written last wins.
- Literals: lists, JSON objects, strings in ``'`` or ``"`` (also triple-quoted; Python/JSON
  escapes; adjacent strings are joined as in Python; raw newlines inside a string are tolerated),
  integers, and ``True/False/None/true/false/null`` (read so they can be rejected by name).
  Trailing commas and ``#`` comments are allowed. Nothing is ever evaluated.
- Access entries: ``"all"`` or ``["all"]`` (every earlier step), ``[]`` (none), or a list of
  earlier step indices (only when ``access_mode == "fine"``), normalised to ``ALL`` or a sorted
  tuple without duplicates.
- Three empty lists mean "accept the previous answer" (``Workflow(steps=())``).

Reading is linear in the length of the text and fast on hostile input: the literal reader uses
only regular expressions that cannot backtrack (possessive quantifiers), nesting is capped at
MAX_NESTING, a top-level list stops being read as soon as it has more entries than a workflow may
have steps, text already read by a failed attempt is not read again, and at most MAX_ASSIGNMENTS
assignments are tried (``python -m bench.parse`` measures it).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Final, TypeGuard

from orchestrator.engine.types import ALL, Access, AccessMode, PlanForm, StepSpec, Workflow

__all__ = [
    "LIST_NAMES",
    "ParsedPlan",
    "WorkflowError",
    "format_workflow",
    "format_workflow_json",
    "parse_plan",
    "parse_workflow",
    "plan_schema",
]

LIST_NAMES: Final = ("model_id", "subtasks", "access_list")
MAX_NESTING: Final = 8
"""Deepest bracket nesting the reader follows; a workflow needs 3 (the JSON form 4)."""
MAX_NESTED_ITEMS: Final = 64
"""Most entries read in a nested list or object before giving up."""
MAX_NUMBER_CHARS: Final = 40
MAX_ASSIGNMENTS: Final = 32
"""Most list assignments read from one text; a real answer has a handful, garbage may have many."""


class WorkflowError(ValueError):
    """A conductor's output that cannot be used as a workflow.

    The message says what is wrong and where (``"subtasks[2] is empty"``), in words fit to show
    back to the conductor and to a user.
    """


# --- reading literals --------------------------------------------------------------------------

# A candidate assignment. It starts with the name itself (no lookbehind) so the regex engine can
# skip ahead quickly; the character before the name is checked in Python.
_ASSIGNMENT = re.compile(r"""(model_id|subtasks|access_list|steps)(["']?)[ \t]*[=:]\s*+\[""")
_SPACE = re.compile(r"(?:\s++|#[^\n]*+)*+")
_NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?")
# The common case, a plain integer then ',' or ']', in one match.
_INTEGER_ITEM = re.compile(
    rf"[ \t\r\n]*+(-?[0-9]{{1,{MAX_NUMBER_CHARS}}})(?![0-9.eE])[ \t\r\n]*+([,\]])"
)
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KEYWORDS: Final[dict[str, Any]] = {
    "True": True,
    "true": True,
    "False": False,
    "false": False,
    "None": None,
    "null": None,
}
# "Unrolled loop" string bodies with possessive quantifiers: a missing closing quote fails after
# one pass, without backtracking.
_STRING = {
    '"': re.compile(r'"([^"\\]*+(?:\\.[^"\\]*+)*+)"', re.DOTALL),
    "'": re.compile(r"'([^'\\]*+(?:\\.[^'\\]*+)*+)'", re.DOTALL),
}
_TRIPLE_STRING = {
    '"': re.compile(r'"""([^"\\]*+(?:(?:\\.|"(?!""))[^"\\]*+)*+)"""', re.DOTALL),
    "'": re.compile(r"'''([^'\\]*+(?:(?:\\.|'(?!''))[^'\\]*+)*+)'''", re.DOTALL),
}
_ESCAPE = re.compile(
    r"\\(?:u([dD][89abAB][0-9a-fA-F]{2})\\u([dD][c-fC-F][0-9a-fA-F]{2})"  # surrogate pair
    r"|(\r?\n)"  # line continuation
    r"|x([0-9a-fA-F]{2})|u([0-9a-fA-F]{4})|U([0-9a-fA-F]{8})|([0-7]{1,3})|(.))",
    re.DOTALL,
)
_SIMPLE_ESCAPES: Final = {
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "b": "\b",
    "f": "\f",
    "v": "\v",
    "a": "\a",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "/": "/",
}


class _ReadError(Exception):
    """A literal that cannot be read; ``pos`` is where the reader stopped."""

    def __init__(self, problem: str, pos: int):
        super().__init__(problem)
        self.problem = problem
        self.pos = pos


class _TooManySteps(_ReadError):
    """A top-level list longer than a workflow may be."""


def _line_column(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return f"line {line}, column {column}"


def _found(text: str, pos: int) -> str:
    """What the reader found at ``pos``, short enough to quote in an error."""
    if pos >= len(text):
        return "the end of the text"
    snippet = text[pos : pos + 16].split("\n", 1)[0]
    return repr(snippet) if snippet else "a line break"


def _decode_escape(match: re.Match[str]) -> str:
    high, low, newline, hex2, hex4, hex8, octal, char = match.groups()
    if high is not None:
        return chr(0x10000 + ((int(high, 16) - 0xD800) << 10) + (int(low, 16) - 0xDC00))
    if newline is not None:
        return ""
    if hex2 is not None:
        return chr(int(hex2, 16))
    if hex4 is not None or hex8 is not None:
        code = int(hex4 if hex4 is not None else hex8, 16)
        if 0xD800 <= code <= 0xDFFF or code > 0x10FFFF:
            raise ValueError(f"invalid escape {match.group(0)!r}")
        return chr(code)
    if octal is not None:
        return chr(int(octal, 8))
    if char in "xuU":
        raise ValueError(f"incomplete escape {match.group(0)!r}")
    # Unknown escapes keep their backslash, as in Python.
    return _SIMPLE_ESCAPES.get(char, "\\" + char)


class _Reader:
    """A literal reader over ``text`` starting at ``pos``. Never evaluates anything."""

    __slots__ = ("pos", "text")

    def __init__(self, text: str, pos: int):
        self.text = text
        self.pos = pos

    def skip_space(self) -> None:
        self.pos = _SPACE.match(self.text, self.pos).end()  # type: ignore[union-attr]

    def fail(self, problem: str, pos: int | None = None) -> _ReadError:
        return _ReadError(problem, self.pos if pos is None else pos)

    def read_list(self, depth: int, limit: int, too_long: str = "") -> list[Any]:
        """Read ``[...]`` at ``pos``. More than ``limit`` entries fails: with ``too_long`` for a
        nested list, with _TooManySteps for the top-level list (``depth == 1``)."""
        if depth > MAX_NESTING:
            raise self.fail(f"lists are nested more than {MAX_NESTING} deep")
        text = self.text
        self.pos += 1
        items: list[Any] = []
        while True:
            integer = _INTEGER_ITEM.match(text, self.pos)
            if integer is not None:
                items.append(int(integer.group(1)))
                if len(items) > limit:
                    raise _TooManySteps("", self.pos) if depth == 1 else self.fail(too_long)
                self.pos = integer.end()
                if integer.group(2) == "]":
                    return items
                continue
            self.skip_space()
            if self.pos < len(text) and text[self.pos] == "]":
                self.pos += 1
                return items
            items.append(self.read_value(depth))
            if len(items) > limit:
                raise _TooManySteps("", self.pos) if depth == 1 else self.fail(too_long)
            self.skip_space()
            if self.pos >= len(text):
                raise self.fail("the text ends before the list is closed")
            if text[self.pos] == ",":
                self.pos += 1
            elif text[self.pos] != "]":
                raise self.fail(f"expected ',' or ']' but found {_found(text, self.pos)}")

    def read_object(self, depth: int) -> dict[str, Any]:
        if depth > MAX_NESTING:
            raise self.fail(f"lists are nested more than {MAX_NESTING} deep")
        text = self.text
        self.pos += 1
        fields: dict[str, Any] = {}
        while True:
            self.skip_space()
            if self.pos >= len(text):
                raise self.fail("the object is not closed: the text ends before its '}'")
            if text[self.pos] == "}":
                self.pos += 1
                return fields
            if text[self.pos] not in "\"'":
                raise self.fail(f"expected a quoted key but found {_found(text, self.pos)}")
            key = self.read_string()
            self.skip_space()
            if self.pos >= len(text) or text[self.pos] != ":":
                raise self.fail(f"expected ':' after a key but found {_found(text, self.pos)}")
            self.pos += 1
            fields[key] = self.read_value(depth)
            if len(fields) > MAX_NESTED_ITEMS:
                raise self.fail(f"an object has more than {MAX_NESTED_ITEMS} keys")
            self.skip_space()
            if self.pos >= len(text):
                raise self.fail("the object is not closed: the text ends before its '}'")
            if text[self.pos] == ",":
                self.pos += 1
            elif text[self.pos] != "}":
                raise self.fail(f"expected ',' or '}}' but found {_found(text, self.pos)}")

    def read_string(self) -> str:
        """Read one string, or several adjacent ones joined (``"a" "b"`` is ``"ab"``)."""
        parts = [self.read_one_string()]
        text = self.text
        while True:
            after = _SPACE.match(text, self.pos).end()  # type: ignore[union-attr]
            if after < len(text) and text[after] in "\"'":
                self.pos = after
                parts.append(self.read_one_string())
            else:
                return "".join(parts)

    def read_one_string(self) -> str:
        text, start = self.text, self.pos
        quote = text[start]
        triple = text.startswith(quote * 3, start)
        match = (_TRIPLE_STRING if triple else _STRING)[quote].match(text, start)
        if match is None:
            raise self.fail("unterminated string", start)
        self.pos = match.end()
        body = match.group(1)
        if "\\" not in body:
            return body
        try:
            return _ESCAPE.sub(_decode_escape, body)
        except ValueError as error:
            raise self.fail(f"{error} in a string", start) from None

    def read_value(self, depth: int) -> Any:
        text = self.text
        self.skip_space()
        if self.pos >= len(text):
            raise self.fail("the text ends before the list is closed")
        char = text[self.pos]
        if char == "[":
            return self.read_list(
                depth + 1, MAX_NESTED_ITEMS, f"a list has more than {MAX_NESTED_ITEMS} entries"
            )
        if char == "{":
            return self.read_object(depth + 1)
        if char in "\"'":
            return self.read_string()
        if char == "-" or "0" <= char <= "9":
            match = _NUMBER.match(text, self.pos)
            if match is None:
                raise self.fail(f"unexpected {_found(text, self.pos)}")
            number = match.group(0)
            if len(number) > MAX_NUMBER_CHARS:
                raise self.fail(f"a number of {len(number)} characters is too long")
            self.pos = match.end()
            if "." in number or "e" in number or "E" in number:
                return float(number)
            return int(number)
        match = _WORD.match(text, self.pos)
        if match is not None and match.group(0) in _KEYWORDS:
            self.pos = match.end()
            return _KEYWORDS[match.group(0)]
        raise self.fail(f"unexpected {_found(text, self.pos)}")


@dataclass(slots=True)
class _Assignment:
    """The last assignment found for one name: its list, or why it could not be read."""

    name: str
    start: int
    value: list[Any] | None = None
    error: _ReadError | None = None

    def error_message(self, text: str, max_steps: int) -> str:
        assert self.error is not None
        if isinstance(self.error, _TooManySteps):
            return (
                f"{self.name} has more than {max_steps} {_entries(max_steps)}: "
                f"a workflow has at most {max_steps} steps"
            )
        line = text.count("\n", 0, self.start) + 1
        where = _line_column(text, self.error.pos)
        return (
            f"could not read the {self.name} list on line {line}: {self.error.problem} (at {where})"
        )


def _is_word_char(char: str) -> bool:
    return char.isalnum() or char == "_"


def _find_assignments(text: str, max_steps: int) -> dict[str, _Assignment]:
    """Scan left to right; keep the last assignment of each name (see the module docstring)."""
    found: dict[str, _Assignment] = {}
    pos = 0
    attempts = 0
    while True:
        match = _ASSIGNMENT.search(text, pos)
        if match is None:
            return found
        name, quote = match.group(1, 2)
        start = match.start() - len(quote)
        before = text[start - 1] if start > 0 else ""
        if (
            (quote and (start < 0 or text[start] != quote))
            or (not quote and (name == "steps" or _is_word_char(before)))
            or (quote and before.isalnum())
        ):
            pos = match.start() + 1
            continue
        attempts += 1
        if attempts > MAX_ASSIGNMENTS:
            raise WorkflowError(
                f"the text has more than {MAX_ASSIGNMENTS} list assignments; "
                "write model_id, subtasks and access_list once each"
            )
        reader = _Reader(text, match.end() - 1)
        try:
            value = reader.read_list(1, max_steps)
        except _ReadError as error:
            found[name] = _Assignment(name, start, error=error)
            # What was read before the failure (whole strings and numbers) is skipped like a
            # list that was read; this keeps the scan linear.
            pos = max(error.pos, match.end())
        else:
            found[name] = _Assignment(name, start, value=value)
            pos = reader.pos


# --- validating -------------------------------------------------------------------------------


def _entries(count: int) -> str:
    return "entry" if count == 1 else "entries"


def _show(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 40 else shown[:37] + "..."


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return "a string"


def _pool_description(pool_size: int) -> str:
    if pool_size <= 0:
        return "no workers"
    if pool_size == 1:
        return "1 worker (0)"
    return f"{pool_size} workers (0-{pool_size - 1})"


def _is_index(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_all(value: Any) -> bool:
    return isinstance(value, str) and value.strip().lower() == ALL


def _worker(value: Any, where: str, pool_size: int) -> int:
    if not _is_index(value):
        raise WorkflowError(f"{where} = {_show(value)} is not a worker number")
    if not 0 <= value < pool_size:
        raise WorkflowError(f"{where} = {value} but the pool has {_pool_description(pool_size)}")
    return value


def _instruction(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise WorkflowError(f"{where} should be a string but is {_kind(value)}")
    if not value.strip():
        raise WorkflowError(f"{where} is empty")
    return value


def _access(value: Any, where: str, index: int, access_mode: AccessMode) -> Access:
    if _is_all(value):
        return ALL
    expected = '"all" or []' if access_mode == "binary" else '"all", [] or a list of earlier steps'
    if not isinstance(value, list):
        raise WorkflowError(f"{where} = {_show(value)} is not {expected}")
    if not value:
        return ()
    if len(value) == 1 and _is_all(value[0]):
        return ALL
    if any(_is_all(item) for item in value):
        raise WorkflowError(f'{where} mixes "all" with other entries; write "all" alone')
    if access_mode == "binary":
        raise WorkflowError(
            f"{where} = {_show(value)} names steps, but this pool uses binary access: "
            'write "all" or []'
        )
    indices: set[int] = set()
    for position, item in enumerate(value):
        if not _is_index(item):
            raise WorkflowError(f"{where}[{position}] = {_show(item)} is not a step index")
        if item < 0:
            raise WorkflowError(f"{where} refers to step {item}; steps are numbered from 0")
        if item == index:
            raise WorkflowError(
                f"{where} refers to step {index} itself; a step can only read earlier steps"
            )
        if item > index:
            raise WorkflowError(
                f"{where} refers to step {item}, which is not earlier than step {index}"
            )
        indices.add(item)
    return tuple(sorted(indices))


def _from_lists(
    lists: dict[str, list[Any]], *, pool_size: int, max_steps: int, access_mode: AccessMode
) -> Workflow:
    workers, instructions, accesses = (lists[name] for name in LIST_NAMES)
    count = len(workers)
    for name in LIST_NAMES[1:]:
        if len(lists[name]) != count:
            raise WorkflowError(
                f"model_id has {count} {_entries(count)} but {name} has {len(lists[name])}"
            )
    if count > max_steps:
        raise WorkflowError(f"the workflow has {count} steps, but at most {max_steps} are allowed")
    return Workflow(
        steps=tuple(
            StepSpec(
                worker=_worker(workers[i], f"model_id[{i}]", pool_size),
                instruction=_instruction(instructions[i], f"subtasks[{i}]"),
                access=_access(accesses[i], f"access_list[{i}]", i, access_mode),
            )
            for i in range(count)
        )
    )


def _from_steps(
    steps: list[Any], *, pool_size: int, max_steps: int, access_mode: AccessMode
) -> Workflow:
    if len(steps) > max_steps:
        raise WorkflowError(
            f"the workflow has {len(steps)} steps, but at most {max_steps} are allowed"
        )
    specs = []
    for i, step in enumerate(steps):
        where = f"steps[{i}]"
        if not isinstance(step, dict):
            raise WorkflowError(f"{where} should be an object but is {_kind(step)}")
        for key in ("worker", "instruction", "access"):
            if key not in step:
                raise WorkflowError(f'{where} has no "{key}"')
        specs.append(
            StepSpec(
                worker=_worker(step["worker"], f"{where}.worker", pool_size),
                instruction=_instruction(step["instruction"], f"{where}.instruction"),
                access=_access(step["access"], f"{where}.access", i, access_mode),
            )
        )
    return Workflow(steps=tuple(specs))


# --- public API ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ParsedPlan:
    """A workflow read from a conductor's text, and the form it was written in."""

    workflow: Workflow
    form: PlanForm


_FENCE = re.compile(r"\A\s*+(?:```[A-Za-z]*+[ \t]*+\n)?\s*+")
_FENCE_END = re.compile(r"\s*+(?:```\s*+)?\Z")


def _bare_steps(text: str, max_steps: int) -> list[Any] | None:
    """The list of step objects when the whole text (in a code fence or not) is one JSON list
    whose first entry is an object; None otherwise."""
    start = _FENCE.match(text).end()  # type: ignore[union-attr]
    after = _SPACE.match(text, start + 1).end() if text.startswith("[", start) else -1  # type: ignore[union-attr]
    if after < 0 or not text.startswith("{", after):
        return None
    reader = _Reader(text, start)
    try:
        steps = reader.read_list(1, max_steps)
    except _TooManySteps:
        raise WorkflowError(
            f"the workflow has more than {max_steps} steps, but at most {max_steps} are allowed"
        ) from None
    except _ReadError as error:
        where = _line_column(text, error.pos)
        raise WorkflowError(
            f"could not read the list of steps: {error.problem} (at {where})"
        ) from None
    if _FENCE_END.match(text, reader.pos) is None:
        return None
    return steps


def parse_plan(
    text: str, *, pool_size: int, max_steps: int = 5, access_mode: AccessMode = "fine"
) -> ParsedPlan:
    """Read the workflow a conductor wrote and the form it used ("lists" or "json"); raise
    WorkflowError saying what is wrong and where.

    ``pool_size`` is the number of workers (valid worker numbers are ``0..pool_size-1``);
    ``access_mode="binary"`` allows only ``"all"`` and ``[]`` as access entries.
    """
    if access_mode not in ("binary", "fine"):
        raise ValueError(f"access_mode must be 'binary' or 'fine', not {access_mode!r}")
    bare = _bare_steps(text, max_steps)
    if bare is not None:
        workflow = _from_steps(
            bare, pool_size=pool_size, max_steps=max_steps, access_mode=access_mode
        )
        return ParsedPlan(workflow, "json")
    found = _find_assignments(text, max_steps)
    lists = [found.get(name) for name in LIST_NAMES]
    latest_list = max((a.start for a in lists if a is not None), default=-1)
    steps = found.get("steps")
    if steps is not None and steps.start > latest_list:
        if steps.value is None:
            raise WorkflowError(steps.error_message(text, max_steps))
        workflow = _from_steps(
            steps.value, pool_size=pool_size, max_steps=max_steps, access_mode=access_mode
        )
        return ParsedPlan(workflow, "json")
    if latest_list < 0:
        raise WorkflowError(
            "found no workflow: expected model_id = [...], subtasks = [...] and "
            'access_list = [...] (or a JSON object {"steps": [...]})'
        )
    for assignment in lists:  # A list cut off is a better clue than the ones missing after it.
        if assignment is not None and assignment.value is None:
            raise WorkflowError(assignment.error_message(text, max_steps))
    values: dict[str, list[Any]] = {}
    for name, assignment in zip(LIST_NAMES, lists, strict=True):
        if assignment is None or assignment.value is None:
            raise WorkflowError(f"found no {name} = [...] list")
        values[name] = assignment.value
    workflow = _from_lists(
        values, pool_size=pool_size, max_steps=max_steps, access_mode=access_mode
    )
    return ParsedPlan(workflow, "lists")


def parse_workflow(
    text: str, *, pool_size: int, max_steps: int = 5, access_mode: AccessMode = "fine"
) -> Workflow:
    """``parse_plan``'s workflow alone."""
    return parse_plan(
        text, pool_size=pool_size, max_steps=max_steps, access_mode=access_mode
    ).workflow


def plan_schema(
    *, pool_size: int, max_steps: int, access_mode: AccessMode = "fine", first_round: bool = True
) -> dict[str, Any]:
    """The JSON schema of a plan that ``parse_plan`` reads as "json": an object whose
    ``steps`` are at most ``max_steps`` objects (at least one in the first round; none accepts
    the previous answer later), each with ``worker`` from an enum of the pool's workers (a
    grammar built from a schema enforces an enum, not always ``minimum``/``maximum``), an
    ``instruction`` of at least one character and ``access``: "all", or a list of step numbers
    below ``max_steps - 1`` (``[]`` only in binary mode). That an access entry names an
    *earlier* step is left to the parser, whose error is shown back to the conductor."""
    if pool_size < 1:
        raise ValueError("a plan needs at least one worker")
    entries: dict[str, Any] = {"type": "array", "maxItems": 0}
    if access_mode == "fine" and max_steps > 1:
        entries = {
            "type": "array",
            "items": {"type": "integer", "enum": list(range(max_steps - 1))},
            "maxItems": max_steps - 1,
        }
    step = {
        "type": "object",
        "properties": {
            "worker": {"type": "integer", "enum": list(range(pool_size))},
            "instruction": {"type": "string", "minLength": 1},
            "access": {"anyOf": [{"type": "string", "enum": [ALL]}, entries]},
        },
        "required": ["worker", "instruction", "access"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {
            "steps": {
                "type": "array",
                "items": step,
                "minItems": 1 if first_round else 0,
                "maxItems": max_steps,
            }
        },
        "required": ["steps"],
        "additionalProperties": False,
    }


def _format_access(access: Access) -> str:
    if access == ALL:
        return '["all"]'
    return "[" + ", ".join(str(index) for index in access) + "]"


def format_workflow(workflow: Workflow) -> str:
    """The canonical three-list form; ``parse_workflow(format_workflow(w))`` gives ``w`` back."""
    steps = workflow.steps
    model_ids = ", ".join(str(step.worker) for step in steps)
    subtasks = ", ".join(json.dumps(step.instruction, ensure_ascii=False) for step in steps)
    access = ", ".join(_format_access(step.access) for step in steps)
    return f"model_id = [{model_ids}]\nsubtasks = [{subtasks}]\naccess_list = [{access}]"


def format_workflow_json(workflow: Workflow) -> str:
    """The JSON form (``plan_schema``'s shape); ``parse_plan`` reads it back as "json"."""
    steps = [
        {
            "worker": step.worker,
            "instruction": step.instruction,
            "access": ALL if step.access == ALL else list(step.access),
        }
        for step in workflow.steps
    ]
    return json.dumps({"steps": steps}, ensure_ascii=False)
