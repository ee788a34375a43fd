"""Datasets: import from JSONL or CSV (all lines or none), the bundled suite as a built-in
dataset, and an item added from a run.

A file is read whole before anything is stored: every bad line is reported (by line number,
naming the field), and a file with any bad line stores nothing.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Max

from orchestrator.engine.grading import GRADER_KINDS, reference_problem
from orchestrator.models import Dataset, DatasetItem, Membership, Project, Run
from orchestrator.selectors import user_can_run, user_role
from orchestrator.services.audit import audit_record
from orchestrator.services.runs import default_grader, text_size_problem
from orchestrator.spreadsheet import cell_in

FORMATS = ("jsonl", "csv")
ITEM_FIELDS = ("input", "reference", "grader", "tags")
MAX_TAGS = 20
MAX_TAG_LENGTH = 50
MAX_NAME_LENGTH = 100
# At most this many line errors are listed; the rest are counted.
MAX_REPORTED_ERRORS = 50
SUITE_DATASET_NAME = "Bundled suite"
BUILTIN_SUITE = "suite"


@dataclass(frozen=True, slots=True)
class ItemData:
    """One item as read from a file or a run, checked, before it is stored."""

    input: str
    reference: str = ""
    grader: str = ""
    tags: tuple[str, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class LineError:
    """Why one line of an imported file could not be read."""

    line: int
    error: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.error}"


def dataset_max_bytes() -> int:
    return settings.CONDUCTOR_DATASET_MAX_BYTES


def dataset_max_items() -> int:
    return settings.CONDUCTOR_DATASET_MAX_ITEMS


def format_for_filename(filename: str) -> str | None:
    """The format a file's name says ("jsonl" for .jsonl/.json/.ndjson, "csv"), or None."""
    lowered = filename.lower()
    if lowered.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    if lowered.endswith(".csv"):
        return "csv"
    return None


def _check_item(values: Mapping[str, Any]) -> tuple[ItemData | None, str]:
    """The item a mapping of fields describes, or why it cannot be one."""
    unknown = sorted(set(values) - set(ITEM_FIELDS))
    if unknown:
        return (
            None,
            f"unknown field {', '.join(map(repr, unknown))} (fields: {', '.join(ITEM_FIELDS)})",
        )
    text_fields: dict[str, str] = {}
    for name in ("input", "reference", "grader"):
        value = values.get(name, "")
        if value is None:
            value = ""
        if not isinstance(value, str):
            return None, f"{name}: give text, not {type(value).__name__}"
        text_fields[name] = value.strip()
    if not text_fields["input"]:
        return None, "input: give a question"
    for name in ("input", "reference"):
        problem = text_size_problem(text_fields[name])
        if problem:
            return None, f"{name}: {problem}"
    grader = text_fields["grader"]
    if grader and grader not in GRADER_KINDS:
        return None, f'grader: unknown grader "{grader[:40]}" (one of: {", ".join(GRADER_KINDS)})'
    if grader and not text_fields["reference"]:
        return None, "grader: a grader needs a reference to check against"
    if grader:
        problem = reference_problem(grader, text_fields["reference"]) or ""
        if problem:
            return None, f"reference: {problem}"
    tags, problem = _check_tags(values.get("tags"))
    if problem:
        return None, f"tags: {problem}"
    reference = text_fields["reference"]
    if reference and not grader:
        grader = default_grader(reference)
    return ItemData(input=text_fields["input"], reference=reference, grader=grader, tags=tags), ""


def _check_tags(value: Any) -> tuple[tuple[str, ...], str]:
    if value is None or value == "":
        return (), ""
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, list) or not all(isinstance(tag, str) for tag in value):
        return (), "give a list of text tags (in CSV: tags separated by commas)"
    tags = tuple(dict.fromkeys(tag.strip() for tag in value if tag.strip()))
    if len(tags) > MAX_TAGS:
        return (), f"at most {MAX_TAGS} tags, not {len(tags)}"
    long = next((tag for tag in tags if len(tag) > MAX_TAG_LENGTH), None)
    if long is not None:
        return (), f"a tag is at most {MAX_TAG_LENGTH} characters ({long[:20]}… has {len(long)})"
    return tags, ""


def _jsonl_rows(text: str) -> Iterable[tuple[int, Any, str]]:
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line), ""
        except (json.JSONDecodeError, RecursionError) as error:
            yield number, None, f"not valid JSON ({getattr(error, 'msg', 'nested too deeply')})"


def _csv_rows(text: str) -> Iterable[tuple[int, Any, str]]:
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
    except StopIteration:
        return
    except csv.Error as error:
        yield 1, None, f"not valid CSV ({error})"
        return
    names = [name.strip().lower() for name in header]
    if "input" not in names:
        yield (
            1,
            None,
            f'the header row must name an "input" column (columns: {", ".join(ITEM_FIELDS)})',
        )
        return
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            yield reader.line_num, None, f"not valid CSV ({error})"
            return
        if not any(cell.strip() for cell in cells):
            continue
        if len(cells) != len(names):
            yield reader.line_num, None, f"{len(cells)} cells, but the header has {len(names)}"
            continue
        yield reader.line_num, dict(zip(names, map(cell_in, cells), strict=True)), ""


def dataset_parse(*, content: bytes, format: str) -> list[ItemData]:
    """Every item of a JSONL or CSV file, checked. Raises ValidationError on ``file`` listing
    every bad line (at most MAX_REPORTED_ERRORS, then how many more), a file over
    ``CONDUCTOR_DATASET_MAX_BYTES`` or with more than ``CONDUCTOR_DATASET_MAX_ITEMS`` items."""
    if format not in FORMATS:
        raise ValidationError({"format": [f'Unknown format "{format}": jsonl or csv.']})
    limit = dataset_max_bytes()
    if len(content) > limit:
        raise ValidationError(
            {
                "file": [
                    f"Too large: {len(content):,} bytes; the limit is {limit:,} bytes "
                    "(CONDUCTOR_DATASET_MAX_BYTES)."
                ]
            }
        )
    try:
        text = content.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ValidationError({"file": [f"Not UTF-8 text (byte {error.start})."]}) from error
    if "\x00" in text:
        raise ValidationError({"file": ["The file holds a NUL character: not a text file."]})
    rows = _jsonl_rows(text) if format == "jsonl" else _csv_rows(text)
    items: list[ItemData] = []
    errors: list[LineError] = []
    max_items = dataset_max_items()
    for number, value, problem in rows:
        if not problem and not isinstance(value, dict):
            problem = f"give a JSON object, not {type(value).__name__}"
        if not problem:
            item, problem = _check_item(value)
        if problem:
            errors.append(LineError(number, problem))
            continue
        items.append(item)  # type: ignore[arg-type]
        if len(items) > max_items:
            raise ValidationError(
                {
                    "file": [
                        f"Too many items: more than {max_items:,} (CONDUCTOR_DATASET_MAX_ITEMS)."
                    ]
                }
            )
    if errors:
        listed = [str(error) for error in errors[:MAX_REPORTED_ERRORS]]
        if len(errors) > MAX_REPORTED_ERRORS:
            listed.append(f"and {len(errors) - MAX_REPORTED_ERRORS} more bad lines")
        raise ValidationError({"file": listed})
    if not items:
        raise ValidationError({"file": ["The file holds no items."]})
    return items


def _check_may_import(*, user: Any, project: Project, items: Iterable[ItemData]) -> None:
    if user is None:
        return
    if not user_can_run(user=user, project=project.pk):
        raise PermissionDenied("Only admins and reviewers of the project may add datasets.")
    if any(item.grader == "code" for item in items) and (
        user_role(user=user, project=project.pk) != Membership.Role.ADMIN
    ):
        raise PermissionDenied(
            "Only admins of the project may add items with a code grader: their references run "
            "as code."
        )


def _check_name(name: str) -> str:
    name = (name or "").strip()
    if not name:
        raise ValidationError({"name": ["Give the dataset a name."]})
    if len(name) > MAX_NAME_LENGTH:
        raise ValidationError({"name": [f"At most {MAX_NAME_LENGTH} characters."]})
    return name


def _store(
    *,
    project: Project,
    name: str,
    items: list[ItemData],
    created_by: Any,
    description: str = "",
    builtin: str = "",
    action: str,
) -> Dataset:
    try:
        with transaction.atomic():
            dataset = Dataset.objects.create(
                project=project,
                name=name,
                description=description,
                builtin=builtin,
                item_count=len(items),
                created_by=created_by if getattr(created_by, "pk", None) else None,
            )
            DatasetItem.objects.bulk_create(
                [
                    DatasetItem(
                        dataset=dataset,
                        position=position,
                        input=item.input,
                        reference=item.reference,
                        grader=item.grader,
                        tags=list(item.tags),
                    )
                    for position, item in enumerate(items)
                ],
                batch_size=1000,
            )
            audit_record(
                project=project,
                actor=created_by,
                action=action,
                target=dataset,
                after={"name": name, "items": len(items)},
            )
    except IntegrityError as error:
        raise ValidationError(
            {"name": [f'The project already has a dataset named "{name}".']}
        ) from error
    return dataset


def dataset_import(
    *,
    project: Project,
    name: str,
    content: bytes,
    format: str,
    created_by: Any = None,
    description: str = "",
) -> Dataset:
    """Store a dataset read from a JSONL or CSV file, all its items or none.

    ``created_by`` (None for the CLI) must be an admin or reviewer of ``project``, and an admin
    for items with a code grader (PermissionDenied). Raises ValidationError keyed by ``name``,
    ``format`` or ``file`` (one message per bad line) for bad input.
    """
    name = _check_name(name)
    if Dataset.objects.filter(project=project, name=name).exists():
        raise ValidationError({"name": [f'The project already has a dataset named "{name}".']})
    items = dataset_parse(content=content, format=format)
    _check_may_import(user=created_by, project=project, items=items)
    return _store(
        project=project,
        name=name,
        items=items,
        created_by=created_by,
        description=description,
        action="dataset.import",
    )


def suite_items() -> list[ItemData]:
    """The simulator's bundled suite as dataset items, tagged with their domain."""
    from orchestrator.providers.simulator import load_suite

    return [
        ItemData(
            input=task.question, reference=task.reference, grader=task.grader, tags=(task.domain,)
        )
        for task in load_suite()
    ]


def dataset_ensure_suite(*, project: Project, created_by: Any = None) -> Dataset:
    """The project's built-in dataset of the bundled suite, made on first use."""
    existing = Dataset.objects.filter(project=project, builtin=BUILTIN_SUITE).first()
    if existing is not None:
        return existing
    items = suite_items()
    if created_by is not None and not user_can_run(user=created_by, project=project.pk):
        raise PermissionDenied("Only admins and reviewers of the project may add datasets.")
    try:
        return _store(
            project=project,
            name=SUITE_DATASET_NAME,
            items=items,
            created_by=created_by,
            description="The offline simulator's bundled suite: arithmetic, countdown, code and "
            "lookup tasks with checkable answers.",
            builtin=BUILTIN_SUITE,
            action="dataset.builtin",
        )
    except ValidationError:
        # A race with another request, or a dataset of the same name imported by hand.
        existing = Dataset.objects.filter(project=project, builtin=BUILTIN_SUITE).first()
        if existing is None:
            raise
        return existing


def dataset_item_add_from_run(
    *,
    dataset: Dataset,
    run: Run,
    user: Any,
    answer_as_reference: bool = False,
    tags: Iterable[str] = (),
) -> DatasetItem:
    """Add a run's question to a dataset of the same project, with the run's reference, or,
    when ``answer_as_reference`` (the user marks the answer right), its answer as reference.

    Admins and reviewers only (PermissionDenied); a code grader's reference is copied only by an
    admin. Raises ValidationError keyed by field for a run of another project, a run with no
    answer to use, or a dataset already at ``CONDUCTOR_DATASET_MAX_ITEMS``.
    """
    if not user_can_run(user=user, project=dataset.project_id):
        raise PermissionDenied("Only admins and reviewers of the project may change datasets.")
    if run.project_id != dataset.project_id:
        raise ValidationError({"run": ["The run belongs to another project than the dataset."]})
    if answer_as_reference:
        if run.status != Run.Status.SUCCEEDED or not run.answer.strip():
            raise ValidationError({"answer_as_reference": ["The run has no answer to use."]})
        values: dict[str, Any] = {"input": run.input, "reference": run.answer, "grader": "exact"}
        values["grader"] = default_grader(run.answer)
    else:
        values = {"input": run.input, "reference": run.reference, "grader": run.grader}
    values["tags"] = list(tags)
    item_data, problem = _check_item(values)
    if item_data is None:
        field_name = problem.split(":", 1)[0]
        raise ValidationError({field_name if field_name in ITEM_FIELDS else "run": [problem]})
    _check_may_import(user=user, project=dataset.project, items=[item_data])
    with transaction.atomic():
        locked = Dataset.objects.select_for_update().get(pk=dataset.pk)
        if locked.item_count >= dataset_max_items():
            raise ValidationError(
                {
                    "dataset": [
                        f"The dataset already holds {locked.item_count:,} items, the most "
                        "allowed (CONDUCTOR_DATASET_MAX_ITEMS)."
                    ]
                }
            )
        last = locked.items.aggregate(last=Max("position"))["last"]
        item = DatasetItem.objects.create(
            dataset=locked,
            position=0 if last is None else last + 1,
            input=item_data.input,
            reference=item_data.reference,
            grader=item_data.grader,
            tags=list(item_data.tags),
            source_run=run,
        )
        locked.item_count += 1
        locked.save(update_fields=["item_count"])
        audit_record(
            project=locked.project_id,
            actor=user,
            action="dataset.add_item",
            target=locked,
            after={
                "run": run.pk,
                "position": item.position,
                "answer_as_reference": answer_as_reference,
            },
        )
    return item
