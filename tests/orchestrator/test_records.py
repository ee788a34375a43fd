"""Reading stored plans back into the engine's records, as a resumed run does."""

from __future__ import annotations

from orchestrator.engine.types import PlanAttempt
from orchestrator.models import Plan
from orchestrator.records import plan_record_from_row


def test_stored_attempts_missing_or_unknown_keys_read_with_defaults():
    plan = Plan(
        round=0,
        strategy="conductor",
        messages=[],
        attempts=[
            {"error": "no JSON found"},
            {"raw": "[]", "tokens_in": 12, "cost": 0.5, "reviewed_by": "admin"},
        ],
        workflow=[],
    )

    record = plan_record_from_row(plan)

    assert record.attempts == [
        PlanAttempt(raw="", error="no JSON found"),
        PlanAttempt(raw="[]", tokens_in=12, cost=0.5),
    ]
