"""Reads: the runs a filter selects, as CSV or JSON Lines, one run a row, streamed.

The rows carry what the runs list shows and what a spreadsheet or a notebook needs beside it:
the verdict and the answer as the list shows them, the full answer, reference, grader, score,
totals, timings and who started the run. Rows are read with a database cursor in chunks from
``values()`` (no model instances), so memory stays flat however many runs are exported. CSV cells
that a spreadsheet would run as a formula are written with a leading apostrophe
(``spreadsheet.cell_out``), as the dataset and audit exports write them.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any, Final

from django.db.models import QuerySet

from orchestrator import verdicts, wire
from orchestrator.models import Run
from orchestrator.spreadsheet import cell_out

CHUNK_SIZE: Final = 2000
EXPORT_FIELDS: Final = (
    "id",
    "created_at",
    "started_at",
    "finished_at",
    "status",
    "verdict",
    "strategy",
    "pool_id",
    "pool_name",
    "input",
    "answer_shown",
    "answer",
    "reference",
    "grader",
    "score",
    "tokens_in",
    "tokens_out",
    "cost",
    "model_calls",
    "wall_time",
    "step_count",
    "error",
    "replay_of",
    "created_by",
)
"""The keys of every row, in order (the CSV header)."""

_COLUMNS: Final = (
    *("id", "created_at", "started_at", "finished_at", "status", "strategy", "pool_id"),
    *("pool__name", "input", "answer", "reference", "grader", "score", "tokens_in"),
    *("tokens_out", "cost", "model_calls", "wall_time", "step_count", "error", "replay_of_id"),
    "created_by__username",
)


def export_rows(*, runs: QuerySet[Run]) -> Iterator[dict[str, Any]]:
    """One dict per run of ``runs`` (any Run queryset, in its order), keys ``EXPORT_FIELDS``;
    datetimes as ISO 8601 in UTC."""
    for row in runs.values(*_COLUMNS).iterator(chunk_size=CHUNK_SIZE):
        yield {
            "id": row["id"],
            "created_at": _when(row["created_at"]),
            "started_at": _when(row["started_at"]),
            "finished_at": _when(row["finished_at"]),
            "status": row["status"],
            "verdict": verdicts.verdict(row["status"], row["score"]),
            "strategy": row["strategy"],
            "pool_id": row["pool_id"],
            "pool_name": row["pool__name"],
            "input": row["input"],
            "answer_shown": wire.answer_shown(row["answer"], row["grader"]),
            "answer": row["answer"],
            "reference": row["reference"],
            "grader": row["grader"],
            "score": row["score"],
            "tokens_in": row["tokens_in"],
            "tokens_out": row["tokens_out"],
            "cost": row["cost"],
            "model_calls": row["model_calls"],
            "wall_time": row["wall_time"],
            "step_count": row["step_count"],
            "error": row["error"],
            "replay_of": row["replay_of_id"],
            "created_by": row["created_by__username"],
        }


def csv_lines(rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    """The header, then one CSV record per row (RFC 4180, CRLF line ends), formula-safe."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(EXPORT_FIELDS)
    yield _drain(buffer)
    for row in rows:
        writer.writerow([cell_out(row[field]) for field in EXPORT_FIELDS])
        yield _drain(buffer)


def jsonl_lines(rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    """One JSON object per row and line."""
    for row in rows:
        yield json.dumps(row, ensure_ascii=False) + "\n"


def _drain(buffer: io.StringIO) -> str:
    text = buffer.getvalue()
    buffer.seek(0)
    buffer.truncate()
    return text


def _when(moment: datetime | None) -> str | None:
    return moment.isoformat().replace("+00:00", "Z") if moment is not None else None
