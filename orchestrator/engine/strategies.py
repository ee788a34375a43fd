"""Strategies by name: the conductor, and the fixed baselines it is compared with.

The baselines (single worker, self-reflection, Mixture-of-Agents) are ordinary workflows run by
the same scheduler, so every strategy is measured on equal terms. Their instructions use the plain
words solve / review / verify / combine, so a simulated worker can tell the roles apart, and each
asks for a final "Answer: ..." line.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from orchestrator.engine.conductor import PromptedConductor
from orchestrator.engine.prompts import ANSWER_LINE, SOLVE
from orchestrator.engine.types import (
    ALL,
    ModelClient,
    PlanRecord,
    RunSettings,
    Slots,
    StepSpec,
    Strategy,
    WorkerInfo,
    Workflow,
)

STRATEGIES: Final = ("conductor", "single", "reflection", "moa")
"""Every name build_strategy accepts."""

MAX_WORKER_INDEX: Final = 99
"""The highest worker index an option may name (``worker``, ``aggregator``, ``proposers``)."""
MAX_REFLECTION_ROUNDS: Final = 20
"""The most reviews ``reflection`` may chain after its first answer."""
MAX_PROPOSERS: Final = 20
"""The most proposers ``moa`` may list."""

REFLECT = (
    "Review the previous answer to the question and verify it: check every step for errors, "
    "fix any you find, and give an improved final answer. " + ANSWER_LINE
)
PROPOSE = "Solve the question on your own, step by step. " + ANSWER_LINE
AGGREGATE = (
    "Combine the candidate answers above into one best answer: compare them, keep what is "
    "right, discard what is wrong, and give the single best final answer. " + ANSWER_LINE
)


class FixedStrategy:
    """A Strategy that runs one fixed workflow in round 0 and then stops.

    ``build`` receives the pool's size, so defaults that depend on it (MoA's proposers) are
    resolved when the run starts. Worker indices are checked against the pool by the scheduler.
    """

    max_rounds = 1

    def __init__(self, name: str, build: Callable[[int], Workflow]) -> None:
        self.name = name
        self.build = build

    def workflow_for(self, pool_size: int) -> Workflow:
        """The workflow this strategy runs on a pool of ``pool_size`` workers."""
        return self.build(pool_size)

    async def plan(
        self,
        *,
        round: int,
        question: str,
        workers: Sequence[WorkerInfo],
        settings: RunSettings,
        previous_answer: str | None,
    ) -> PlanRecord | None:
        if round > 0:
            return None
        return PlanRecord(round=0, strategy=self.name, workflow=self.build(len(workers)))


def build_strategy(
    name: str,
    *,
    conductor: ModelClient | None = None,
    options: Mapping[str, Any] | None = None,
    conductor_slots: Slots | None = None,
) -> Strategy:
    """The Strategy called ``name``, configured by ``options``.

    - ``conductor``: the PromptedConductor over the ``conductor`` client (its calls bounded by
      ``conductor_slots``); no options.
    - ``single``: ``worker`` (default 0) answers alone.
    - ``reflection``: ``worker`` (default 0) solves, then reviews its previous answer
      ``rounds`` times (default 3, at most MAX_REFLECTION_ROUNDS), each step reading only the
      one before.
    - ``moa``: ``proposers`` (default every worker but the aggregator; at most MAX_PROPOSERS)
      answer independently, then ``aggregator`` (default 0) combines all their answers.

    A worker index is at most MAX_WORKER_INDEX (and must exist in the pool, which the caller and
    the scheduler check). Every option is checked against its bounds before anything is built.
    Raises ValueError naming an unknown strategy, an unknown option or a bad option value.
    """
    options = dict(options or {})
    if name == "conductor":
        _reject_unknown(name, options, allowed=())
        if conductor is None:
            raise ValueError('strategy "conductor" needs a conductor model client')
        return PromptedConductor(conductor, slots=conductor_slots)
    if name == "single":
        _reject_unknown(name, options, allowed=("worker",))
        worker = _index(name, options, "worker", default=0)
        workflow = Workflow((StepSpec(worker, SOLVE, ()),))
        return FixedStrategy(name, lambda pool_size: workflow)
    if name == "reflection":
        _reject_unknown(name, options, allowed=("worker", "rounds"))
        worker = _index(name, options, "worker", default=0)
        rounds = _index(
            name, options, "rounds", default=3, minimum=1, maximum=MAX_REFLECTION_ROUNDS
        )
        steps = [StepSpec(worker, SOLVE, ())]
        steps += [StepSpec(worker, REFLECT, (index,)) for index in range(rounds)]
        workflow = Workflow(tuple(steps))
        return FixedStrategy(name, lambda pool_size: workflow)
    if name == "moa":
        _reject_unknown(name, options, allowed=("proposers", "aggregator"))
        aggregator = _index(name, options, "aggregator", default=0)
        proposers = _indices(name, options, "proposers")

        def build(pool_size: int) -> Workflow:
            chosen = proposers
            if chosen is None:
                # A pool of one has no other worker: the aggregator also proposes.
                chosen = [i for i in range(pool_size) if i != aggregator] or [aggregator]
            steps = [StepSpec(worker, PROPOSE, ()) for worker in chosen]
            steps.append(StepSpec(aggregator, AGGREGATE, ALL))
            return Workflow(tuple(steps))

        return FixedStrategy(name, build)
    known = ", ".join(STRATEGIES)
    raise ValueError(f'unknown strategy "{name}" (known: {known})')


def _reject_unknown(name: str, options: Mapping[str, Any], *, allowed: tuple[str, ...]) -> None:
    unknown = sorted(str(key) for key in options if key not in allowed)
    if unknown:
        takes = ", ".join(allowed) if allowed else "no options"
        named = ", ".join(_shown(key, limit=40).strip("'") for key in unknown[:5])
        if len(unknown) > 5:
            named += f" and {len(unknown) - 5} more"
        raise ValueError(f'strategy "{name}" has no option {named} (it takes {takes})')


def check_fits(strategy: Strategy, *, pool_size: int, settings: RunSettings) -> None:
    """Raise ValueError if ``strategy`` would hold more steps than ``settings`` allow a run.

    A fixed strategy's one workflow is known in advance; the conductor's rounds are each bounded
    by ``max_steps`` when they are parsed, so it always fits.
    """
    if not isinstance(strategy, FixedStrategy):
        return
    count = len(strategy.workflow_for(pool_size).steps)
    if count > settings.max_run_steps:
        raise ValueError(
            f'strategy "{strategy.name}" would run {count} steps, but the pool allows at most '
            f"{settings.max_run_steps} in a run ({settings.max_steps} steps per round × "
            f"{settings.max_rounds} rounds)"
        )


_MAX_DIGITS = 9
"""Longer digit strings are refused before int() (which is slow on huge ones) sees them."""


def _as_int(value: object) -> int | None:
    """An int from an int or a string of ASCII digits (forms send strings); None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.isascii() and text.isdigit() and len(text) <= _MAX_DIGITS:
            return int(text)
    return None


def _shown(value: object, limit: int = 60) -> str:
    """``repr(value)``, cut short: an error message must not echo a huge option back."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _index(
    name: str,
    options: Mapping[str, Any],
    key: str,
    *,
    default: int,
    minimum: int = 0,
    maximum: int = MAX_WORKER_INDEX,
) -> int:
    value = options.get(key, default)
    number = _as_int(value)
    if number is None or not minimum <= number <= maximum:
        raise ValueError(
            f'strategy "{name}": option {key} must be an integer from {minimum} to {maximum}, '
            f"not {_shown(value)}"
        )
    return number


def _indices(name: str, options: Mapping[str, Any], key: str) -> list[int] | None:
    if key not in options or options[key] is None:
        return None
    value = options[key]
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)):
        raise ValueError(f'strategy "{name}": option {key} must be a list of worker indices')
    if len(items) > MAX_PROPOSERS:
        raise ValueError(
            f'strategy "{name}": option {key} lists {len(items)} workers, but at most '
            f"{MAX_PROPOSERS} are allowed"
        )
    numbers = [_as_int(item) for item in items]
    if not numbers or any(
        number is None or not 0 <= number <= MAX_WORKER_INDEX for number in numbers
    ):
        raise ValueError(
            f'strategy "{name}": option {key} must be a non-empty list of worker indices '
            f"from 0 to {MAX_WORKER_INDEX}, not {_shown(value)}"
        )
    return numbers  # type: ignore[return-value]
