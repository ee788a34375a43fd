"""Simulated workers: ModelClients that answer the bundled suite with a configured skill.

A worker finds the task by the question in its messages, tells its role from the instruction
(solve, plan, verify, combine), and answers by actually solving the task or by making a plausible
mistake at its configured rate. Every draw comes from a hash of (seed, model, question,
instruction, visible context), so the same call always gives the same reply, and better context
changes the odds the way it should: a verifier that sees an answer can catch its mistake, a
solver that sees a sound plan errs less, an aggregator that sees candidates can pick the right
one.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import os
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias

from orchestrator.engine.types import Completion, Message, ModelError
from orchestrator.providers.simulator.reading import WorkerTurn, read_worker_turn
from orchestrator.providers.simulator.solving import (
    Attempt,
    answer_of,
    is_correct,
    mistake,
    plain_arithmetic,
    solve,
)
from orchestrator.providers.simulator.suite import Task, format_number, task_for_question

Role: TypeAlias = Literal["solve", "plan", "verify", "combine"]

LATENCY_SCALE_ENV = "CONDUCTOR_SIM_LATENCY_SCALE"
AVERAGE_SKILL = 0.6

# How much a sound plan closes the gap to a perfect answer, per domain: code benefits most.
PLAN_BENEFIT = {"code": 0.6, "countdown": 0.3, "arithmetic": 0.3, "lookup": 0.1}
# Following a flawed plan makes a correct answer less likely.
MISLEADING_PLAN_FACTOR = 0.7
# Reviewing one's own answer catches fewer mistakes than reviewing someone else's.
SELF_REVIEW_FACTOR = 0.5
# A reviewer occasionally "fixes" a correct answer into a wrong one.
OVERCORRECTION = 0.15

_COMBINE_WORDS = re.compile(
    r"\b(combine|aggregate|synthesi[sz]e|merge|best of|pick the best|choose the best|select the best)\b",
    re.IGNORECASE,
)
_VERIFY_WORDS = re.compile(
    r"\b(verify|check|review|critique|critici[sz]e|correct|double-check|validate|reflect|improve|fix)\b",
    re.IGNORECASE,
)
_SOLVE_WORDS = re.compile(
    r"\b(solve|implement|compute|calculate|answer|write the code|find)\b", re.IGNORECASE
)
_PLAN_WORDS = re.compile(
    r"\b(plan|outline|design|approach|algorithm|strategy|sketch)\b", re.IGNORECASE
)


def role_for(instruction: str) -> Role:
    """The role an instruction asks for, from its words; "solve" when nothing else fits."""
    if _COMBINE_WORDS.search(instruction):
        return "combine"
    if _VERIFY_WORDS.search(instruction):
        return "verify"
    if _PLAN_WORDS.search(instruction) and not _SOLVE_WORDS.search(instruction):
        return "plan"
    return "solve"


def token_count(text: str) -> int:
    """Deterministic token estimate: about four characters a token."""
    return max(1, math.ceil(len(text) / 4))


def prompt_tokens(messages: Sequence[Message]) -> int:
    return sum(token_count(m.get("content", "")) + 4 for m in messages)


def latency_scale() -> float:
    """The CONDUCTOR_SIM_LATENCY_SCALE multiplier (default 1; 0 makes every call instant)."""
    raw = os.environ.get(LATENCY_SCALE_ENV, "").strip()
    try:
        return max(0.0, float(raw)) if raw else 1.0
    except ValueError:
        return 1.0


def draw(*parts: object) -> float:
    """A uniform number in [0, 1) fixed by ``parts``."""
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


async def simulated_delay(seconds: float, *, timeout: float, model: str) -> None:
    """Sleep like a remote call would; a call slower than its timeout fails like one."""
    if seconds <= 0:
        return
    if seconds > timeout:
        await asyncio.sleep(timeout)
        raise ModelError(f"{model} timed out after {timeout:g}s", retryable=True)
    await asyncio.sleep(seconds)


class SimulatedModel(Protocol):
    """What simulated_call needs of a simulated worker or conductor."""

    model: str
    latency: float
    seed: int
    price_in: float
    price_out: float

    def respond(self, messages: Sequence[Message]) -> str: ...


async def simulated_call(
    simulated: SimulatedModel, messages: Sequence[Message], *, timeout: float
) -> Completion:
    """A simulated model call: the deterministic reply after a simulated delay, with token
    counts from the message lengths and the cost from the prices."""
    text = simulated.respond(messages)
    jitter = 0.75 + 0.5 * draw(simulated.seed, simulated.model, text)
    seconds = simulated.latency * latency_scale() * jitter
    await simulated_delay(seconds, timeout=timeout, model=simulated.model)
    tokens_in, tokens_out = prompt_tokens(messages), token_count(text)
    cost = (tokens_in * simulated.price_in + tokens_out * simulated.price_out) / 1_000_000
    return Completion(text, tokens_in, tokens_out, cost, seconds)


@dataclass(frozen=True, slots=True)
class Candidate:
    """An answer seen in the context, and whether the simulator can tell it is right."""

    answer: str
    correct: bool | None
    own: bool


@dataclass(slots=True)
class SimulatedWorker:
    """A ``ModelClient`` for ``sim/<profile>`` models. Clearly labelled as simulated."""

    model: str
    skills: Mapping[str, float] = field(default_factory=dict)
    latency: float = 0.0
    seed: int = 0
    price_in: float = 0.0
    price_out: float = 0.0

    def skill(self, domain: str) -> float:
        return float(self.skills.get(domain, AVERAGE_SKILL))

    @property
    def label(self) -> str:
        return f"[simulated {self.model}]"

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        timeout: float,
        schema: Mapping[str, Any] | None = None,
    ) -> Completion:
        """A simulated worker writes text: a schema asked of it is not followed."""
        return await simulated_call(self, messages, timeout=timeout)

    def respond(self, messages: Sequence[Message]) -> str:
        """The reply to ``messages``, without the simulated delay (pure and deterministic)."""
        turn = read_worker_turn(messages)
        task = task_for_question(turn.question) if turn.question else None
        if task is None:
            return self._not_in_suite(turn)
        role = role_for(turn.instruction)
        if role == "plan":
            return self._plan(task, turn)
        candidates = self._candidates(task, turn)
        if role == "combine" and candidates:
            attempt, note = self._combine(task, turn, candidates)
        elif candidates and role in ("verify", "solve"):
            attempt, note = self._verify(task, turn, candidates[-1])
        else:
            attempt, note = self._solve(task, turn)
        return self._write(task, attempt, note)

    # roles ---------------------------------------------------------------------------------------

    def _chance(self, turn: WorkerTurn, purpose: str) -> float:
        return draw(
            self.seed, self.model, turn.question, turn.instruction, turn.context_text(), purpose
        )

    def _solve(self, task: Task, turn: WorkerTurn) -> tuple[Attempt, str]:
        skill = self.skill(task.domain)
        context = turn.context_text()
        note = "Solved it directly."
        if task.plan and task.plan in context:
            skill += (1 - skill) * PLAN_BENEFIT[task.domain]
            note = "Followed the plan above."
        elif task.misleading_plan and task.misleading_plan in context:
            skill *= MISLEADING_PLAN_FACTOR
            note = "Followed the plan above."
        if self._chance(turn, "solve") < skill:
            return solve(task), note
        return mistake(task, self._chance(turn, "mistake")), note

    def _plan(self, task: Task, turn: WorkerTurn) -> str:
        sound = self._chance(turn, "plan") < self.skill(task.domain)
        outline = task.plan if sound else task.misleading_plan
        return f"{self.label} Plan (no final answer yet):\n{outline}"

    def _verify(self, task: Task, turn: WorkerTurn, candidate: Candidate) -> tuple[Attempt, str]:
        if candidate.correct is None:
            attempt, _ = self._solve(task, turn)
            return attempt, "Could not confirm the earlier answer, so solved it again."
        skill = self.skill(task.domain)
        chance = self._chance(turn, "verify")
        if candidate.correct:
            if chance < OVERCORRECTION * (1 - skill):
                return mistake(task, self._chance(turn, "mistake")), "Changed the earlier answer."
            return _kept(candidate), "Checked the earlier answer: it holds."
        catch = skill * (SELF_REVIEW_FACTOR if candidate.own else 1.0)
        if chance < catch:
            return solve(task), "Checked the earlier answer: it is wrong; corrected it."
        return _kept(candidate), "Checked the earlier answer: it looks right."

    def _combine(
        self, task: Task, turn: WorkerTurn, candidates: list[Candidate]
    ) -> tuple[Attempt, str]:
        skill = self.skill(task.domain)
        right = [c for c in candidates if c.correct]
        share = len(right) / len(candidates)
        note = f"Compared {len(candidates)} candidate answers."
        if right and self._chance(turn, "combine") < share + (1 - share) * skill:
            return _kept(right[0]), note + " Kept the one that checks out."
        if not right and self._chance(turn, "combine") < skill * 0.5:
            return solve(task), note + " None checked out; solved it anew."
        wrong = [c for c in candidates if not c.correct] or candidates
        common = Counter(c.answer for c in wrong).most_common(1)[0][0]
        return Attempt(common, "Most candidates agree."), note + " Went with the majority."

    # helpers -------------------------------------------------------------------------------------

    def _candidates(self, task: Task, turn: WorkerTurn) -> list[Candidate]:
        candidates = []
        for _, response in turn.visible:
            answer = answer_of(task, response)
            if answer is not None:
                candidates.append(
                    Candidate(answer, is_correct(task, answer), response.startswith(self.label))
                )
        return candidates

    def _write(self, task: Task, attempt: Attempt, note: str) -> str:
        if task.domain == "code":
            return f"{self.label} {note}\n```python\n{attempt.answer.rstrip()}\n```"
        return f"{self.label} {note}\nWork: {attempt.work}\nAnswer: {attempt.answer}"

    def _not_in_suite(self, turn: WorkerTurn) -> str:
        if turn.question is None:
            return (
                f"{self.label} This is the offline simulator, not a language model. The question "
                "is not in this step's context, so it cannot tell which task of its bundled "
                "suite to work on."
            )
        honest = (
            f"{self.label} This is the offline simulator, not a language model. It only answers "
            "the questions of its bundled task suite, and this question is not one of them."
        )
        value = plain_arithmetic(turn.question or "")
        if value is not None:
            return (
                f"{honest} It can still evaluate plain arithmetic.\nAnswer: {format_number(value)}"
            )
        return honest


def _kept(candidate: Candidate) -> Attempt:
    return Attempt(candidate.answer, "Same result as the earlier answer.")
