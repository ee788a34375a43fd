"""An experiment's scoreboard, computed from the runs of its finished trials: one row per arm,
the runs behind a cell, and two arms item by item (head to head).

Three queries however many runs: the finished trials with their runs' figures, the items' tags,
and the workers' tokens summed per arm in the database.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import Count, F, Q, QuerySet, Sum, Value
from django.db.models.functions import Coalesce

from orchestrator import wire
from orchestrator.models import DatasetItem, Experiment, ExperimentArm, Run, Step, Trial
from orchestrator.verdicts import is_right, verdict_filter

Z_95 = 1.959963984540054
INTERVAL = "Wilson score interval, 95%"
MAX_HEAD_TO_HEAD = 1000
OUTCOMES = ("right", "wrong", "failed")


def wilson(successes: float, n: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval of a proportion (``successes`` may be fractional: mean scores)."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def percentile(sorted_values: list[float], fraction: float) -> float | None:
    """Nearest-rank percentile of an ascending list; None when it is empty."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


@dataclass(slots=True)
class _Tally:
    runs: int = 0
    graded: int = 0
    correct: float = 0.0
    failed: int = 0
    tokens: int = 0
    calls: int = 0
    cost: float = 0.0


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _tag_score(correct: float, count: int) -> wire.TagScore:
    if not count:
        return {"runs": 0, "accuracy": None, "low": None, "high": None}
    low, high = wilson(correct, count)
    return {
        "runs": count,
        "accuracy": round(correct / count, 4),
        "low": round(low, 4),
        "high": round(high, 4),
    }


def _best(rows: list[wire.ScoreboardArm]) -> dict[str, list[int]]:
    best: dict[str, list[int]] = {}
    for column, higher in wire.SCOREBOARD_COLUMNS.items():
        values = [(row[column], row["arm"]) for row in rows if row[column] is not None]  # type: ignore[literal-required]
        if len(values) < 2:
            best[column] = []
            continue
        target = max(v for v, _ in values) if higher else min(v for v, _ in values)
        best[column] = [arm for value, arm in values if value == target]
    return best


def _wall_percentiles(experiment_id: int) -> dict[int, tuple[float | None, float | None]]:
    """Each arm's wall time p50 and p95 (nearest rank), ranked in the database: two rows per arm
    come back, not one per run."""
    trial, run = Trial._meta.db_table, Run._meta.db_table
    sql = f"""
        SELECT arm_id, rn, n, wall FROM (
            SELECT t.arm_id AS arm_id, r.wall_time AS wall,
                   ROW_NUMBER() OVER (PARTITION BY t.arm_id ORDER BY r.wall_time, r.id) AS rn,
                   COUNT(*) OVER (PARTITION BY t.arm_id) AS n
            FROM {trial} t JOIN {run} r ON r.id = t.run_id
            WHERE t.experiment_id = %s AND t.finished AND r.wall_time IS NOT NULL
        ) ranked
        WHERE rn = (n * 50 + 99) / 100 OR rn = (n * 95 + 99) / 100
    """  # noqa: S608 (table names from the models; the one value is a parameter)
    found: dict[int, dict[int, float]] = defaultdict(dict)
    with connection.cursor() as cursor:
        cursor.execute(sql, [experiment_id])
        for arm_id, rank, count, wall in cursor.fetchall():
            found[arm_id][rank] = wall
            found[arm_id][-1] = count
    result: dict[int, tuple[float | None, float | None]] = {}
    for arm_id, ranks in found.items():
        count = int(ranks[-1])
        result[arm_id] = (ranks.get((count * 50 + 99) // 100), ranks.get((count * 95 + 99) // 100))
    return result


def experiment_scoreboard(*, experiment: Experiment) -> wire.Scoreboard:
    """The scoreboard of an experiment from the runs of its finished trials.

    Summed in the database, grouped by arm and by the items' tag lists (a handful of groups per
    arm however many runs); wall-time percentiles ranked there too; workers' tokens summed per
    arm. Five queries, a few rows each."""
    arms = list(
        ExperimentArm.objects.filter(experiment=experiment)
        .select_related("pool")
        .only("pk", "label", "strategy", "options", "pool__name", "pool_id")
        .order_by("position")
    )
    graded = ~Q(item__grader="")
    succeeded = Q(run__status=Run.Status.SUCCEEDED)
    groups = (
        Trial.objects.filter(experiment=experiment, finished=True)
        .values("arm_id", "item__tags")
        .annotate(
            runs=Count("pk"),
            graded=Count("pk", filter=graded),
            correct=Sum(Coalesce("run__score", Value(0.0)), filter=graded & succeeded),
            failed=Count("pk", filter=~succeeded),
            tokens=Sum(F("run__tokens_in") + F("run__tokens_out")),
            calls=Sum("run__model_calls"),
            cost=Sum("run__cost"),
        )
        .order_by()
    )
    tallies: dict[int, _Tally] = {arm.pk: _Tally() for arm in arms}
    tag_sums: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0]))
    tags_seen: set[str] = set()
    for group in groups:
        tally = tallies[group["arm_id"]]
        tally.runs += group["runs"]
        tally.graded += group["graded"]
        tally.correct += group["correct"] or 0.0
        tally.failed += group["failed"]
        tally.tokens += group["tokens"] or 0
        tally.calls += group["calls"] or 0
        tally.cost += group["cost"] or 0.0
        if group["graded"]:
            for tag in group["item__tags"] or []:
                sums = tag_sums[group["arm_id"]][tag]
                sums[0] += group["correct"] or 0.0
                sums[1] += group["graded"]
                tags_seen.add(tag)
    walls = _wall_percentiles(experiment.pk)
    worker_tokens = dict(
        Step.objects.filter(run__trial__experiment=experiment, run__trial__finished=True)
        .values("run__trial__arm")
        .annotate(tokens=Sum("tokens_in") + Sum("tokens_out"))
        .values_list("run__trial__arm", "tokens")
        .order_by()
    )
    rows: list[wire.ScoreboardArm] = []
    for arm in arms:
        tally = tallies[arm.pk]
        runs = tally.runs

        def per_item(total: float, runs: int = runs) -> float | None:
            return total / runs if runs else None

        accuracy = tally.correct / tally.graded if tally.graded else None
        low, high = wilson(tally.correct, tally.graded) if tally.graded else (None, None)
        workers = worker_tokens.get(arm.pk) or 0
        p50, p95 = walls.get(arm.pk, (None, None))
        rows.append(
            {
                "arm": arm.pk,
                "label": arm.label,
                "strategy": arm.strategy,
                "options": dict(arm.options or {}),
                "pool": arm.pool_id,
                "pool_name": arm.pool.name,
                "runs": runs,
                "graded": tally.graded,
                "failed": tally.failed,
                "accuracy": _round(accuracy, 4),
                "accuracy_low": _round(low, 4),
                "accuracy_high": _round(high, 4),
                "tags": {
                    tag: _tag_score(correct, int(count))
                    for tag, (correct, count) in sorted(tag_sums[arm.pk].items())
                },
                "tokens_per_item": _round(per_item(tally.tokens), 1),
                "conductor_tokens_per_item": _round(per_item(tally.tokens - workers), 1),
                "worker_tokens_per_item": _round(per_item(workers), 1),
                "calls_per_item": _round(per_item(tally.calls), 2),
                "cost_per_item": _round(per_item(tally.cost), 7),
                "wall_p50": _round(p50, 3),
                "wall_p95": _round(p95, 3),
            }
        )
    return {"arms": rows, "tags": sorted(tags_seen), "best": _best(rows), "interval": INTERVAL}


def experiment_progress(*, experiment: Experiment) -> wire.ExperimentProgress:
    return {
        "id": experiment.pk,
        "status": experiment.status,
        "done": experiment.done,
        "total": experiment.total,
        "error": experiment.error,
    }


def experiment_cell_runs(
    *,
    experiment: Experiment,
    arm: int,
    tag: str | None = None,
    outcome: str | None = None,
) -> QuerySet[Run]:
    """The runs behind one cell of the scoreboard: an arm's finished runs, of items with
    ``tag``, that were right, wrong (graded, not right) or failed; in item order."""
    trials = Trial.objects.filter(experiment=experiment, arm_id=arm, finished=True)
    runs = Run.objects.filter(trial__in=trials).order_by("trial__item__position", "pk")
    if tag:
        item_ids = [
            pk
            for pk, tags in DatasetItem.objects.filter(dataset_id=experiment.dataset_id)
            .values_list("pk", "tags")
            .iterator(chunk_size=5000)
            if tag in (tags or [])
        ]
        runs = runs.filter(trial__item_id__in=item_ids)
    if outcome == "right":
        runs = runs.filter(verdict_filter("right"))
    elif outcome == "wrong":  # graded and not right: a failed trial counts against its arm
        runs = runs.exclude(trial__item__grader="").exclude(verdict_filter("right"))
    elif outcome == "failed":
        runs = runs.exclude(status=Run.Status.SUCCEEDED)
    return runs.select_related("pool")


def experiment_head_to_head(*, experiment: Experiment, a: int, b: int) -> dict[str, Any]:
    """Two arms item by item: how often both were right, only one, neither; and the items where
    exactly one was right (at most MAX_HEAD_TO_HEAD), each with the two runs to compare."""
    rows: dict[int, dict[int, tuple[int, str, float | None]]] = defaultdict(dict)
    for arm_id, item_id, run_id, status, score in Trial.objects.filter(
        experiment=experiment, arm_id__in=(a, b), finished=True
    ).values_list("arm_id", "item_id", "run_id", "run__status", "run__score"):
        rows[item_id][arm_id] = (run_id, status, score)
    counts = {"both_right": 0, "only_a": 0, "only_b": 0, "both_wrong": 0}
    differing: list[int] = []
    for item_id, pair in rows.items():
        if a not in pair or b not in pair:
            continue
        right_a, right_b = is_right(*pair[a][1:]), is_right(*pair[b][1:])
        key = (
            "both_right"
            if right_a and right_b
            else "only_a"
            if right_a
            else "only_b"
            if right_b
            else "both_wrong"
        )
        counts[key] += 1
        if right_a != right_b:
            differing.append(item_id)
    items = DatasetItem.objects.filter(pk__in=differing).order_by("position")[:MAX_HEAD_TO_HEAD]
    listed = []
    for item in items.only("pk", "position", "input", "tags"):
        run_a, run_b = rows[item.pk][a], rows[item.pk][b]
        listed.append(
            {
                "item": item.pk,
                "position": item.position,
                "input": _first_line(item.input),
                "tags": list(item.tags or []),
                "winner": "a" if is_right(*run_a[1:]) else "b",
                "a_run": run_a[0],
                "b_run": run_b[0],
                "a_score": run_a[2],
                "b_score": run_b[2],
                "compare_url": f"/compare/?runs={run_a[0]},{run_b[0]}",
            }
        )
    return {"a": a, "b": b, "counts": counts, "items": listed}


def _first_line(text: str, limit: int = 160) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line:
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


def dataset_export_lines(*, items: Iterable[DatasetItem], format: str) -> Iterable[str]:
    """A dataset's items as JSONL lines or CSV rows (header first), as import reads them. CSV
    cells that a spreadsheet would run as formulas are written as text (``spreadsheet``)."""
    import csv
    import io
    import json

    from orchestrator.spreadsheet import cell_out

    if format == "jsonl":
        for item in items:
            yield (
                json.dumps(
                    {
                        "input": item.input,
                        "reference": item.reference,
                        "grader": item.grader,
                        "tags": list(item.tags or []),
                    },
                    ensure_ascii=False,
                )
                + "\n"
            )
        return
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["input", "reference", "grader", "tags"])
    for item in items:
        row = [item.input, item.reference, item.grader, ",".join(item.tags or [])]
        writer.writerow([cell_out(value) for value in row])
        if buffer.tell() > 64 * 1024:
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue()


def format_scoreboard(board: wire.Scoreboard) -> str:
    """The scoreboard as a text table for the terminal; * marks the best value of a column."""
    tags = board["tags"]
    columns = [
        ("accuracy", "acc", lambda v: f"{v:.3f}"),
        ("tokens_per_item", "tokens/item", lambda v: f"{v:.0f}"),
        ("conductor_tokens_per_item", "conductor", lambda v: f"{v:.0f}"),
        ("worker_tokens_per_item", "workers", lambda v: f"{v:.0f}"),
        ("calls_per_item", "calls/item", lambda v: f"{v:.2f}"),
        ("cost_per_item", "cost/item $", lambda v: f"{v:.6f}"),
        ("wall_p50", "p50 s", lambda v: f"{v:.3f}"),
        ("wall_p95", "p95 s", lambda v: f"{v:.3f}"),
    ]
    width = max([len("arm"), *(len(row["label"]) for row in board["arms"])])
    header = f"{'arm':<{width}} {'runs':>5} {'95% CI':>13} "
    header += " ".join(f"{tag[:7]:>8}" for tag in tags)
    header += " " + " ".join(f"{title:>12}" for _, title, _ in columns)
    lines = [header, "-" * len(header)]
    for row in board["arms"]:
        ci = (
            f"[{row['accuracy_low']:.2f}, {row['accuracy_high']:.2f}]"
            if row["accuracy_low"] is not None
            else "—"
        )
        line = f"{row['label']:<{width}} {row['runs']:>5} {ci:>13} "
        line += " ".join(
            f"{row['tags'][tag]['accuracy']:>8.3f}"
            if tag in row["tags"] and row["tags"][tag]["accuracy"] is not None
            else f"{'—':>8}"
            for tag in tags
        )
        cells = []
        for key, _, fmt in columns:
            value = row[key]  # type: ignore[literal-required]
            text = "—" if value is None else fmt(value)
            if row["arm"] in board["best"].get(key, []):
                text = "*" + text
            cells.append(f"{text:>12}")
        lines.append(line + " " + " ".join(cells))
    lines.append(f"accuracy: {board['interval']}; * best of its column")
    return "\n".join(lines)
