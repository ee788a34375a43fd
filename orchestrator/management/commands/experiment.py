"""``manage.py experiment run --dataset NAME --arms conductor,single:0,reflection,moa``: run an
experiment in this process with a progress bar, then print its scoreboard. ``experiment show
ID`` prints the scoreboard of a stored one.

``--dataset suite`` is the pool's project's built-in dataset of the bundled suite (made on first
use). ``--json`` ends with one JSON line: the scoreboard, the experiment id and the seconds it
took.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from orchestrator.models import Dataset, Experiment, Pool
from orchestrator.providers.simulator import DEMO_POOL_NAME
from orchestrator.scoreboard import experiment_scoreboard, format_scoreboard
from orchestrator.services.datasets import dataset_ensure_suite
from orchestrator.services.experiments import experiment_create, experiment_execute, parse_arms

BAR = 30


class ProgressBar:
    """``[#####.....] 120/940`` on one line of a terminal; on anything else a line every tenth."""

    def __init__(self, stream: Any, total: int) -> None:
        self.stream = stream
        self.total = total
        self.tty = hasattr(stream, "isatty") and stream.isatty()
        self.shown = -1

    def __call__(self, done: int, total: int) -> None:
        filled = BAR * done // max(1, total)
        text = f"[{'#' * filled}{'.' * (BAR - filled)}] {done}/{total}"
        if self.tty:
            self.stream.write(f"\r{text}")
            if done >= total:
                self.stream.write("\n")
        elif (tenth := 10 * done // max(1, total)) != self.shown:
            self.shown = tenth
            self.stream.write(text + "\n")
        self.stream.flush()


class Command(BaseCommand):
    help = "Run an experiment (dataset × arms) here with a progress bar, or show one."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        run = actions.add_parser("run", help="Run an experiment in this process.")
        run.add_argument("--dataset", required=True, help='A dataset name, or "suite".')
        run.add_argument(
            "--arms",
            default="conductor,single:0,reflection,moa",
            help="Comma-separated strategy[:worker] (the worker of single and reflection, the "
            "aggregator of moa).",
        )
        run.add_argument("--pool", help=f'Pool name (default: "{DEMO_POOL_NAME}").')
        run.add_argument("--sample", type=int, help="A random sample of this many items.")
        run.add_argument("--seed", type=int, default=0)
        run.add_argument("--tags", default="", help="Only items with one of these tags (a,b).")
        run.add_argument(
            "--concurrency",
            type=int,
            default=settings.CONDUCTOR_EXPERIMENT_CONCURRENCY,
            help="Runs at a time.",
        )
        run.add_argument("--json", action="store_true", help="End with one JSON line.")
        show = actions.add_parser("show", help="Print a stored experiment's scoreboard.")
        show.add_argument("experiment", type=int)

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "show":
            experiment = Experiment.objects.filter(pk=options["experiment"]).first()
            if experiment is None:
                raise CommandError(f"No experiment {options['experiment']}.")
            self.stdout.write(
                f"{experiment} ({experiment.status}, {experiment.done}/{experiment.total})"
            )
            self.stdout.write(format_scoreboard(experiment_scoreboard(experiment=experiment)))
            return
        pool = self._pool(options["pool"])
        dataset = self._dataset(options["dataset"], pool)
        tags = [tag.strip() for tag in options["tags"].split(",") if tag.strip()]
        try:
            experiment = experiment_create(
                dataset=dataset,
                arms=parse_arms(options["arms"], pool=pool),
                sample=options["sample"],
                seed=options["seed"],
                tags=tags,
                enqueue=False,
            )
        except ValidationError as error:
            problems = "; ".join(f"{k}: {' '.join(v)}" for k, v in error.message_dict.items())
            raise CommandError(problems) from error
        self.stderr.write(
            f"Experiment {experiment.pk}: {experiment.total} runs "
            f"({experiment.total // experiment.arms.count()} items × {experiment.arms.count()} arms)"
        )
        started = time.perf_counter()
        experiment_execute(
            experiment_id=experiment.pk,
            concurrency=options["concurrency"],
            on_progress=ProgressBar(sys.stderr, experiment.total),
        )
        seconds = time.perf_counter() - started
        experiment.refresh_from_db()
        board = experiment_scoreboard(experiment=experiment)
        self.stdout.write(format_scoreboard(board))
        self.stdout.write(
            f"{experiment.status}: {experiment.done}/{experiment.total} runs in {seconds:.1f}s"
        )
        if options["json"]:
            self.stdout.write(
                json.dumps(
                    {"experiment": experiment.pk, "seconds": round(seconds, 2), "scoreboard": board}
                )
            )

    def _pool(self, name: str | None) -> Pool:
        pools = Pool.objects.all()
        matches = list(pools.filter(name=name or DEMO_POOL_NAME)[:2])
        if not matches and not name:
            matches = list(pools[:2])
        if not matches:
            raise CommandError(
                f'No pool is called "{name}".' if name else "There is no pool yet: run seed_demo."
            )
        if len(matches) > 1:
            raise CommandError("Several pools match: choose one with --pool NAME.")
        return matches[0]

    def _dataset(self, name: str, pool: Pool) -> Dataset:
        if name == "suite":
            return dataset_ensure_suite(project=pool.project)
        dataset = Dataset.objects.filter(project_id=pool.project_id, name=name).first()
        if dataset is None:
            raise CommandError(f'The pool\'s project has no dataset "{name}".')
        return dataset
