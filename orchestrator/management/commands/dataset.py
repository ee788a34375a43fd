"""``manage.py dataset import FILE --name NAME``, ``dataset export ID``, ``dataset suite``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from orchestrator.models import Dataset, Project
from orchestrator.scoreboard import dataset_export_lines
from orchestrator.services.datasets import (
    FORMATS,
    dataset_ensure_suite,
    dataset_import,
    dataset_max_bytes,
    format_for_filename,
)


def project_named(slug: str | None) -> Project:
    """The project with this slug, or the only project when none is named."""
    projects = Project.objects.all()
    matches = list(projects.filter(slug=slug)[:2]) if slug else list(projects[:2])
    if not matches:
        raise CommandError(f'No project "{slug}".' if slug else "There is no project yet.")
    if len(matches) > 1:
        raise CommandError("There are several projects: choose one with --project SLUG.")
    return matches[0]


class Command(BaseCommand):
    help = "Import a dataset from a JSONL or CSV file, export one, or add the bundled suite."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        imports = actions.add_parser("import", help="Import FILE (all lines or none).")
        imports.add_argument("file")
        imports.add_argument("--name", help="Dataset name (default: the file's name).")
        imports.add_argument("--project", help="Project slug (default: the only project).")
        imports.add_argument("--format", choices=FORMATS, help="Default: from the file's name.")
        exports = actions.add_parser("export", help="Write a dataset to stdout.")
        exports.add_argument("dataset", type=int, help="Dataset id.")
        exports.add_argument("--format", choices=FORMATS, default="jsonl")
        suite = actions.add_parser("suite", help="Add the bundled suite to a project.")
        suite.add_argument("--project", help="Project slug (default: the only project).")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "import":
            self._import(options)
        elif action == "export":
            dataset = Dataset.objects.filter(pk=options["dataset"]).first()
            if dataset is None:
                raise CommandError(f"No dataset {options['dataset']}.")
            items = dataset.items.order_by("position").iterator(chunk_size=1000)
            for chunk in dataset_export_lines(items=items, format=options["format"]):
                sys.stdout.write(chunk)
        else:
            dataset = dataset_ensure_suite(project=project_named(options["project"]))
            self.stdout.write(f"Dataset {dataset.pk}: {dataset.name} ({dataset.item_count} items)")

    def _import(self, options: dict[str, Any]) -> None:
        path = Path(options["file"])
        if not path.is_file():
            raise CommandError(f"No file {path}.")
        size = path.stat().st_size
        if size > dataset_max_bytes():
            raise CommandError(
                f"{path} is too large: {size:,} bytes; the limit is {dataset_max_bytes():,} "
                "bytes (CONDUCTOR_DATASET_MAX_BYTES)."
            )
        format = options["format"] or format_for_filename(path.name)
        if format is None:
            raise CommandError("Say --format jsonl or csv (the file's name does not).")
        try:
            dataset = dataset_import(
                project=project_named(options["project"]),
                name=options["name"] or path.stem,
                content=path.read_bytes(),
                format=format,
            )
        except ValidationError as error:
            for field, messages in error.message_dict.items():
                for message in messages:
                    self.stderr.write(f"{field}: {message}")
            raise CommandError("Nothing was imported.") from error
        self.stdout.write(
            self.style.SUCCESS(f"Dataset {dataset.pk}: {dataset.name} ({dataset.item_count} items)")
        )
