"""``manage.py conduct "QUESTION"``: run one question in this process and watch it step by step."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, OutputWrapper

from orchestrator import wire
from orchestrator.engine.strategies import STRATEGIES
from orchestrator.engine.types import PlanRecord, RunResult, StepRecord
from orchestrator.models import Pool, Run, Step
from orchestrator.providers.simulator import DEMO_POOL_NAME
from orchestrator.services.runs import run_cancel, run_create, run_execute_async

LINE = 100


def one_line(text: str, limit: int = LINE) -> str:
    """The first non-empty line of ``text``, cut to ``limit`` characters."""
    for line in text.splitlines():
        line = " ".join(line.split())
        if line:
            return line if len(line) <= limit else line[: limit - 3] + "..."
    return ""


def parse_option(text: str) -> tuple[str, Any]:
    """``key=value``; the value is read as JSON when it is JSON (numbers, lists), else as text."""
    key, separator, raw = text.partition("=")
    if not separator or not key.strip():
        raise CommandError(f"--option takes key=value, not {text!r}")
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):  # deep nesting: the strategy refuses it as text
        value = raw
    return key.strip(), value


class StepPrinter:
    """A RunObserver that prints each step as it starts and finishes."""

    def __init__(self, out: OutputWrapper, style: Any) -> None:
        self.out = out
        self.style = style

    async def planning(self, round: int) -> None:
        self.out.write(self.style.HTTP_INFO(f"Planning round {round}..."))

    async def plan_created(self, plan: PlanRecord, steps: Sequence[StepRecord]) -> None:
        problems = sum(1 for attempt in plan.attempts if attempt.error)
        note = f" after {problems} unusable plan(s)" if problems else ""
        self.out.write(f"Round {plan.round}: {len(steps)} step(s) ({plan.strategy}){note}")

    async def step_started(self, step: StepRecord) -> None:
        self.out.write(
            f"  {step.round}.{step.index} {step.worker_name} started: "
            + one_line(step.spec.instruction)
        )

    async def step_finished(self, step: StepRecord) -> None:
        self.out.write(
            self.style.SUCCESS(f"  {step.round}.{step.index} {step.worker_name} finished")
            + f" ({step.tokens_in}+{step.tokens_out} tokens, {step.latency:.2f}s): "
            + one_line(step.response)
        )

    async def step_failed(self, step: StepRecord) -> None:
        self.out.write(
            self.style.ERROR(f"  {step.round}.{step.index} {step.worker_name} failed")
            + f" after {step.attempts} attempt(s): {one_line(step.error)}"
        )

    async def run_finished(self, result: RunResult) -> None:
        pass


class Command(BaseCommand):
    help = (
        "Answer one question with a strategy over a pool, printing each step, the answer and "
        "the totals."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("question", help="The question to answer.")
        parser.add_argument(
            "--pool", help=f'Pool name (default: "{DEMO_POOL_NAME}", or the only pool).'
        )
        parser.add_argument("--strategy", default="conductor", choices=STRATEGIES)
        parser.add_argument(
            "--option",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help=(
                "A strategy option: --option worker=2 (0-99), --option rounds=5 (reflection, "
                "1-20), --option proposers=[0,1] (moa, at most 20); repeatable."
            ),
        )
        parser.add_argument(
            "--reference", default="", help="The expected answer; the run is scored against it."
        )
        parser.add_argument(
            "--grader",
            default="",
            help="exact, numeric, choice, countdown or code (default: from the reference).",
        )
        parser.add_argument(
            "--json", action="store_true", help="Print one JSON object instead of the step log."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        pool = self._pool(options["pool"])
        strategy_options = dict(parse_option(text) for text in options["option"])
        try:
            run = run_create(
                pool=pool,
                input=options["question"],
                strategy=options["strategy"],
                strategy_options=strategy_options,
                reference=options["reference"],
                grader=options["grader"],
                enqueue=False,
            )
        except ValidationError as error:
            problems = "; ".join(
                f"{field}: {' '.join(messages)}" for field, messages in error.message_dict.items()
            )
            raise CommandError(problems) from error
        as_json = options["json"]
        if not as_json:
            self.stdout.write(f'Run {run.pk} on "{pool.name}" with strategy {run.strategy}')
        printer = None if as_json else StepPrinter(self.stdout, self.style)
        try:
            async_to_sync(run_execute_async)(run_id=run.pk, observer=printer)
        except KeyboardInterrupt:
            run_cancel(run_id=run.pk)
            raise CommandError(f"Run {run.pk} cancelled.") from None
        run.refresh_from_db()
        if as_json:
            self.stdout.write(json.dumps(self._summary(run), ensure_ascii=False))
        else:
            self._print_result(run)
        if run.status != Run.Status.SUCCEEDED:
            raise CommandError(ended_text(run), returncode=1)

    def _pool(self, name: str | None) -> Pool:
        pools = Pool.objects.all()
        if name:
            matches = list(pools.filter(name=name)[:2])
        else:
            matches = list(pools.filter(name=DEMO_POOL_NAME)[:2]) or list(pools[:2])
            if len(matches) > 1:
                raise CommandError("There are several pools: choose one with --pool NAME.")
        if not matches:
            if name:
                raise CommandError(f'No pool is called "{name}".')
            raise CommandError(
                "There is no pool yet: `python manage.py seed_demo` creates the demo pool."
            )
        if len(matches) > 1:
            raise CommandError(f'Several projects have a pool called "{name}".')
        return matches[0]

    def _url(self, run: Run) -> str:
        return f"{settings.CONDUCTOR_BASE_URL.rstrip('/')}/runs/{run.pk}/"

    def _print_result(self, run: Run) -> None:
        style = self.style.SUCCESS if run.status == Run.Status.SUCCEEDED else self.style.ERROR
        self.stdout.write(style(f"Run {run.pk} {run.status}."))
        if run.error:
            self.stdout.write(f"Error: {run.error}")
        if run.answer:
            self.stdout.write("Answer:")
            self.stdout.write(run.answer)
        if run.score is not None:
            self.stdout.write(
                f"Score: {run.score:g} (reference {run.reference!r}, grader {run.grader})"
            )
        wall = f"{run.wall_time:.2f}s" if run.wall_time is not None else "-"
        self.stdout.write(
            f"Totals: {run.step_count} steps, {run.model_calls} model calls, "
            f"{run.tokens_in} tokens in, {run.tokens_out} out, ${run.cost:.6f}, {wall}"
        )
        self.stdout.write(f"See it at {self._url(run)}")

    def _summary(self, run: Run) -> wire.CommandRun:
        steps = Step.objects.filter(run=run).order_by("round", "index")
        return wire.command_run_data(run, url=self._url(run), steps=steps)


def ended_text(run: Run) -> str:
    """The last line of a run that did not succeed: its status, and its error if it has one."""
    if run.error:
        return f"Run {run.pk} {run.status}: {run.error}"
    if run.status == Run.Status.CANCELLED:
        return f"Run {run.pk} cancelled before it finished."
    return f"Run {run.pk} {run.status}."
