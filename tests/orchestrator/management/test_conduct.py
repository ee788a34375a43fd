"""``manage.py conduct``: prints each step and the answer, or one JSON object; fails loudly."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from orchestrator import wire
from orchestrator.models import Run, Step

QUESTION = (
    "A baker bakes 5 trays of 16 cookies each and sells 30 cookies. How many cookies are left?"
)


def conduct(*args: str) -> str:
    out = StringIO()
    call_command("conduct", *args, stdout=out)
    return out.getvalue()


@pytest.mark.usefixtures("sim_pool")
def test_prints_each_step_then_the_answer_totals_and_url(settings):
    settings.CONDUCTOR_BASE_URL = "http://studio.example:8000"
    output = conduct(QUESTION, "--strategy", "moa", "--reference", "50")

    run = Run.objects.get()
    assert run.status == Run.Status.SUCCEEDED
    for step in Step.objects.filter(run=run):
        label = f"{step.round}.{step.index} {step.worker_name}"
        assert f"{label} started: " in output
        assert f"{label} finished ({step.tokens_in}+{step.tokens_out} tokens" in output
    assert output.index("started") < output.index("finished") < output.index("\nAnswer:\n")
    assert run.answer.splitlines()[-1] in output
    assert f"Score: {run.score:g}" in output
    assert f"{run.step_count} steps, {run.model_calls} model calls" in output
    assert f"See it at http://studio.example:8000/runs/{run.pk}/" in output


@pytest.mark.usefixtures("sim_pool")
def test_json_prints_one_object():
    output = conduct(QUESTION, "--strategy", "single", "--option", "worker=1", "--json")

    summary = json.loads(output)
    run = Run.objects.get()
    assert summary["id"] == run.pk and summary["status"] == "succeeded"
    assert summary["answer"] == run.answer
    assert [step["worker"] for step in summary["steps"]] == [run.pool.workers.get(position=1).name]
    assert summary["totals"]["model_calls"] == 1
    assert wire.check(summary, wire.CommandRun) == []


def test_a_failed_run_exits_non_zero(sim_pool):
    sim_pool.token_budget = 1  # the conductor's first call exhausts it
    sim_pool.save(update_fields=["token_budget"])
    out = StringIO()
    with pytest.raises(CommandError) as excinfo:
        call_command("conduct", QUESTION, "--json", stdout=out)

    assert excinfo.value.returncode == 1
    assert json.loads(out.getvalue())["status"] == "failed"
    assert Run.objects.get().status == Run.Status.FAILED


def test_a_run_cancelled_elsewhere_says_so_with_its_wall_time(sim_pool, monkeypatch):
    """Cancelled from the run page while the shell runs it: the last line says it was cancelled
    (not "cancelled: " and nothing), and the totals end with the time it ran."""
    from asgiref.sync import sync_to_async

    from orchestrator.management.commands.conduct import StepPrinter
    from orchestrator.services.runs import run_cancel

    started = StepPrinter.step_started

    async def cancelled_on_first_step(printer, step):
        await started(printer, step)
        run_id = await Run.objects.values_list("pk", flat=True).aget()
        await sync_to_async(run_cancel)(run_id=run_id)

    monkeypatch.setattr(StepPrinter, "step_started", cancelled_on_first_step)
    out = StringIO()
    with pytest.raises(CommandError) as excinfo:
        call_command("conduct", QUESTION, "--strategy", "reflection", stdout=out)

    run = Run.objects.get()
    assert run.status == Run.Status.CANCELLED and run.wall_time is not None
    assert str(excinfo.value) == f"Run {run.pk} cancelled before it finished."
    totals = next(line for line in out.getvalue().splitlines() if line.startswith("Totals:"))
    assert totals.endswith(f", {run.wall_time:.2f}s")


@pytest.mark.usefixtures("sim_pool")
def test_bad_options_and_pools_are_explained():
    with pytest.raises(CommandError, match="strategy_options"):
        conduct(QUESTION, "--strategy", "single", "--option", "temperature=2")
    with pytest.raises(CommandError, match='No pool is called "Nope"'):
        conduct(QUESTION, "--pool", "Nope")
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_without_any_pool_it_points_at_seed_demo():
    with pytest.raises(CommandError, match="seed_demo"):
        conduct(QUESTION)


@pytest.mark.usefixtures("sim_pool")
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--strategy", "reflection", "--option", "rounds=1000000000"], "from 1 to 20"),
        (["--strategy", "moa", "--option", f"proposers={[0, 1, 2, 3, 4] * 1000}"], "at most 20"),
        (["--strategy", "reflection", "--option", "rounds=12"], "the pool allows at most 10"),
        (["--strategy", "single", "--option", "worker=" + "[" * 5000], "worker must be"),
    ],
)
def test_options_past_their_bounds_are_refused_before_anything_runs(args, message):
    with pytest.raises(CommandError, match=message) as excinfo:
        conduct(QUESTION, *args)
    assert str(excinfo.value).startswith("strategy_options: ")
    assert not Run.objects.exists()


@pytest.mark.usefixtures("sim_pool")
def test_a_question_over_the_size_limit_is_refused_naming_it(settings):
    settings.CONDUCTOR_MAX_TEXT_BYTES = 1024
    with pytest.raises(CommandError, match=r"input: Too long: 2,000 bytes .* limit is 1,024 bytes"):
        conduct("x" * 2000)
    assert not Run.objects.exists()
