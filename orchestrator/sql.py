"""The few writes done in plain SQL on the hot path, and what the database in use can do for them.

Storing a step costs a few statements; building them through the ORM cost more than running
them. Everything here works on PostgreSQL and SQLite (with or without ``RETURNING``).
"""

from __future__ import annotations

import datetime
import itertools
import json
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext, suppress
from functools import cache, lru_cache
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, DataError, connection, connections, models, transaction
from django.utils import timezone

from orchestrator.models import Run, RunEvent

RUN_TABLE = Run._meta.db_table
EVENT_TABLE = RunEvent._meta.db_table
_EVENT_DATA = RunEvent._meta.get_field("data")
_INSERT_BATCH = 500


def current() -> Any:
    """This thread's connection to the default database. ``django.db.connection`` looks it up
    again on every attribute read (a lookup in a thread- and context-local store): a function
    here that reads several looks it up once."""
    return connections[DEFAULT_DB_ALIAS]


@cache
def vendor() -> str:
    """The default database's vendor (``"sqlite"``, ``"postgresql"``): the same for the whole
    process, so read once."""
    return str(current().vendor)


@cache
def can_return() -> bool:
    """Whether UPDATE/INSERT ... RETURNING works here (PostgreSQL; SQLite 3.35 and later)."""
    return vendor() == "postgresql" or (
        vendor() == "sqlite" and bool(current().features.can_return_columns_from_insert)
    )


def db_datetime(value: Any) -> Any:
    """A datetime as this database's driver takes it in plain SQL (what the ORM would send)."""
    kind = vendor()
    if kind == "postgresql":
        return value  # as PostgreSQL's adapt_datetimefield_value does
    if kind == "sqlite" and type(value) is datetime.datetime and value.tzinfo is datetime.UTC:
        # What SQLite's adapt_datetimefield_value makes of an aware UTC datetime (the site runs
        # with USE_TZ and the database in UTC), without its settings lookups.
        return str(value.replace(tzinfo=None))
    return current().ops.adapt_datetimefield_value(value)


def json_param(field: models.Field, value: Any) -> Any:
    """The value of JSON ``field`` as this database's driver takes it in plain SQL (what the ORM
    would send) when the field has no encoder (none here has): SQL NULL for None, else on SQLite
    its JSON text and on PostgreSQL psycopg's Jsonb, as Django's backends make them."""
    if value is None:
        return None
    if getattr(field, "encoder", None) is None:
        kind = vendor()
        if kind == "sqlite":
            return json.dumps(value)
        if kind == "postgresql":
            from psycopg.types.json import Jsonb

            return Jsonb(value, dumps=json.dumps)
    return field.get_db_prep_save(value, current())


@contextmanager
def hot_cursor() -> Iterator[Any]:
    """A cursor for the statements of the hot path (storing a run as it executes, claiming and
    loading it), taking the site's ``%s`` placeholders; errors are Django's, as from any cursor.

    On SQLite it is the driver's own cursor, the placeholders converted once per statement text:
    Django's cursor wrapper (its checks, the conversion on every call, the lookups of the
    connection) cost about twice what SQLite takes to run a short statement. On PostgreSQL it is
    psycopg's own cursor, its parameters sent apart from the text, which is prepared once per
    connection (as ``fetch_bound``'s; Django's cursors quote each parameter into the text, and
    the server parses and plans every statement again). Its statements are not in Django's query
    log. Elsewhere it is Django's cursor.
    """
    db = current()
    if db.vendor == "postgresql":
        import psycopg

        db.ensure_connection()
        with db.wrap_database_errors, psycopg.RawCursor(db.connection) as cursor:
            yield _BoundCursor(cursor)
        return
    if db.vendor != "sqlite":
        with db.cursor() as cursor:
            yield cursor
        return
    db.ensure_connection()
    with db.wrap_database_errors:
        cursor = db.connection.cursor()
        try:
            yield _QmarkCursor(cursor)
        finally:
            cursor.close()


class _DriverCursor:
    """A database driver's own cursor that takes the site's ``%s`` placeholders (``hot_cursor``):
    each subclass turns a statement's text into its driver's."""

    __slots__ = ("cursor",)

    def __init__(self, cursor: Any) -> None:
        self.cursor = cursor

    def text(self, sql: str) -> str:
        raise NotImplementedError

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        self.cursor.execute(self.text(sql), params)

    def executemany(self, sql: str, param_list: Sequence[Sequence[Any]]) -> None:
        self.cursor.executemany(self.text(sql), param_list)

    @property
    def rowcount(self) -> int:
        return int(self.cursor.rowcount)

    def fetchone(self) -> Any:
        return self.cursor.fetchone()

    def fetchall(self) -> list[Any]:
        return list(self.cursor.fetchall())


class _QmarkCursor(_DriverCursor):
    """SQLite's: ``?`` placeholders."""

    __slots__ = ()

    def text(self, sql: str) -> str:
        return _qmark(sql)


class _BoundCursor(_DriverCursor):
    """psycopg's raw cursor: ``$n`` placeholders, each statement prepared unless
    ``CONDUCTOR_DB_PREPARED_STATEMENTS`` is off."""

    __slots__ = ("prepare",)

    def __init__(self, cursor: Any) -> None:
        super().__init__(cursor)
        self.prepare = bool(settings.CONDUCTOR_DB_PREPARED_STATEMENTS)

    def text(self, sql: str) -> str:
        return _numbered(sql)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        self.cursor.execute(self.text(sql), params, prepare=self.prepare)


@lru_cache(maxsize=512)
def _numbered(sql: str) -> str:
    """``sql`` with its ``%s`` placeholders as PostgreSQL's ``$1``, ``$2``... and ``%%`` as
    ``%``, for psycopg's raw cursors: psycopg's own cursors do it to every statement, and no
    longer remember it past 50 parameters (the hot path's statements have more)."""
    numbers = itertools.count(1)
    return _PLACEHOLDER.sub(lambda found: f"${next(numbers)}" if found[1] == "s" else "%", sql)


_PLACEHOLDER = re.compile(r"%([s%])")


@lru_cache(maxsize=512)
def _qmark(sql: str) -> str:
    """``sql`` with its ``%s`` placeholders as SQLite's ``?`` (what Django's SQLite cursor does
    to every statement it runs)."""
    from django.db.backends.sqlite3.base import FORMAT_QMARK_REGEX

    return FORMAT_QMARK_REGEX.sub("?", sql).replace("%%", "%")


def update_returning(
    sql: str, params: Sequence[Any], *, returning: str, table: str, id: int
) -> tuple | None:
    """Run an UPDATE of the one row ``id`` of ``table`` and read back ``returning`` from it (in
    the same statement where the database can); None if the UPDATE matched no row."""
    with hot_cursor() as cursor:
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
    With ``advance_seq_storing``, the only places that take seqs: every publisher goes through
    one of them.
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
    db = current()
    writer = row_writer(model, with_id=False)
    quote = db.ops.quote_name
    for start in range(0, len(rows), _INSERT_BATCH):
        batch = rows[start : start + _INSERT_BATCH]
        params = writer.params(batch)
        with hot_cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {quote(model._meta.db_table)} ({writer.columns}) "
                f"VALUES {', '.join([writer.one_row] * len(batch))} "
                f"RETURNING {quote(model._meta.pk.column)}",
                params,
            )
            ids = cursor.fetchall()
        for row, (pk,) in zip(batch, ids, strict=True):
            row.pk = pk
        mark_stored(batch)


def allocate_ids(counts: Sequence[tuple[type[models.Model], int]]) -> list[list[int]]:
    """Take ``n`` new ids for each ``(model, n)`` from its table's sequence, in one statement
    (PostgreSQL): rows inserted with them can be named in the same statement (a step's plan, the
    steps it reads) and in the events stored with them."""
    columns, params = ids_columns(counts)
    return [list(ids) for ids in fetch_bound(f"SELECT {columns}", params)[0]]


def ids_columns(
    counts: Sequence[tuple[type[models.Model], int]], *, counts_in_text: bool = False
) -> tuple[str, list[Any]]:
    """The columns of a SELECT that takes ``allocate_ids``'s ids (an array a model), and their
    parameters: for a statement that takes them with other work. With ``counts_in_text`` (counts
    that never change, as the claim's) the counts are written into the text: PostgreSQL then
    plans a prepared statement once for all its executions, where with each count a parameter
    it planned the claim's statement anew every time (a third of a millisecond of the server's
    time). Counts that vary stay parameters: one text, not one per count."""
    parts = []
    params: list[Any] = []
    for model, count in counts:
        params += [connection.ops.quote_name(model._meta.db_table), model._meta.pk.column]
        if counts_in_text:
            series = f"generate_series(1, {int(count)})"
        else:
            series = "generate_series(1, %s)"
            params.append(count)
        parts.append(f"ARRAY(SELECT nextval(pg_get_serial_sequence(%s, %s)) FROM {series})")
    return ", ".join(parts), params


def mark_stored(rows: Iterable[models.Model]) -> None:
    """Have model instances whose rows were inserted in plain SQL (their ids set) count as
    saved, as the ORM's own insert leaves them."""
    alias = current().alias
    for row in rows:
        row._state.adding = False
        row._state.db = alias


def insert_statement(rows: Sequence[Any]) -> tuple[str, list[Any]]:
    """The INSERT of rows of one model whose ids are set (``allocate_ids``), ids included."""
    model = type(rows[0])
    writer = row_writer(model, with_id=True)
    sql = (
        f"INSERT INTO {current().ops.quote_name(model._meta.db_table)} ({writer.columns}) "
        f"VALUES {', '.join([writer.one_row] * len(rows))}"
    )
    return sql, writer.params(rows)


class RowWriter:
    """The parameters of new rows of one model in plain SQL, as the ORM would send them (each
    field's ``get_db_prep_save(pre_save(row, add=True))``), without its per-field calls where
    the value is plain: an int or float in a number field (or a foreign key to an integer id),
    a str in a text field, JSON and datetimes as ``json_param`` and ``db_datetime`` make them, a
    creation time set (on the row too) as ``auto_now_add`` sets it. Anything else goes through
    the ORM's calls. Build one per model and database vendor (``row_writer``)."""

    def __init__(self, model: type[models.Model], *, with_id: bool) -> None:
        fields = [
            field for field in model._meta.local_concrete_fields if with_id or not field.primary_key
        ]
        quote = current().ops.quote_name
        self.columns = ", ".join(quote(field.column) for field in fields)
        self.one_row = "(" + ", ".join(["%s"] * len(fields)) + ")"
        # On PostgreSQL the ORM sends an integer wrapped in its column's type (psycopg's Int2...).
        sizes = getattr(current().ops, "integerfield_type_map", {})
        self.kinds = []
        for field in fields:
            kind, plain = _field_kind(field)
            if kind is _INT:
                plain = sizes.get(_integer_type(field), int)
            self.kinds.append((field, field.attname, kind, plain))

    def params(self, rows: Sequence[Any]) -> list[Any]:
        db = current()
        params: list[Any] = []
        now = None
        for row in rows:
            values = row.__dict__
            for field, attname, kind, plain in self.kinds:
                value = values.get(attname)
                if kind is _PLAIN and (value is None or type(value) is plain):
                    params.append(value)
                elif kind is _INT and (value is None or type(value) is int):
                    params.append(value if value is None or plain is int else plain(value))
                elif kind is _JSON:
                    params.append(json_param(field, value))
                elif kind is _CREATED:
                    if now is None:
                        now = timezone.now()
                    setattr(row, attname, now)
                    params.append(db_datetime(now))
                elif kind is _DATETIME and (value is None or _aware(value)):
                    params.append(None if value is None else db_datetime(value))
                else:
                    params.append(field.get_db_prep_save(field.pre_save(row, True), db))
        return params


_PLAIN, _INT, _JSON, _CREATED, _DATETIME, _ORM = range(6)
_INTEGER_FIELDS = (
    models.AutoField, models.BigAutoField, models.IntegerField, models.BigIntegerField,
    models.PositiveIntegerField, models.PositiveSmallIntegerField, models.SmallIntegerField,
)  # fmt: skip


def _aware(value: Any) -> bool:
    return type(value) is datetime.datetime and value.tzinfo is not None


def _integer_type(field: models.Field) -> str:
    target = field.target_field if isinstance(field, models.ForeignKey) else field
    return str(target.get_internal_type())


def _field_kind(field: models.Field) -> tuple[int, type | None]:
    """How ``RowWriter`` makes a field's parameter, and the type of a plain value."""
    kind = type(field)
    if isinstance(field, models.ForeignKey):
        return (_INT, int) if type(field.target_field) in _INTEGER_FIELDS else (_ORM, None)
    if kind in _INTEGER_FIELDS:
        return _INT, int
    if kind is models.FloatField:
        return _PLAIN, float
    if kind in (models.CharField, models.TextField):
        return _PLAIN, str
    if kind is models.JSONField and field.encoder is None:
        return _JSON, None
    if kind is models.DateTimeField and not field.auto_now:
        return (_CREATED if field.auto_now_add else _DATETIME), None
    return _ORM, None


_row_writers: dict[tuple[type[models.Model], bool, str], RowWriter] = {}


def row_writer(model: type[models.Model], *, with_id: bool) -> RowWriter:
    """``RowWriter`` of ``model`` (its id column included or not) on the database in use."""
    key = (model, with_id, vendor())
    writer = _row_writers.get(key)
    if writer is None:
        writer = _row_writers[key] = RowWriter(model, with_id=with_id)
    return writer


class NotStoredInOneStatement(Exception):
    """``advance_seq_storing`` found the rows not as the caller expected and wrote nothing: the
    caller stores the callback the general way (several statements in a transaction), which
    tells what happened (the run finished or was taken over, the step has its result)."""


def can_store_in_one_statement() -> bool:
    """Whether ``advance_seq_storing`` works here: PostgreSQL, whose UPDATE and INSERT can be
    parts of one statement (``WITH``). SQLite runs its statements in process, without a round
    trip to save."""
    return vendor() == "postgresql"


def advance_seq_storing(statement: tuple[str, Sequence[Any]]) -> tuple[int, bool] | None:
    """Run one statement of ``storing_statement`` by itself. Outside a transaction it commits by
    itself: no BEGIN, no COMMIT, one round trip where the general way takes five to seven.

    Returns the run's new last_seq and whether the run is watched (``Run.watched``); None if the
    step's row matched nothing and the statement was built ``quiet_without_step`` (then nothing
    was written). Raises NotStoredInOneStatement, having written nothing, if the run's row
    matched nothing, or the step's row matched nothing without ``quiet_without_step``.
    """
    sql, params = statement
    try:
        # In a transaction (tests, a caller's atomic block), a savepoint to undo to.
        savepoint = transaction.atomic() if connection.in_atomic_block else nullcontext()
        with savepoint:
            (last_seq, _, watched) = fetch_bound(sql, params)[0]
    except DataError as error:
        if getattr(error.__cause__, "sqlstate", None) == _DIVISION_BY_ZERO:
            raise NotStoredInOneStatement from error
        raise
    return None if last_seq is None else (last_seq, watched)


def advance_seq_storing_together(
    statements: Sequence[tuple[str, Sequence[Any]]], *, durable: bool = True
) -> list[tuple]:
    """Several statements of ``storing_statement`` (none quiet), or one of
    ``storing_held_statement``, in one round trip and one transaction (``fetch_together``).
    Returns each one's row: the run's new last_seq, a 1, and whether the run is watched.
    Nothing is kept unless all are: raises NotStoredInOneStatement if any of them found the
    rows not as its caller expected; any other error (the database's, or one raised here while
    the statements were being sent) rolls the transaction back and propagates."""
    try:
        return [rows[0] for rows in fetch_together(statements, durable=durable)]
    except DataError as error:
        if getattr(error.__cause__, "sqlstate", None) == _DIVISION_BY_ZERO:
            raise NotStoredInOneStatement from error
        raise


def fetch_together(
    statements: Sequence[tuple[str, Sequence[Any]]], *, durable: bool = True
) -> list[list[tuple]]:
    """Run statements in one round trip and one transaction, and return each one's rows
    (PostgreSQL): BEGIN, the statements and COMMIT sent together in psycopg's pipeline, each
    statement as ``fetch_bound``'s (inside a caller's atomic block: the statements in a
    savepoint of it). One statement that is ``durable`` goes alone: it is a transaction by
    itself. Not ``durable``, the commit does not wait for the disk (``synchronous_commit`` off
    for this transaction: a crash of the database server may lose it, never a part of it; the
    next commit that waits keeps it too). Nothing is kept unless all of them succeed."""
    import psycopg

    if len(statements) == 1 and durable and not connection.in_atomic_block:
        return [fetch_bound(*statements[0])]
    connection.ensure_connection()
    raw = connection.connection
    cursors: list[psycopg.RawCursor[Any]] = []

    def send(*, begin: bool) -> None:
        with connection.wrap_database_errors, raw.pipeline():
            if begin:
                psycopg.RawCursor(raw).execute("BEGIN")
                if not durable:
                    psycopg.RawCursor(raw).execute("SET LOCAL synchronous_commit TO OFF")
            for sql, params in statements:
                cursor = psycopg.RawCursor(raw)
                cursors.append(cursor)
                text = _numbered(sql)
                cursor.execute(text, params, prepare=_prepared(text))
            if begin:
                psycopg.RawCursor(raw).execute("COMMIT")

    try:
        if connection.in_atomic_block:
            with transaction.atomic():  # a savepoint, undone on any error
                send(begin=False)
        else:
            try:
                send(begin=True)
            except BaseException:
                # Refused or failed: the transaction is aborted, or still open if the error
                # came before its COMMIT was sent. Either way, nothing of it is kept.
                if raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    with suppress(Exception):
                        raw.execute("ROLLBACK")
                raise
        return [cursor.fetchall() for cursor in cursors]
    finally:
        for cursor in cursors:
            cursor.close()


def not_durable_select() -> str:
    """A SELECT for a CTE of a statement sent alone by ``fetch_bound`` (PostgreSQL), which has
    the statement's commit not wait for the disk when the statement is a transaction by itself:
    ``synchronous_commit`` off for that transaction, as ``fetch_together`` sets it when not
    ``durable``, without a BEGIN, a SET and a COMMIT of their own. Inside a caller's transaction
    (an atomic block, or autocommit off) it sets nothing: that transaction keeps its own setting.
    The statement must read the CTE (one that nothing reads is not evaluated)."""
    db = current()
    if db.in_atomic_block or not db.get_autocommit():
        return "SELECT NULL AS not_durable"
    return "SELECT set_config('synchronous_commit', 'off', true) AS not_durable"


_DIVISION_BY_ZERO = "22012"


def storing_statement(
    run_id: int,
    *,
    step_sql: str = "",
    step_params: Sequence[Any] = (),
    assignments: Sequence[str] = (),
    assignment_params: Sequence[Any] = (),
    conditions: Sequence[str] = (),
    condition_params: Sequence[Any] = (),
    events: Sequence[dict[str, Any]] = (),
    created_at: Any,
    quiet_without_step: bool = False,
    inserts: Sequence[tuple[str, Sequence[Any]]] = (),
) -> tuple[str, list[Any]]:
    """One engine callback in one statement (PostgreSQL; see ``can_store_in_one_statement``),
    and its parameters: the UPDATE ``step_sql`` of a step row (``... RETURNING id``), then the
    UPDATE of the run row that takes the seqs of ``events`` (with ``assignments``, where
    ``conditions`` hold, and only if the step's row was updated), then the INSERT of the events,
    each given its seq by the database. ``inserts`` are INSERTs of new rows (whose ids were
    allocated) made by the same statement, undone with it. Run by ``advance_seq_storing``, or
    with others by ``advance_seq_storing_together``.

    ``events`` are the stored events without their ``seq``. The step's row is updated before
    the run's, the order every writer locks them in (``services/ending.py``). The statement
    returns the run's new last_seq and whether the run is watched (``Run.watched``, as its
    UPDATE found the row), and divides by zero (undoing itself) when the rows are not
    as the caller expected: the run's row matched nothing, or the step's row matched nothing
    without ``quiet_without_step``.
    """
    count = len(events)
    params: list[Any] = []
    parts: list[str] = []
    if step_sql:
        parts.append(f"step_row AS ({step_sql})")
        params += step_params
    sets = ", ".join(("last_seq = last_seq + %s", *assignments))
    where = " AND ".join(
        ("id = %s", *conditions, *(["EXISTS (SELECT 1 FROM step_row)"] if step_sql else []))
    )
    parts.append(
        f"run_row AS (UPDATE {RUN_TABLE} SET {sets} WHERE {where} RETURNING last_seq, watched)"
    )
    params += [count, *assignment_params, run_id, *condition_params]
    for position, (insert_sql, insert_params) in enumerate(inserts):
        parts.append(f"inserted_{position} AS ({insert_sql})")
        params += insert_params
    if events:
        values = ", ".join(
            f"({position}, %s, CAST(%s AS jsonb))" for position in range(1, count + 1)
        )
        parts.append(
            f"new_events AS (INSERT INTO {EVENT_TABLE} (run_id, seq, type, data, created_at) "
            "SELECT %s, seq, type, data || jsonb_build_object('seq', seq), %s FROM ("
            "SELECT run_row.last_seq - %s + item.position AS seq, item.type, item.data "
            f"FROM run_row, (VALUES {values}) AS item(position, type, data)"
            ") AS numbered)"
        )
        params += [run_id, created_at, count]
        for event in events:
            params += [event["type"], json_param(_EVENT_DATA, event)]
    # A division by zero (nothing else divides here) undoes the whole statement when what it
    # found is not what the caller expected; see NotStoredInOneStatement.
    step_count = "(SELECT count(*) FROM step_row)" if step_sql else "1"
    expected = "run_row.last_seq IS NOT NULL"
    if quiet_without_step:
        expected += " OR stepped.n = 0"
    sql = (
        f"WITH {', '.join(parts)} SELECT run_row.last_seq, "
        f"1 / (CASE WHEN {expected} THEN 1 ELSE 0 END), run_row.watched "
        f"FROM (SELECT {step_count} AS n) AS stepped LEFT JOIN run_row ON true"
    )
    return sql, params


def storing_held_statement(
    run_id: int,
    *,
    steps: Sequence[tuple[str, Sequence[Any]]],
    inserts: Sequence[tuple[str, Sequence[Any]]],
    assignments: Sequence[str],
    assignment_params: Sequence[Any],
    conditions: Sequence[str],
    condition_params: Sequence[Any],
    events: Sequence[dict[str, Any]],
    created_at: Any,
) -> tuple[str, list[Any]]:
    """Several engine callbacks in one statement (PostgreSQL), when their caller kept what they
    do to the run's row (``services/recorder.py``, ``_Held``): the UPDATEs ``steps`` of step
    rows (``... RETURNING id``, each to write one row), the INSERTs ``inserts`` of new rows
    (whose ids were allocated), one UPDATE of the run's row with ``assignments`` where
    ``conditions`` hold and every step row was written, and one INSERT of ``events``, numbered
    by the caller (``events.numbered``). Sent like ``storing_statement``'s, it returns the run's
    last_seq, a 1 and whether the run is watched (``Run.watched``, as the UPDATE found the row:
    a subscriber's mark committed before is seen), and divides by zero (undoing itself) when
    the run's row or a step's row matched nothing. The step rows are written first, in the
    order given, then the run's: the caller gives them by round and index, the order every
    writer locks them in."""
    parts: list[str] = []
    params: list[Any] = []
    for position, (step_sql, step_params) in enumerate(steps):
        parts.append(f"step_{position} AS ({step_sql})")
        params += step_params
    for position, (insert_sql, insert_params) in enumerate(inserts):
        parts.append(f"inserted_{position} AS ({insert_sql})")
        params += insert_params
    where = " AND ".join(
        ("id = %s", *conditions, *(f"EXISTS (SELECT 1 FROM step_{n})" for n in range(len(steps))))
    )
    parts.append(
        f"run_row AS (UPDATE {RUN_TABLE} SET {', '.join(assignments)} WHERE {where} "
        "RETURNING last_seq, watched)"
    )
    params += [*assignment_params, run_id, *condition_params]
    if events:
        # One JSON array of the events, numbered: one parameter and one dump, whatever their
        # number (the text does not grow with it).
        parts.append(
            f"new_events AS (INSERT INTO {EVENT_TABLE} (run_id, seq, type, data, created_at) "
            "SELECT %s, CAST(item.data ->> 'seq' AS bigint), item.data ->> 'type', item.data, %s "
            "FROM run_row, jsonb_array_elements(CAST(%s AS jsonb)) AS item(data))"
        )
        params += [run_id, created_at, json_param(_EVENT_DATA, list(events))]
    sql = (
        f"WITH {', '.join(parts)} SELECT run_row.last_seq, "
        "1 / (CASE WHEN run_row.last_seq IS NOT NULL THEN 1 ELSE 0 END), run_row.watched "
        "FROM (SELECT 1) AS one LEFT JOIN run_row ON true"
    )
    return sql, params


def fetch_bound(sql: str, params: Sequence[Any]) -> list[tuple]:
    """Run one statement whose parameters go apart from its text, and return its rows
    (PostgreSQL; the site's cursors quote every parameter into the text in Python, about a fifth
    of the CPU of a hot-path statement with its dozens of parameters). Prepared once per
    connection and statement text (``CONDUCTOR_DB_PREPARED_STATEMENTS``: not behind PgBouncer in
    transaction mode), from the second time its text is sent (``_prepared``). Errors are
    Django's, as from any cursor."""
    import psycopg

    db = current()
    db.ensure_connection()
    text = _numbered(sql)
    with db.wrap_database_errors, psycopg.RawCursor(db.connection) as cursor:
        cursor.execute(text, params, prepare=_prepared(text))
        return cursor.fetchall()


_sent_once: set[str] = set()


def _prepared(text: str) -> bool:
    """Whether to prepare a statement (``CONDUCTOR_DB_PREPARED_STATEMENTS``): from the second
    time this process sends its text. A batch of callbacks stored in one statement has a text
    of its shape; one of an unusual shape, sent once, costs no preparing and takes no place in
    the connection's cache of prepared statements."""
    if not settings.CONDUCTOR_DB_PREPARED_STATEMENTS:
        return False
    if text in _sent_once:
        return True
    if len(_sent_once) >= 1024:
        _sent_once.clear()
    _sent_once.add(text)
    return False


class ModelColumns:
    """The columns of one model's rows read in plain SQL, turned into instances as the ORM would
    (the same converters): for reads on the hot path that the ORM took longer to build than the
    database to answer. Build one per model and database vendor (``model_columns``)."""

    def __init__(self, model: type[models.Model]) -> None:
        table = model._meta.db_table
        quote = connection.ops.quote_name
        fields = model._meta.concrete_fields
        columns = [field.get_col(table) for field in fields]
        self.model = model
        self.count = len(fields)
        self.sql = ", ".join(f"{quote(table)}.{quote(field.column)}" for field in fields)
        self.attnames = [field.attname for field in fields]
        self.converters: list[tuple[int, list[Callable[..., Any]], Any]] = []
        for position, column in enumerate(columns):
            converters = connection.ops.get_db_converters(column) + column.get_db_converters(
                connection
            )
            if converters:
                self.converters.append((position, converters, column))

    def instance(self, values: Sequence[Any]) -> Any:
        """A model instance from this model's columns, in ``sql``'s order."""
        db = current()
        values = list(values)
        for position, converters, column in self.converters:
            value = values[position]
            for converter in converters:
                value = converter(value, column, db)
            values[position] = value
        return self.model.from_db(db.alias, self.attnames, values)


_model_columns: dict[tuple[type[models.Model], str], ModelColumns] = {}


def model_columns(model: type[models.Model]) -> ModelColumns:
    """``ModelColumns`` of ``model`` on the database in use (built once)."""
    key = (model, vendor())
    columns = _model_columns.get(key)
    if columns is None:
        columns = _model_columns[key] = ModelColumns(model)
    return columns
