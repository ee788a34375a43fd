"""The few writes done in plain SQL on the hot path, and what the database in use can do for them.

Storing a step costs a few statements; building them through the ORM cost more than running
them. Everything here works on PostgreSQL and SQLite (with or without ``RETURNING``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection

from orchestrator.models import Run

RUN_TABLE = Run._meta.db_table
_INSERT_BATCH = 500


def can_return() -> bool:
    """Whether UPDATE/INSERT ... RETURNING works here (PostgreSQL; SQLite 3.35 and later)."""
    return connection.vendor == "postgresql" or (
        connection.vendor == "sqlite" and connection.features.can_return_columns_from_insert
    )


def db_datetime(value: Any) -> Any:
    """A datetime as this database's driver takes it in plain SQL (what the ORM would send)."""
    return connection.ops.adapt_datetimefield_value(value)


def update_returning(
    sql: str, params: Sequence[Any], *, returning: str, table: str, id: int
) -> tuple | None:
    """Run an UPDATE of the one row ``id`` of ``table`` and read back ``returning`` from it (in
    the same statement where the database can); None if the UPDATE matched no row."""
    with connection.cursor() as cursor:
        if can_return():
            cursor.execute(f"{sql} RETURNING {returning}", params)
            rows = cursor.fetchall()
            return rows[0] if rows else None
        cursor.execute(sql, params)
        if cursor.rowcount == 0:
            return None
        cursor.execute(f"SELECT {returning} FROM {table} WHERE id = %s", [id])
        return cursor.fetchone()


def advance_seq(
    run_id: int,
    count: int,
    *,
    assignments: Sequence[str] = (),
    assignment_params: Sequence[Any] = (),
    conditions: Sequence[str] = (),
    condition_params: Sequence[Any] = (),
    returning: Sequence[str] = (),
) -> tuple | None:
    """Take ``count`` event seqs of a run in one UPDATE of its row (which holds the row lock
    until the commit, so seqs stay gapless and in commit order), with any other
    ``assignments`` of the same row and only where ``conditions`` hold.

    Returns ``(last_seq, *returning)`` as they are after the update, or None if no row matched.
    The only place that takes seqs: every publisher goes through it.
    """
    sets = ", ".join(("last_seq = last_seq + %s", *assignments))
    where = " AND ".join(("id = %s", *conditions))
    sql = f"UPDATE {RUN_TABLE} SET {sets} WHERE {where}"
    params = [count, *assignment_params, run_id, *condition_params]
    return update_returning(
        sql, params, returning=", ".join(("last_seq", *returning)), table=RUN_TABLE, id=run_id
    )


def insert_rows(rows: list[Any]) -> None:
    """Insert new rows of one model and give them their ids: ``bulk_create`` without the cost of
    building the statement through the ORM (which took most of a plan's storing time)."""
    if not rows:
        return
    model = type(rows[0])
    if not can_return():
        model.objects.bulk_create(rows)
        return
    fields = [field for field in model._meta.local_concrete_fields if not field.primary_key]
    quote = connection.ops.quote_name
    columns = ", ".join(quote(field.column) for field in fields)
    one_row = "(" + ", ".join(["%s"] * len(fields)) + ")"
    for start in range(0, len(rows), _INSERT_BATCH):
        batch = rows[start : start + _INSERT_BATCH]
        params = [
            field.get_db_prep_save(field.pre_save(row, True), connection)
            for row in batch
            for field in fields
        ]
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {quote(model._meta.db_table)} ({columns}) "
                f"VALUES {', '.join([one_row] * len(batch))} "
                f"RETURNING {quote(model._meta.pk.column)}",
                params,
            )
            ids = cursor.fetchall()
        for row, (pk,) in zip(batch, ids, strict=True):
            row.pk = pk
            row._state.adding = False
            row._state.db = connection.alias
