"""The wire shapes: checking a payload against its definition, and everything that repeats one
(the API serializers, the page's constants) following it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rest_framework import serializers

from orchestrator import wire
from webui.api.serializers import follows

ROOT = Path(__file__).resolve().parents[2]

TOTALS = {
    "tokens_in": 3,
    "tokens_out": 4,
    "cost": 0,
    "model_calls": 1,
    "wall_time": None,
    "step_count": 2,
}


def finished_event(**changes):
    event = {
        "type": wire.RUN_FINISHED,
        "run": 1,
        "seq": 9,
        "status": "cancelled",
        "answer": "",
        "answer_shown": "",
        "score": None,
        "verdict": "cancelled",
        "error": "",
        "totals": TOTALS,
        "finished_at": "2026-01-01T00:00:00+00:00",
        "closed_steps": {"skipped": {"ids": [4, 5], "error": "the run was cancelled"}},
    }
    return event | changes


def test_an_event_that_follows_its_shape_passes():
    assert wire.check_event(finished_event()) == []


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"score": "1"}, "$.score"),
        ({"seq": True}, "$.seq"),
        ({"totals": TOTALS | {"cost": "free"}}, "$.totals.cost"),
        (
            {"closed_steps": {"skipped": {"ids": ["4"], "error": ""}}},
            "$.closed_steps['skipped'].ids[0]",
        ),
        ({"extra": 1}, "unexpected 'extra'"),
        ({"type": "step.exploded"}, "unknown event type"),
    ],
)
def test_a_payload_off_its_shape_is_named(changes, problem):
    problems = wire.check_event(finished_event(**changes))
    assert any(problem in line for line in problems), problems


def test_a_missing_key_is_named():
    event = finished_event()
    del event["closed_steps"]
    assert wire.check_event(event) == ["$: missing 'closed_steps'"]


def test_every_event_type_has_a_shape_and_reaches_the_page():
    names = wire.page_constants()["events"]
    assert set(names.values()) == {*wire.EVENT_TYPES, wire.SNAPSHOT}
    assert set(wire.EVENT_SHAPES) == set(wire.EVENT_TYPES)


def test_the_page_scripts_spell_no_event_type():
    """They take the names from the page's constants (static/js/run/statuses.js)."""
    literal = re.compile(
        "|".join(re.escape(f'"{name}"') for name in (*wire.EVENT_TYPES, wire.SNAPSHOT))
    )
    for script in sorted((ROOT / "static" / "js").rglob("*.js")):
        found = literal.findall(script.read_text())
        assert not found, f"{script.relative_to(ROOT)} spells {found}"


def test_a_serializer_off_its_shape_fails_at_import():
    class Loose(serializers.Serializer):
        tokens_in = serializers.IntegerField()

    with pytest.raises(TypeError, match="Loose gives"):
        follows(wire.Totals)(Loose)

    class NotNullable(serializers.Serializer):
        tokens_in = serializers.IntegerField()
        tokens_out = serializers.IntegerField()
        cost = serializers.FloatField()
        model_calls = serializers.IntegerField()
        wall_time = serializers.FloatField()  # the shape allows null
        step_count = serializers.IntegerField()

    with pytest.raises(TypeError, match="wall_time"):
        follows(wire.Totals)(NotNullable)


def test_the_engines_totals_are_the_wires_less_the_stored_step_count():
    from dataclasses import fields

    from orchestrator.engine.types import Totals

    assert {field.name for field in fields(Totals)} == set(wire.TOTAL_FIELDS) - {"step_count"}


ATTEMPT_LOG = [
    {"attempt": 1, "offset": 0.0, "seconds": 0.2, "error": "rate limited", "backoff": 0.5},
    {"attempt": 2, "offset": 0.7, "seconds": 0.3, "error": "", "backoff": 0.0},
]


@pytest.mark.django_db
def test_a_retried_steps_attempts_reach_the_snapshot_and_its_events(sim_pool):
    from orchestrator import selectors
    from tests.factories import make_run, make_step

    run = make_run(pool=sim_pool)
    make_step(
        run=run, status="succeeded", attempts=2, error="rate limited", attempt_log=ATTEMPT_LOG
    )
    make_step(run=run, index=1, status="succeeded", attempts=1)

    steps = selectors.run_snapshot(run=run)["steps"]

    assert [step["attempt_log"] for step in steps] == [ATTEMPT_LOG, []]
    for step in steps:
        assert wire.check(step, wire.Step) == []
        event = {"type": wire.STEP_FINISHED, "run": run.pk, "seq": 3, "step": step}
        assert wire.check_event(event | {"totals": TOTALS}) == []
    # step_data (one row, as events are built) says the same as the snapshot's rows.
    row = run.steps.get(index=0)
    assert wire.step_data(row) == steps[0]


def test_an_attempt_off_its_shape_is_named():
    step_attempt = {**ATTEMPT_LOG[0], "error": None}

    assert wire.check(step_attempt, wire.StepAttempt) == ["$.error: expected str, got None"]
