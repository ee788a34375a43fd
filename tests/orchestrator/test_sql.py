"""The hot path's plain SQL (``orchestrator/sql.py``): its cursor takes the site's placeholders
and raises Django's errors on every database, and its parameters are what the ORM would send."""

from __future__ import annotations

import datetime
from contextlib import nullcontext

import pytest
from django.db import IntegrityError, connection
from django.utils import timezone

from orchestrator.models import Plan, RunEvent, Step
from orchestrator.sql import db_datetime, hot_cursor, json_param, row_writer
from tests.factories import make_run

pytestmark = pytest.mark.django_db


def test_the_hot_cursor_takes_placeholders_and_literal_percent_signs():
    with hot_cursor() as cursor:
        cursor.execute("SELECT '100%%', %s, %s", [7, "a %s b"])
        assert cursor.fetchone() == ("100%", 7, "a %s b")
        cursor.execute("SELECT %s UNION ALL SELECT %s", [1, 2])
        assert sorted(cursor.fetchall()) == [(1,), (2,)]


def test_the_hot_cursor_raises_djangos_errors(sim_pool):
    run = make_run(pool=sim_pool)
    RunEvent.objects.create(run=run, seq=1, type="run.status", data={"status": "queued"})
    insert = (
        f"INSERT INTO {RunEvent._meta.db_table} (run_id, seq, type, data, created_at) "
        "VALUES (%s, %s, %s, %s, %s)"
    )
    data = json_param(RunEvent._meta.get_field("data"), {"status": "queued"})
    with pytest.raises(IntegrityError), hot_cursor() as cursor:
        cursor.execute(insert, [run.pk, 1, "run.status", data, db_datetime(timezone.now())])


def test_parameters_are_what_the_orm_sends(sim_pool):
    now = timezone.now()
    assert now.tzinfo is datetime.UTC
    assert db_datetime(now) == connection.ops.adapt_datetimefield_value(now)
    two_hours_east = datetime.datetime(
        2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone(datetime.timedelta(hours=2))
    )
    assert db_datetime(two_hours_east) == connection.ops.adapt_datetimefield_value(two_hours_east)
    field = Step._meta.get_field("messages")
    assert json_param(field, None) is None
    messages = [{"role": "user", "content": 'é \u2028 "quoted"'}]
    run = make_run(pool=sim_pool)
    step = Step.objects.create(run=run, round=0, index=0, instruction="x", worker_index=0)
    with hot_cursor() as cursor:
        cursor.execute(
            f"UPDATE {Step._meta.db_table} SET messages = %s WHERE id = %s",
            [json_param(field, messages), step.pk],
        )
    step.refresh_from_db()
    assert step.messages == messages


def _orm_params(rows, *, with_id):
    fields = [f for f in type(rows[0])._meta.local_concrete_fields if with_id or not f.primary_key]
    return [f.get_db_prep_save(f.pre_save(row, True), connection) for row in rows for f in fields]


def _comparable(value):
    return getattr(value, "obj", value)  # psycopg's Jsonb wraps the value it dumps


def test_new_rows_parameters_are_what_the_orm_sends(sim_pool, monkeypatch):
    run = make_run(pool=sim_pool)
    now = timezone.now()
    monkeypatch.setattr(timezone, "now", lambda: now)  # a creation time is set on both sides
    plan = Plan(
        run_id=run.pk,
        round=1,
        strategy="conductor",
        messages=[{"role": "system", "content": 'é "x"'}],
        workflow={"steps": []},
        error="",
    )
    started = timezone.now()
    steps = [
        Step(run_id=run.pk, round=1, index=0, instruction="Add", worker_index=0, access="all"),
        Step(
            id=123,
            run_id=run.pk,
            plan_id=7,
            round=1,
            index=1,
            instruction="Check",
            worker_index=1,
            worker_name="w",
            model="sim/solver",
            status=Step.Status.SUCCEEDED,  # a TextChoices member, not a str
            tokens_in=3,
            cost=0,  # an int in a float field: the ORM makes it a float
            latency=0.25,
            started_at=started,
            finished_at=datetime.datetime(2026, 1, 2, 3, 4, 5),  # naive: the ORM's way
            reads=[1],
        ),
    ]
    for rows in ([plan], steps):
        for with_id in (False, True):
            # A naive datetime goes the ORM's way on both sides, with its warning.
            with pytest.warns(RuntimeWarning) if rows is steps else nullcontext():
                written = row_writer(type(rows[0]), with_id=with_id).params(rows)
            with pytest.warns(RuntimeWarning) if rows is steps else nullcontext():
                expected = _orm_params(rows, with_id=with_id)
            assert [_comparable(v) for v in written] == [_comparable(v) for v in expected]
            assert [type(v) for v in written] == [type(v) for v in expected]
    assert plan.created_at == now  # auto_now_add sets the row's value too
