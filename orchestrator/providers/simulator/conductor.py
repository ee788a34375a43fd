"""The simulated conductor: a ModelClient (``sim/conductor``) that writes three-list workflows.

It reads the conductor prompt (workers and their descriptions, the question, the previous answer,
the limits), recognises the task's domain, and writes brief reasoning followed by a workflow in
the canonical format. The shape follows the task: one step for a lookup, solve then verify for
arithmetic, best-of-two then combine for countdown, plan / implement / review for code. In a later
round it accepts the previous answer unless a cheap check it can do itself fails.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from orchestrator.engine.grading import (
    ExpressionError,
    evaluate_expression,
    extract_answer,
    last_code_block,
)
from orchestrator.engine.plan import format_workflow, format_workflow_json
from orchestrator.engine.types import ALL, Access, Completion, Message, StepSpec, Workflow
from orchestrator.providers.simulator.reading import (
    ConductorPrompt,
    PoolEntry,
    read_conductor_prompt,
)
from orchestrator.providers.simulator.solving import countdown_puzzle
from orchestrator.providers.simulator.suite import DOMAINS, task_for_question
from orchestrator.providers.simulator.worker import AVERAGE_SKILL, simulated_call

ANSWER_LINE = 'End with a final line "Answer: ...".'
CODE_BLOCK = "Reply with the final code in one fenced python block."

_SKILL = re.compile(
    rf"\b({'|'.join(DOMAINS)})\s*[:=]?\s*(0(?:\.\d+)?|1(?:\.0+)?|\.\d+)\b", re.IGNORECASE
)
_FUNCTION = re.compile(r"`(\w+)\(")


@dataclass(frozen=True, slots=True)
class PoolView:
    """The pool as the conductor understands it from the descriptions."""

    index: int
    skills: dict[str, float]
    cost_rank: int

    def skill(self, domain: str) -> float:
        return self.skills.get(domain, AVERAGE_SKILL)


def read_pool(workers: Sequence[PoolEntry]) -> list[PoolView]:
    """Skills and cost from each description; unreadable descriptions count as average."""
    views = []
    for entry in workers:
        skills = {name.lower(): float(value) for name, value in _SKILL.findall(entry.description)}
        text = entry.description.lower()
        cost_rank = 0 if "cheap" in text else 2 if "expensive" in text else 1
        views.append(PoolView(entry.index, skills, cost_rank))
    return views


def guess_domain(question: str) -> str:
    """The domain of a question outside the suite, from its wording."""
    if countdown_puzzle(question):
        return "countdown"
    if re.search(r"\b(def|function|python|code|implement)\b", question, re.IGNORECASE):
        return "code"
    if re.search(r"\d", question):
        return "arithmetic"
    return "lookup"


def _ranked(pool: list[PoolView], domain: str) -> list[PoolView]:
    return sorted(pool, key=lambda view: (-view.skill(domain), view.cost_rank, view.index))


def _second(ranked: list[PoolView]) -> PoolView:
    return ranked[1] if len(ranked) > 1 else ranked[0]


def _cheapest_good(pool: list[PoolView], domain: str) -> PoolView:
    best = _ranked(pool, domain)[0].skill(domain)
    good = [view for view in pool if view.skill(domain) >= best - 0.1]
    return min(good, key=lambda view: (view.cost_rank, -view.skill(domain), view.index))


def self_check(domain: str, question: str, answer: str) -> str:
    """What is visibly wrong with a previous answer ("" if nothing the conductor can check)."""
    if domain == "code":
        code = last_code_block(answer)
        if not code:
            return "has no fenced code block"
        try:
            tree = ast.parse(code)
        except SyntaxError:
            return "is not valid Python"
        wanted = _FUNCTION.search(question)
        defined = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
        if wanted and wanted.group(1) not in defined:
            return f"does not define {wanted.group(1)}"
        return ""
    if not re.search(r"^[\s>*_#-]*answer[\s*_]*:", answer, re.IGNORECASE | re.MULTILINE):
        return 'has no final "Answer:" line'
    if domain == "countdown":
        puzzle = countdown_puzzle(question)
        if puzzle is None:
            return ""
        numbers, target = puzzle
        expression = extract_answer(answer).split("=")[0]
        try:
            value, used = evaluate_expression(expression, countdown_rules=True)
        except ExpressionError:
            return "is not an arithmetic expression"
        if sorted(used) != sorted(numbers):
            return "does not use each given number exactly once"
        if value != target:
            return f"evaluates to {value}, not {target}"
    return ""


@dataclass(slots=True)
class SimulatedConductor:
    """A ``ModelClient`` for ``sim/conductor``: deterministic, clearly labelled as simulated."""

    model: str = "sim/conductor"
    latency: float = 0.0
    seed: int = 0
    price_in: float = 0.0
    price_out: float = 0.0

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        timeout: float,
        schema: Mapping[str, Any] | None = None,
    ) -> Completion:
        """With a ``schema`` (the plan's, in "json" output) the workflow alone, as JSON."""
        if schema is None:
            return await simulated_call(self, messages, timeout=timeout)
        as_json = _AsJson(self, self.model, self.latency, self.seed, self.price_in, self.price_out)
        completion = await simulated_call(as_json, messages, timeout=timeout)
        return replace(completion, constrained="simulated")

    def respond(self, messages: Sequence[Message], *, as_json: bool = False) -> str:
        """Reasoning followed by the three lists (pure and deterministic); ``as_json``: the
        workflow alone, in JSON."""
        prompt = read_conductor_prompt(messages)
        label = f"[simulated {self.model}]"
        if prompt is None or not prompt.workers:
            return (
                f"{label} This is the offline simulated conductor. It needs the conductor prompt "
                '(a "## Workers" list and a "## Question") to write a workflow; none was found.'
            )
        task = task_for_question(prompt.question)
        domain = task.domain if task else guess_domain(prompt.question)
        known = "a suite task" if task else "not a suite task; treated by its wording"
        reasoning = [f"{label} The question is {domain} ({known})."]
        if prompt.previous_answer is not None:
            problem = self_check(domain, prompt.question, prompt.previous_answer) if task else ""
            if not problem:
                reasoning.append(
                    "The previous answer passes the checks I can do, so I accept it."
                    if task
                    else "I have no check for a question outside the suite, so I accept the answer."
                )
                if as_json:
                    return format_workflow_json(Workflow(()))
                return "\n".join(reasoning) + "\n\n" + format_workflow(Workflow(()))
            reasoning.append(f"The previous answer {problem}, so I ask for a repair.")
            note = f"The previous answer {problem}. "
        else:
            note = ""
        pool = read_pool(prompt.workers)
        steps, why = self._shape(domain, pool, prompt, note)
        reasoning.append(why)
        workflow = Workflow(tuple(steps))
        if as_json:
            return format_workflow_json(workflow)
        return "\n".join(reasoning) + "\n\n" + format_workflow(workflow)

    def _shape(
        self, domain: str, pool: list[PoolView], prompt: ConductorPrompt, note: str
    ) -> tuple[list[StepSpec], str]:
        ranked = _ranked(pool, domain)
        best, second = ranked[0].index, _second(ranked).index
        limit = max(1, prompt.max_steps)
        only_previous: Access = ALL if prompt.binary_access else (1,)

        if domain == "lookup" and not note:
            worker = _cheapest_good(pool, domain).index
            return [
                StepSpec(worker, f"Answer the question directly and briefly. {ANSWER_LINE}", ())
            ], f"An easy lookup: one step, Model {worker} (good at lookups and cheap)."

        if domain == "countdown" and limit >= 3:
            combine = (
                "Combine the candidate expressions above: check each against the given numbers "
                f"and the target and give one that is correct. {ANSWER_LINE}"
            )
            return (
                [
                    StepSpec(
                        best, f"{note}Find an expression that reaches the target. {ANSWER_LINE}", ()
                    ),
                    StepSpec(
                        second,
                        f"{note}Find an expression that reaches the target, on your own. {ANSWER_LINE}",
                        (),
                    ),
                    StepSpec(best, combine, ALL),
                ],
                f"A search puzzle: best of two independent attempts (Models {best}, {second}), then Model {best} combines.",
            )

        if domain == "code" and limit >= 3:
            return [
                StepSpec(
                    best,
                    f"{note}Outline the approach for this function: the key idea and the edge "
                    "cases. No code yet.",
                    (),
                ),
                StepSpec(
                    second, f"Implement the function following the plan above. {CODE_BLOCK}", ALL
                ),
                StepSpec(
                    best,
                    f"Review the implementation above against the task and its edge cases and fix "
                    f"any bug. {CODE_BLOCK}",
                    only_previous,
                ),
            ], f"A code task: Model {best} plans, Model {second} implements, Model {best} reviews."

        if limit >= 2:
            finish = CODE_BLOCK if domain == "code" else ANSWER_LINE
            verifier = second if domain != "code" else best
            solver = best if domain != "code" else second
            return [
                StepSpec(solver, f"{note}Solve the question step by step. {finish}", ()),
                StepSpec(
                    verifier,
                    f"Verify the solution above: redo each step, correct any mistake. {finish}",
                    ALL,
                ),
            ], f"Solve then verify: Model {solver} solves, Model {verifier} checks."

        finish = CODE_BLOCK if domain == "code" else ANSWER_LINE
        return [StepSpec(best, f"{note}Solve the question step by step. {finish}", ())], (
            f"Only one step allowed: Model {best}, the strongest for {domain}."
        )


@dataclass(slots=True)
class _AsJson:
    """The simulated conductor as a model whose output is held to the plan's schema."""

    conductor: SimulatedConductor
    model: str
    latency: float
    seed: int
    price_in: float
    price_out: float

    def respond(self, messages: Sequence[Message]) -> str:
        return self.conductor.respond(messages, as_json=True)
