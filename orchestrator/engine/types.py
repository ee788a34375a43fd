"""The engine's vocabulary: workflows, model calls, records of what ran, and the observer.

Pure Python: nothing here imports Django or a provider. Everything above the engine (storage,
live events, the CLI) speaks in these types.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol, TypeAlias

Message: TypeAlias = dict[str, str]
"""One chat message, ``{"role": "system" | "user" | "assistant", "content": "..."}``."""

ALL: Final = "all"
Access: TypeAlias = Literal["all"] | tuple[int, ...]
"""Which earlier steps of the same round a step reads: every one (``"all"``) or these indices."""

AccessMode: TypeAlias = Literal["binary", "fine"]
PromptStyle: TypeAlias = Literal["full", "compact"]
"""The conductor's first-round prompt: "full" (the format, the access rules, the workers and a
worked example, for general chat models) or "compact" (the format and the workers only, for fine-tuned conductors)."""
PROMPT_STYLES: Final = ("full", "compact")
ConductorOutput: TypeAlias = Literal["text", "json"]
"""What the conductor is asked to write: "text" (free reasoning, then the three Python lists;
for fine-tuned conductors) or "json" (one JSON object of steps, its form constrained to a JSON
schema of the plan where the server can: for small general models)."""
CONDUCTOR_OUTPUTS: Final = ("text", "json")
PlanFallback: TypeAlias = Literal["fail", "single"]
"""What a round whose plan is still unusable after the repairs does: "fail" the run, or
"single": the first worker answers alone (a later round keeps the answer it has)."""
PLAN_FALLBACKS: Final = ("fail", "single")
PlanForm: TypeAlias = Literal["", "lists", "json"]
"""The form a conductor's workflow was read from ("" when none was read)."""
StepStatus: TypeAlias = Literal["pending", "running", "succeeded", "failed", "cancelled", "skipped"]
"""``cancelled``: the run ended while the step ran; ``skipped``: it ended before the step started."""
RunStatus: TypeAlias = Literal["succeeded", "failed", "cancelled"]


@dataclass(frozen=True, slots=True)
class StepSpec:
    """One step as a conductor (or a fixed strategy) wrote it."""

    worker: int
    instruction: str
    access: Access = ()


@dataclass(frozen=True, slots=True)
class Workflow:
    """The steps of one round, in order. No steps means "accept the previous answer"."""

    steps: tuple[StepSpec, ...]

    @property
    def accepts(self) -> bool:
        return not self.steps

    def reads(self, index: int) -> tuple[int, ...]:
        """The earlier indices step ``index`` reads, with ``"all"`` resolved."""
        access = self.steps[index].access
        return tuple(range(index)) if access == ALL else access


@dataclass(frozen=True, slots=True)
class Completion:
    """What one model call returned."""

    text: str
    tokens_in: int = 0
    tokens_out: int = 0
    cost: float = 0.0
    latency: float = 0.0
    constrained: str = ""
    """How the output was held to the schema asked for (the dialect spoken: "openai",
    "llamacpp", "vllm", "ollama", "simulated"); "" when no schema was asked for."""


class ModelError(Exception):
    """A failure caused by a model or its provider: timeout, rate limit, 5xx, unusable reply.

    ``retryable`` failures are retried with backoff; the rest fail the step at once. Anything
    that is not a ModelError is a bug and propagates.
    """

    def __init__(self, message: str, *, retryable: bool = True, status: int | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.status = status


class ConfigurationError(ModelError):
    """A worker that cannot work as configured: its key variable is not set, the provider
    refuses the key (401/403), or no provider knows its model string. Never retried: another
    attempt would fail the same way until an operator changes the configuration."""

    def __init__(self, message: str, *, status: int | None = None):
        super().__init__(message, retryable=False, status=status)


class ModelClient(Protocol):
    """Messages in; text, token counts, cost and latency out. Implemented in providers/.

    ``schema``: a JSON schema the reply should follow (the conductor's plan in "json" output),
    asked of the provider in its own dialect; callers pass it only when there is one."""

    model: str

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        timeout: float,
        schema: Mapping[str, Any] | None = None,
    ) -> Completion: ...


class Slots(Protocol):
    """A bound on how many calls to one model run at once, wherever they run (the same bound
    may be held by every process that executes runs). ``hold()`` waits for a free slot and
    keeps it for the block; the wait is the call's time in the queue, apart from its latency."""

    def hold(self) -> AbstractAsyncContextManager[object]: ...


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A worker of the pool as the engine sees it. ``slots``: its concurrency bound (None:
    unbounded)."""

    name: str
    model: str
    description: str
    client: ModelClient
    system_prompt: str = ""
    slots: Slots | None = None


@dataclass(frozen=True, slots=True)
class RunSettings:
    """Bounds and switches for one run. Defaults are the embedded defaults."""

    max_steps: int = 5
    max_rounds: int = 2
    access_mode: AccessMode = "fine"
    prompt_style: PromptStyle = "full"
    show_worker_names: bool = True
    question_in_later_steps: bool = True
    step_timeout: float = 120.0
    max_attempts: int = 3
    backoff: float = 0.5
    max_parse_retries: int = 2
    conductor_output: ConductorOutput = "text"
    plan_fallback: PlanFallback = "fail"
    token_budget: int | None = None
    cost_budget: float | None = None

    @property
    def max_run_steps(self) -> int:
        """The most steps a run may hold over all its rounds; every strategy is held to it."""
        return self.max_steps * self.max_rounds


MAX_STEPS_PER_ROUND: Final = 20
"""The most steps a pool may allow in one round (``RunSettings.max_steps``)."""
MAX_ROUNDS: Final = 10
"""The most rounds a pool may allow (``RunSettings.max_rounds``)."""

DEFAULT_TOKEN_BUDGET: Final = 200_000
"""Tokens (in + out, the conductor's included) a run of a pool may use unless its admin says."""
DEFAULT_COST_BUDGET: Final = 2.0
"""Dollars a run of a pool may cost unless its admin says otherwise."""
DEFAULT_MAX_TOKENS: Final = 1_024
"""Output tokens one conductor or worker call may write unless its pool, worker or parameters
say otherwise: a model that rambles ends in seconds, not when its context is full."""


@dataclass(slots=True)
class PlanAttempt:
    """One call to the conductor: its raw output and, if it could not be used, why."""

    raw: str
    error: str = ""
    tokens_in: int = 0
    tokens_out: int = 0
    cost: float = 0.0
    latency: float = 0.0
    queued: float = 0.0
    """Seconds the call waited for a free slot of the conductor's concurrency bound."""


@dataclass(slots=True)
class PlanRecord:
    """How the workflow of one round came to be.

    A fixed strategy (single, reflection, moa) has no attempts and no messages.
    ``workflow`` is None when every attempt failed; ``error`` then says why.
    """

    round: int
    strategy: str
    messages: list[Message] = field(default_factory=list)
    attempts: list[PlanAttempt] = field(default_factory=list)
    workflow: Workflow | None = None
    error: str = ""
    reused_from: int | None = None
    """The stored plan this one is taken from (a replay keeps its source's plan of a round):
    its conductor calls are not counted again."""
    form: PlanForm = ""
    """The form the workflow was read from: "lists" or "json" ("" for a fixed strategy's, or
    when no attempt could be used)."""
    constrained: str = ""
    """How the conductor's output was held to the plan's schema (``Completion.constrained`` of
    the attempt used, else of the last one); "" in "text" output."""
    fallback: str = ""
    """Set when no attempt gave a usable workflow and the pool's ``plan_fallback`` stood in:
    "single" (the first worker answers alone) or "kept" (a later round keeps the answer it
    has). ``error`` then keeps why the conductor's plan could not be used; the workflow is the
    fallback's, never one the conductor wrote."""


@dataclass(slots=True)
class StepAttempt:
    """One call of a step to its worker: its number (from 1), when it started (seconds after the
    step began calling: a wait for a slot of the worker's bound comes before), how long it took, why it failed ("" for the call that succeeded) and how
    long the step waited after it before calling again (0 when no call followed)."""

    attempt: int
    offset: float
    seconds: float
    error: str = ""
    backoff: float = 0.0


@dataclass(slots=True)
class StepRecord:
    """A step as executed: exactly what was sent and what came back."""

    round: int
    index: int
    spec: StepSpec
    worker_name: str
    model: str
    reads: tuple[int, ...]
    messages: list[Message] = field(default_factory=list)
    status: StepStatus = "pending"
    response: str = ""
    tokens_in: int = 0
    tokens_out: int = 0
    cost: float = 0.0
    latency: float = 0.0
    queued: float = 0.0
    """Seconds the step's calls waited for a free slot of the worker's concurrency bound, in
    all (``latency`` is the call's own time, as the step timeout counts it)."""
    attempts: int = 0
    error: str = ""
    attempt_log: list[StepAttempt] = field(default_factory=list)
    """Every call of the step when one of them failed (empty when the first call succeeded)."""
    reused_from: int | None = None
    """The stored step whose result this one is (a replay reuses its source's unaffected steps):
    its usage is not counted again."""

    @property
    def key(self) -> tuple[int, int]:
        return (self.round, self.index)


@dataclass(slots=True)
class Totals:
    """Sums over every model call of a run, the conductor's included."""

    tokens_in: int = 0
    tokens_out: int = 0
    cost: float = 0.0
    model_calls: int = 0
    wall_time: float = 0.0


@dataclass(slots=True)
class RunResult:
    """How a run ended."""

    status: RunStatus
    answer: str
    error: str
    plans: list[PlanRecord]
    steps: list[StepRecord]
    totals: Totals


@dataclass(slots=True)
class ResumeState:
    """What is already known of a run: these plans are not made again, these steps not called again.

    Used to resume a run after a worker died, and by replay to reuse unaffected steps.
    Only steps with status "succeeded" count as done.

    A replay's state also says which rounds are taken from its source and not stored for this
    run yet (``unrecorded``: the observer hears ``plan_created`` for them, with the reused steps
    already succeeded), and under which condition a later round still holds (``kept_if``: the
    plans and steps of the rounds after round r are dropped, and the strategy plans again, unless
    round r's final response is exactly ``kept_if[r]``).
    """

    plans: dict[int, PlanRecord] = field(default_factory=dict)
    steps: dict[tuple[int, int], StepRecord] = field(default_factory=dict)
    unrecorded: set[int] = field(default_factory=set)
    kept_if: dict[int, str] = field(default_factory=dict)

    def forget_after(self, round: int) -> None:
        """Drop every plan and step of the rounds after ``round``."""
        self.plans = {r: plan for r, plan in self.plans.items() if r <= round}
        self.steps = {key: step for key, step in self.steps.items() if key[0] <= round}
        self.unrecorded = {r for r in self.unrecorded if r <= round}


class RunObserver(Protocol):
    """Callbacks the scheduler fires, from one place each, in this order for a step:
    started, then finished or failed. Storage and live events hang off these."""

    async def planning(self, round: int) -> None: ...

    async def plan_created(self, plan: PlanRecord, steps: Sequence[StepRecord]) -> None: ...

    async def step_started(self, step: StepRecord) -> None: ...

    async def step_finished(self, step: StepRecord) -> None: ...

    async def step_failed(self, step: StepRecord) -> None: ...

    async def run_finished(self, result: RunResult) -> None: ...


class NullObserver:
    """An observer that ignores everything."""

    async def planning(self, round: int) -> None:
        pass

    async def plan_created(self, plan: PlanRecord, steps: Sequence[StepRecord]) -> None:
        pass

    async def step_started(self, step: StepRecord) -> None:
        pass

    async def step_finished(self, step: StepRecord) -> None:
        pass

    async def step_failed(self, step: StepRecord) -> None:
        pass

    async def run_finished(self, result: RunResult) -> None:
        pass


class Strategy(Protocol):
    """Writes the workflow of each round: the conductor, or a fixed baseline (single, reflection, moa).

    Returns None when there is nothing more to do (a fixed strategy after its only round), a plan
    whose workflow accepts (no steps) to keep the previous answer, or a plan whose workflow is None
    when the conductor's output could not be used (``error`` says why; the run fails with it).
    """

    name: str

    @property
    def max_rounds(self) -> int | None:
        """The most rounds this strategy ever plans (1 for a fixed strategy); None: as settings allow."""

    async def plan(
        self,
        *,
        round: int,
        question: str,
        workers: Sequence[WorkerInfo],
        settings: RunSettings,
        previous_answer: str | None,
    ) -> PlanRecord | None: ...
