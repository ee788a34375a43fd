from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from orchestrator.engine.grading import extract_answer, grade
from orchestrator.providers.simulator import DOMAINS, load_suite, task_for_question
from orchestrator.providers.simulator import suite as suite_module
from orchestrator.providers.simulator.solving import mistake, solve


def test_the_suite_has_at_least_200_tasks_in_four_domains():
    tasks = load_suite()
    counts = Counter(task.domain for task in tasks)
    assert len(tasks) >= 200
    assert set(counts) == set(DOMAINS)
    assert min(counts.values()) >= 40


def test_ids_and_questions_are_unique():
    tasks = load_suite()
    assert len({task.id for task in tasks}) == len(tasks)
    assert len({task.question for task in tasks}) == len(tasks)


def test_every_grader_kind_is_exercised():
    assert {task.grader for task in load_suite()} == {
        "exact",
        "numeric",
        "choice",
        "countdown",
        "code",
    }


def test_the_suite_is_the_same_every_time_it_is_built():
    rebuilt = suite_module.load_suite.__wrapped__()
    assert rebuilt == load_suite()
    assert load_suite() is load_suite()


def test_task_for_question_finds_a_task_by_its_exact_question():
    task = load_suite()[42]
    assert task_for_question(task.question) is task
    assert task_for_question(f"\n {task.question}\n") is task
    assert task_for_question(task.question + " Please.") is None
    assert task_for_question("What is the meaning of life?") is None


def _as_written(task, answer: str) -> str:
    """An answer inside a reply, the way a worker writes it."""
    return f"```python\n{answer}\n```" if task.grader == "code" else f"Work...\nAnswer: {answer}"


def _score(task, answer: str) -> float:
    return grade(
        extract_answer(_as_written(task, answer), kind=task.grader), task.reference, task.grader
    )


def _grades(task):
    return (
        task.id,
        _score(task, task.solution),
        _score(task, solve(task).answer),
        _score(task, mistake(task, 0.5).answer),
    )


def test_every_reference_answer_grades_right_and_every_mistake_grades_wrong(code_sandbox):
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(_grades, load_suite()))
    assert [r[0] for r in results if r[1] != 1.0] == [], "reference solutions that fail"
    assert [r[0] for r in results if r[2] != 1.0] == [], "simulated solutions that fail"
    assert [r[0] for r in results if r[3] != 0.0] == [], "simulated mistakes that pass"


def test_countdown_solutions_are_searched_not_copied():
    countdown = [task for task in load_suite() if task.domain == "countdown"]
    assert sum(solve(task).answer != task.solution for task in countdown) >= len(countdown) // 4
