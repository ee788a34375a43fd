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
