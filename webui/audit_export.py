"""The audit log as people read it: each entry's changes as (field, before, after) lines, and
the CSV export the page and the API both stream."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from typing import Any

from django.http import StreamingHttpResponse

from orchestrator.models import AuditEntry, Project
from orchestrator.spreadsheet import cell_out
from webui.streaming import batched

CSV_COLUMNS = (
    "time",
    "actor",
    "action",
    "target_type",
    "target_id",
    "target",
    "field",
    "before",
    "after",
)
CHUNK_ROWS = 500


def shown(value: Any) -> str:
    """A stored value as text: strings as they are, the rest as compact JSON; absent as —."""
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def entry_changes(entry: AuditEntry) -> list[tuple[str, str, str]]:
    """(field, before, after) for every field the entry records, in a stable order."""
    before, after = entry.before or {}, entry.after or {}
    fields = [*before, *(key for key in after if key not in before)]
    return [
        (
            field,
            shown(before[field]) if field in before else "",
            shown(after[field]) if field in after else "",
        )
        for field in fields
    ]


class _Line:
    def write(self, value: str) -> str:
        return value


def csv_lines(entries: Iterable[AuditEntry]) -> Iterator[str]:
    """The header, then one line per changed field of each entry (one line for an entry with
    no fields), newest first as given. Cells a spreadsheet would run as formulas are quoted."""
    writer = csv.writer(_Line())
    yield writer.writerow(CSV_COLUMNS)
    for entry in entries:
        head = [
            entry.created_at.isoformat(),
            entry.actor_name,
            entry.action,
            entry.target_type,
            entry.target_id if entry.target_id is not None else "",
            entry.target_label,
        ]
        for field, before, after in entry_changes(entry) or [("", "", "")]:
            yield writer.writerow([cell_out(value) for value in (*head, field, before, after)])


def audit_csv_response(project: Project, entries) -> StreamingHttpResponse:
    """The CSV download of ``entries`` (streamed in chunks of rows from the database)."""
    response = StreamingHttpResponse(
        batched(csv_lines(entries.iterator(chunk_size=CHUNK_ROWS))),
        content_type="text/csv; charset=utf-8",
    )
    response["Content-Disposition"] = f'attachment; filename="audit-{project.slug}.csv"'
    response["Cache-Control"] = "no-store"
    return response
