"""Reads: the conductor's decisions as training data (one JSON line per decision).

A decision is one call to the conductor that returned text: the prompt it was given (the
round's messages up to that call, earlier failed outputs and their repair turns included), its
raw output, the workflow parsed from it or the parse error, and how the run ended (answer,
reference, score). ``reward`` follows the published recipe: 0 when the output did not parse;
otherwise ``partial_credit + (1 - partial_credit) * score`` (with the default 0.5: 1 for a right
answer, 0.5 for a wrong one); None when the run has no score to learn from.

Each line is a conversational prompt/completion record as TRL's trainers load it (``prompt``: a
list of chat messages, ``completion``: the assistant's message), plus the fields above; every
field has one JSON type (or null) on every line, so columnar loaders read it. Plans are
read with a database cursor in chunks, so memory stays flat however many runs are exported.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any, Final

from django.db.models import QuerySet

from orchestrator.models import Plan, Run

CHUNK_SIZE: Final = 500
RUN_FIELDS: Final = ("id", "pool_id", "input", "answer", "reference", "score", "status")
TRAJECTORY_FIELDS: Final = (
    "prompt",
    "completion",
    "run_id",
    "pool_id",
    "round",
    "attempt",
    "question",
    "raw_output",
    "workflow",
    "parse_error",
    "answer",
    "reference",
    "score",
    "status",
    "reward",
)
"""The keys of every line, in order."""


def decision_reward(*, parsed: bool, score: float | None, partial_credit: float) -> float | None:
    """0 for an unparsable workflow; the partial credit plus its complement times the score
    otherwise; None when a parsed decision's run was not scored."""
    if not parsed:
        return 0.0
    if score is None:
        return None
    return partial_credit + (1.0 - partial_credit) * float(score)


def trajectory_rows(
    *, runs: QuerySet[Run], partial_credit: float = 0.5
) -> Iterator[dict[str, Any]]:
    """One dict per conductor decision of ``runs`` (any Run queryset), oldest run first."""
    plans = (
        Plan.objects.filter(run_id__in=runs.order_by().values("pk"), strategy="conductor")
        .select_related("run")
        .only(
            "id",
            "round",
            "messages",
            "attempts",
            "workflow",
            "run_id",
            *(f"run__{field}" for field in RUN_FIELDS),
        )
        .order_by("run_id", "round")
    )
    for plan in plans.iterator(chunk_size=CHUNK_SIZE):
        yield from _plan_rows(plan, plan.run, partial_credit)


def _plan_rows(plan: Plan, run: Run, partial_credit: float) -> Iterator[dict[str, Any]]:
    messages: list[dict[str, Any]] = list(plan.messages or [])
    shown = [i for i, message in enumerate(messages) if message.get("role") == "assistant"]
    decisions = [attempt for attempt in (plan.attempts or []) if attempt.get("raw")]
    for number, attempt in enumerate(decisions):
        prompt = messages[: shown[number]] if number < len(shown) else messages
        error = attempt.get("error") or ""
        parsed = not error
        yield {
            "prompt": _chat(prompt),
            "completion": [{"role": "assistant", "content": attempt["raw"]}],
            "run_id": run.pk,
            "pool_id": run.pool_id,
            "round": plan.round,
            "attempt": number,
            "question": run.input,
            "raw_output": attempt["raw"],
            "workflow": _workflow(plan.workflow) if parsed else None,
            "parse_error": error or None,
            "answer": run.answer,
            "reference": run.reference,
            "score": run.score,
            "status": run.status,
            "reward": decision_reward(
                parsed=parsed, score=run.score, partial_credit=partial_credit
            ),
        }


def _workflow(steps: Sequence[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """The parsed workflow with one type per field (columnar loaders need that): ``access`` is
    always a list of earlier indices, and ``access_all`` says the step reads every earlier one."""
    if steps is None:
        return None
    return [
        {
            "worker": int(step["worker"]),
            "instruction": str(step["instruction"]),
            "access_all": step.get("access") == "all",
            "access": []
            if step.get("access") == "all"
            else [int(i) for i in step.get("access") or []],
        }
        for step in steps
    ]


def _chat(messages: Sequence[dict[str, Any]]) -> list[dict[str, str]]:
    return [
        {"role": str(m.get("role", "")), "content": str(m.get("content", ""))} for m in messages
    ]


def trajectory_lines(*, runs: QuerySet[Run], partial_credit: float = 0.5) -> Iterator[str]:
    """``trajectory_rows`` as JSON Lines, one ``\\n``-terminated line each."""
    for row in trajectory_rows(runs=runs, partial_credit=partial_credit):
        yield json.dumps(row, ensure_ascii=False) + "\n"
