"""``manage.py export_trajectories``: the conductor's decisions as JSON Lines for training."""

from __future__ import annotations

import sys
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from orchestrator.models import Run
from orchestrator.trajectories import trajectory_lines


class Command(BaseCommand):
    help = (
        "Write one JSON line per conductor decision (TRL prompt/completion columns, parsed "
        "workflow or parse error, answer, reference, score, reward) to stdout or --output."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--output", "-o", help="A file to write (default: stdout).")
        parser.add_argument("--project", help="A project's slug.")
        parser.add_argument("--pool", type=int, help="A pool's id.")
        parser.add_argument("--status", choices=[str(s) for s in Run.Status])
        parser.add_argument(
            "--partial-credit",
            type=float,
            default=settings.CONDUCTOR_EXPORT_PARTIAL_CREDIT,
            help="Reward of a parsed workflow whose answer scored 0.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not 0.0 <= options["partial_credit"] <= 1.0:
            raise CommandError("--partial-credit must be between 0 and 1.")
        runs = Run.objects.all()
        if options["project"]:
            runs = runs.filter(project__slug=options["project"])
        if options["pool"]:
            runs = runs.filter(pool_id=options["pool"])
        if options["status"]:
            runs = runs.filter(status=options["status"])
        out = open(options["output"], "w", encoding="utf-8") if options["output"] else sys.stdout
        count = 0
        try:
            for line in trajectory_lines(runs=runs, partial_credit=options["partial_credit"]):
                out.write(line)
                count += 1
        finally:
            if out is not sys.stdout:
                out.close()
        self.stderr.write(f"Wrote {count} decisions.")
