"""The hot path's plain SQL (``orchestrator/sql.py``): its cursor takes the site's placeholders
and raises Django's errors on every database, and its parameters are what the ORM would send."""

from __future__ import annotations

import datetime

import pytest
from django.db import IntegrityError, connection
from django.utils import timezone

from orchestrator.models import RunEvent, Step
from orchestrator.sql import db_datetime, hot_cursor, json_param
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
