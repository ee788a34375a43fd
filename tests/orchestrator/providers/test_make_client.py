import subprocess
import sys

from orchestrator.engine.grading import extract_answer, grade
from orchestrator.engine.scheduler import execute_run
from orchestrator.engine.strategies import build_strategy
from orchestrator.engine.types import RunSettings
from orchestrator.providers import make_client, worker_info
from orchestrator.providers.litellm_client import LiteLLMClient
from orchestrator.providers.simulator import (
    DEMO_POOL_NAME,
    SimulatedConductor,
    SimulatedWorker,
    demo_pool,
    load_suite,
)


def test_sim_models_get_the_simulator_and_others_get_litellm():
    worker = make_client("sim/forge", params={"latency": 0.5, "seed": 3}, price_in=1, price_out=4)
    assert isinstance(worker, SimulatedWorker)
    assert (worker.latency, worker.seed, worker.price_in, worker.price_out) == (0.5, 3, 1, 4)
    assert worker.skill("code") > worker.skill("countdown")
    assert isinstance(make_client("sim/conductor"), SimulatedConductor)
    remote = make_client(
        "openai/gpt-5", api_base="http://h/v1", api_key_env="MY_KEY", params={"temperature": 0}
    )
    assert isinstance(remote, LiteLLMClient)
    assert (remote.model, remote.api_base, remote.api_key_env) == (
        "openai/gpt-5",
        "http://h/v1",
        "MY_KEY",
    )


def test_skills_can_be_overridden_and_unknown_profiles_are_average():
    custom = make_client("sim/custom", params={"skills": {"lookup": 0.99}})
    assert custom.skill("lookup") == 0.99
    assert custom.skill("code") == 0.6


def test_importing_providers_does_not_import_litellm():
    code = "import sys, orchestrator.providers, orchestrator.providers.simulator; print('litellm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_demo_pool_is_labelled_simulated_and_varied():
    pool = demo_pool()
    assert pool.name == DEMO_POOL_NAME == "Offline demo (simulated)"
    assert pool.conductor_model == "sim/conductor"
    assert 4 <= len(pool.workers) <= 5
    assert len({w.model for w in pool.workers}) == len(pool.workers)
    assert len({w.name for w in pool.workers}) == len(pool.workers)
    assert all(
        "simulated" in w.name.lower() and w.description.startswith("Simulated worker.")
        for w in pool.workers
    )
    latencies = [w.params["latency"] for w in pool.workers]
    assert all(0.3 <= latency <= 2.0 for latency in latencies) and len(set(latencies)) > 1
    assert len({(w.price_in, w.price_out) for w in pool.workers}) == len(pool.workers)
    assert all(w.params["latency"] == 0 for w in demo_pool(latency=0).workers)


async def test_the_demo_pool_answers_suite_questions_end_to_end_through_the_conductor(code_sandbox):
    pool = demo_pool(latency=0)
    workers = [worker_info(w) for w in pool.workers]
    conductor = make_client(pool.conductor_model, params=pool.conductor_params)
    strategy = build_strategy("conductor", conductor=conductor)
    tasks = load_suite()[::12]
    correct = 0
    for task in tasks:
        result = await execute_run(
            question=task.question, strategy=strategy, workers=workers, settings=RunSettings()
        )
        assert result.status == "succeeded", (task.id, result.error)
        assert result.answer.startswith("[simulated sim/")
        assert result.totals.tokens_in > 0 and result.totals.cost > 0
        correct += grade(
            extract_answer(result.answer, kind=task.grader), task.reference, task.grader
        )
    assert correct / len(tasks) >= 0.75
