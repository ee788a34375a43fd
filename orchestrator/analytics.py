"""Reads: usage over time (tokens, cost, calls, latency percentiles, error rate), per worker,
pool or strategy, per hour or day, for one project's runs.

One SQL statement per request, whatever the number of runs: the rows of the window (runs, or
for workers their steps) are bucketed by the run's creation time (UTC hours or days) and keyed by
the group in the ORM, and one outer statement sums them per (bucket, key) and counts each
cell's latencies in a histogram of bins 5% apart, from which p50 and p95 are read (within 2.5%
of the exact nearest-rank value, and never outside the cell's least and most), on SQLite and
PostgreSQL alike.

- pool, strategy: a point is the runs created in its bucket: ``runs``, ``calls`` (model calls,
  the conductor's included), tokens, cost, latency = the run's wall time, error rate = failed
  runs over finished ones.
- worker: a point is the worker's steps in runs created in its bucket (a step reused from
  another run is not counted: it made no call): ``runs`` (distinct), ``calls`` (attempts),
  tokens, cost, latency = the step's, error rate = failed steps over finished ones.
"""

from __future__ import annotations

import datetime as dt
import math
from datetime import datetime, timedelta
from typing import Any, Final, Literal, TypedDict

from django.core.exceptions import EmptyResultSet
from django.db import connection
from django.db.models import Case, CharField, F, Func, IntegerField, QuerySet, Value, When
from django.db.models.functions import Trunc

from orchestrator.models import Project, Run, Step
from orchestrator.selectors import run_list

Group = Literal["worker", "pool", "strategy"]
Interval = Literal["hour", "day"]
GROUPS: Final[tuple[Group, ...]] = ("worker", "pool", "strategy")
INTERVALS: Final[tuple[Interval, ...]] = ("hour", "day")
STEP: Final = {"hour": timedelta(hours=1), "day": timedelta(days=1)}
MAX_BUCKETS: Final = 24 * 62
MAX_SERIES: Final = 12
"""The series drawn: the groups with the most calls in the window; the rest are summed as
"other"."""

_FINISHED_STEP = (Step.Status.SUCCEEDED, Step.Status.FAILED)


class Point(TypedDict):
    """One (bucket, group) cell."""

    bucket: str
    runs: int
    calls: int
    tokens_in: int
    tokens_out: int
    cost: float
    latency_p50: float | None
    latency_p95: float | None
    error_rate: float | None
    errors: int
    finished: int


class Series(TypedDict):
    key: str
    label: str
    points: list[Point]


class Usage(TypedDict):
    """What ``GET /api/analytics/`` answers and the analytics page draws."""

    project: int
    group: str
    interval: str
    since: str
    until: str
    buckets: list[str]
    series: list[Series]
    totals: dict[str, Any]


def window_problem(*, interval: str, since: datetime, until: datetime) -> str:
    """Why [since, until) cannot be shown at ``interval``, or ""."""
    if until <= since:
        return "The window ends before it starts."
    if (until - since) / STEP[interval] > MAX_BUCKETS:
        return f"At most {MAX_BUCKETS:,} {interval}s at a time: narrow the window."
    return ""


def usage_over_time(
    *, user: Any, project: Project | int, group: Group, interval: Interval,
    since: datetime, until: datetime,
) -> Usage:  # fmt: skip
    """The usage of ``project``'s runs created in [since, until), per ``interval`` and
    ``group`` (the user must see the project: else every series is empty)."""
    project_id = project.pk if isinstance(project, Project) else project
    runs = run_list(user=user, project=project_id, created_after=since).filter(created_at__lt=until)
    cells = _cells(runs, group=group, interval=interval)
    buckets = _buckets(since, until, interval)
    by_key: dict[str, dict[str, Point]] = {}
    labels: dict[str, str] = {}
    for row in cells:
        key = str(row["key"])
        labels[key] = row["label"] or key
        by_key.setdefault(key, {})[_iso(row["bucket"])] = _point(row)
    ranked = sorted(by_key, key=lambda k: (-sum(p["calls"] for p in by_key[k].values()), k))
    series = [
        Series(
            key=key,
            label=labels[key],
            points=[by_key[key].get(b) or _empty(b) for b in buckets],
        )
        for key in ranked[:MAX_SERIES]
    ]
    if len(ranked) > MAX_SERIES:
        series.append(_other([by_key[key] for key in ranked[MAX_SERIES:]], buckets))
    return Usage(
        project=project_id,
        group=group,
        interval=interval,
        since=_iso(since),
        until=_iso(until),
        buckets=buckets,
        series=series,
        totals=_totals([p for s in series for p in s["points"]]),
    )


def _cells(runs: QuerySet[Run], *, group: Group, interval: Interval) -> list[dict[str, Any]]:
    """Per (bucket, key): counts, sums and latency percentiles, in one statement: the cells'
    sums, and beside them each cell's latency histogram (``_BIN``), from which the percentiles
    are read (a sort of every row per cell, as exact ranks need, costs several times more)."""
    if group == "worker":
        rows: QuerySet[Any] = Step.objects.filter(
            run_id__in=runs.order_by().values("pk"), reused_from__isnull=True
        ).annotate(
            bucket=_Bucket("run__created_at", interval=interval),
            group_key=F("worker_name"),
            group_label=F("worker_name"),
            run_ref=F("run_id"),
            calls=F("attempts"),
            latency_value=F("latency"),
            failed=_flag(status=Step.Status.FAILED),
            finished=_flag(status__in=_FINISHED_STEP),
        )
    else:
        rows = runs.order_by().annotate(
            bucket=_Bucket("created_at", interval=interval),
            group_key=F("pool_id" if group == "pool" else "strategy"),
            group_label=F("pool__name" if group == "pool" else "strategy"),
            run_ref=F("id"),
            calls=F("model_calls"),
            latency_value=F("wall_time"),
            failed=_flag(status=Run.Status.FAILED),
            finished=_flag(status__in=Run.FINISHED),
        )
    rows = rows.annotate(spent=F("cost"), tok_in=F("tokens_in"), tok_out=F("tokens_out"))
    try:
        inner, params = rows.values_list(*_INNER).query.sql_with_params()
    except EmptyResultSet:  # the user sees none of the project's runs
        return []
    statement = f"""
        WITH cell AS ({inner})
        SELECT bucket, group_key, MAX(group_label), COUNT(DISTINCT run_ref), SUM(calls),
               SUM(tok_in), SUM(tok_out), SUM(spent), SUM(failed), SUM(finished),
               MIN(latency_value), MAX(latency_value), NULL, COUNT(latency_value)
        FROM cell GROUP BY bucket, group_key
        UNION ALL
        SELECT bucket, group_key, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
               bin, COUNT(*)
        FROM (SELECT bucket, group_key, {_BIN} AS bin FROM cell
              WHERE latency_value IS NOT NULL) binned
        GROUP BY bucket, group_key, bin
    """  # noqa: S608 - the inner text is the ORM's, its values are parameters
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        fetched = cursor.fetchall()
    cells: dict[tuple[Any, Any], dict[str, Any]] = {}
    histograms: dict[tuple[Any, Any], list[tuple[int, int]]] = {}
    for row in fetched:
        place = (row[0], row[1])
        if row[12] is None:
            cells[place] = dict(zip(_OUTER, row[:12], strict=True))
            cells[place]["measured"] = row[13]
        else:
            histograms.setdefault(place, []).append((int(row[12]), int(row[13])))
    for place, cell in cells.items():
        bins = sorted(histograms.get(place, []))
        low, high = cell.pop("latency_min"), cell.pop("latency_max")
        cell["latency_p50"] = _percentile(bins, cell["measured"], 0.50, low, high)
        cell["latency_p95"] = _percentile(bins, cell["measured"], 0.95, low, high)
    return [cells[place] for place in sorted(cells, key=lambda p: (str(p[0]), str(p[1])))]


class _Bucket(Func):
    """The start of a run's hour or day (UTC). On SQLite the stored text's first 13 or 10
    characters: Django's own truncation there is a Python function called for every row."""

    output_field = CharField()

    def __init__(self, expression: str, *, interval: Interval) -> None:
        super().__init__(expression)
        self.interval = interval

    def as_sql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return compiler.compile(Trunc(self.source_expressions[0], self.interval, tzinfo=dt.UTC))

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        sql, params = compiler.compile(self.source_expressions[0])
        return f"substr({sql}, 1, {13 if self.interval == 'hour' else 10})", params


# Latency histogram: bin i holds [EDGES[i-1], EDGES[i]); edges grow by RATIO from 1 ms, so a
# percentile read as its bin's geometric middle (then kept within the cell's least and most) is
# within RATIO's half-step of the exact one: 2.5%.
RATIO: Final = 1.05
EDGES: Final = tuple(0.001 * RATIO**k for k in range(int(math.log(1e8) / math.log(RATIO)) + 1))


def _bin_sql(low: int, high: int) -> str:
    """A CASE that finds a latency's bin in [low, high] by halving: native on every database."""
    if high - low <= 0:
        return str(low)
    middle = (low + high + 1) // 2
    edge = f"{EDGES[middle - 1]:.9g}"
    return (
        f"CASE WHEN latency_value < {edge} THEN {_bin_sql(low, middle - 1)} "
        f"ELSE {_bin_sql(middle, high)} END"
    )


_BIN: Final = _bin_sql(0, len(EDGES))


def _percentile(
    bins: list[tuple[int, int]], measured: int, fraction: float, low: Any, high: Any
) -> float | None:
    if not measured or low is None or high is None:
        return None
    rank = math.ceil(fraction * measured)
    seen = 0
    for index, count in bins:
        seen += count
        if seen >= rank:
            if index == 0:
                value = EDGES[0]
            elif index >= len(EDGES):
                value = EDGES[-1]
            else:
                value = math.sqrt(EDGES[index - 1] * EDGES[index])
            return min(max(value, float(low)), float(high))
    return float(high)


_INNER: Final = (
    *("bucket", "group_key", "group_label", "run_ref", "calls", "tok_in", "tok_out", "spent"),
    *("latency_value", "failed", "finished"),
)
_OUTER: Final = (
    *("bucket", "key", "label", "runs", "calls", "tokens_in", "tokens_out", "cost", "errors"),
    *("finished", "latency_min", "latency_max"),
)


def _flag(**condition: Any) -> Case:
    return Case(When(**condition, then=Value(1)), default=Value(0), output_field=IntegerField())


def _point(row: dict[str, Any]) -> Point:
    finished = int(row["finished"] or 0)
    errors = int(row["errors"] or 0)
    return Point(
        bucket=_iso(row["bucket"]),
        runs=int(row["runs"] or 0),
        calls=int(row["calls"] or 0),
        tokens_in=int(row["tokens_in"] or 0),
        tokens_out=int(row["tokens_out"] or 0),
        cost=round(float(row["cost"] or 0.0), 6),
        latency_p50=_seconds(row["latency_p50"]),
        latency_p95=_seconds(row["latency_p95"]),
        error_rate=round(errors / finished, 4) if finished else None,
        errors=errors,
        finished=finished,
    )


def _empty(bucket: str) -> Point:
    return Point(
        bucket=bucket, runs=0, calls=0, tokens_in=0, tokens_out=0, cost=0.0,
        latency_p50=None, latency_p95=None, error_rate=None, errors=0, finished=0,
    )  # fmt: skip


def _other(cells: list[dict[str, Point]], buckets: list[str]) -> Series:
    """The groups past ``MAX_SERIES`` summed (percentiles do not add up: none)."""
    points = []
    for bucket in buckets:
        found = [cell[bucket] for cell in cells if bucket in cell]
        totals = _totals(found)
        points.append(Point(bucket=bucket, latency_p50=None, latency_p95=None, **totals))
    return Series(key="other", label="other", points=points)


def _totals(points: list[Point]) -> dict[str, Any]:
    sums = {
        name: sum(p[name] for p in points)  # type: ignore[literal-required]
        for name in ("runs", "calls", "tokens_in", "tokens_out", "errors", "finished")
    }
    finished = sums["finished"]
    return {
        **sums,
        "cost": round(sum(p["cost"] for p in points), 6),
        "error_rate": round(sums["errors"] / finished, 4) if finished else None,
    }


def bucket_start(moment: datetime, interval: str) -> datetime:
    """The start of the hour or day (UTC) that ``moment`` falls in."""
    start = moment.replace(minute=0, second=0, microsecond=0)
    return start.replace(hour=0) if interval == "day" else start


def _buckets(since: datetime, until: datetime, interval: Interval) -> list[str]:
    buckets = []
    moment = bucket_start(since, interval)
    while moment < until:
        buckets.append(_iso(moment))
        moment += STEP[interval]
    return buckets


def _seconds(value: Any) -> float | None:
    return None if value is None else round(float(value), 4)


def _iso(moment: Any) -> str:
    if isinstance(moment, str):  # SQLite's bucket: "2026-12-07" or "2026-12-07 05"
        moment = datetime.fromisoformat(moment + (":00" if len(moment) == 13 else ""))
    text: str = moment.isoformat()
    return text.replace("+00:00", "Z") if "+" in text else text + "Z"
