"""Runs asked for over the OpenAI protocol (``/v1/chat/completions``): what a model name means,
what a chat request becomes, and the checks that come before a run is made.

A model name is a pool's slug (``slugify`` of its name) with an optional strategy and argument:
``<pool>`` (the conductor), ``<pool>:moa``, ``<pool>:single:2``. The argument is the strategy's
one number: the worker for ``single``, the rounds for ``reflection``, the aggregator for ``moa``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError

from orchestrator.engine.strategies import STRATEGIES
from orchestrator.models import ApiKey, Pool, Run, Step
from orchestrator.selectors import api_pools
from orchestrator.services.runs import run_create

# The option a strategy's numeric argument sets, by strategy.
STRATEGY_ARGUMENT = {"single": "worker", "reflection": "rounds", "moa": "aggregator"}
ROLES = ("system", "user", "assistant", "developer", "tool")
MAX_MESSAGES = 200


class ModelNotFound(Exception):
    """The model name names no pool of the key's project, or a strategy that does not exist."""


class DepthExceeded(Exception):
    """A call nested deeper than ``CONDUCTOR_MAX_DEPTH`` (a pool calling itself, in a loop)."""


@dataclass(frozen=True, slots=True)
class ModelName:
    """A parsed model name."""

    pool_slug: str
    strategy: str
    options: dict[str, Any]


def parse_model_name(name: str) -> ModelName:
    """``<pool>[:strategy[:arg]]`` as its parts; ModelNotFound when it cannot mean anything."""
    parts = (name or "").strip().split(":")
    if not parts[0] or len(parts) > 3:
        raise ModelNotFound(f"The model {name!r} does not exist: use <pool>[:strategy[:number]].")
    strategy = parts[1] if len(parts) > 1 else "conductor"
    if strategy not in STRATEGIES:
        raise ModelNotFound(
            f"The model {name!r} does not exist: unknown strategy {strategy!r} "
            f"(one of {', '.join(STRATEGIES)})."
        )
    options: dict[str, Any] = {}
    if len(parts) == 3:
        option = STRATEGY_ARGUMENT.get(strategy)
        if option is None or not parts[2].isdigit():
            raise ModelNotFound(
                f"The model {name!r} does not exist: strategy {strategy!r} takes "
                + (f"a number ({option})." if option else "no argument.")
            )
        options[option] = int(parts[2])
    return ModelName(parts[0], strategy, options)


def model_ids(pool: Pool) -> list[str]:
    """The model names of one pool: each strategy, and ``single`` on each enabled worker."""
    slug = pool.api_slug
    ids = [slug, *(f"{slug}:{strategy}" for strategy in STRATEGIES if strategy != "conductor")]
    ids += [f"{slug}:single:{index}" for index in range(len(pool.enabled_workers))]
    return ids


def conversation_input(messages: Sequence[Mapping[str, Any]]) -> str:
    """The run's input: the last user message, after the earlier messages as context.

    Raises ValidationError (on ``messages``) when there is no user message to answer.
    """
    if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)) or not messages:
        raise ValidationError({"messages": ["Give at least one message."]})
    if len(messages) > MAX_MESSAGES:
        raise ValidationError({"messages": [f"Send at most {MAX_MESSAGES} messages."]})
    turns: list[tuple[str, str]] = []
    for position, message in enumerate(messages):
        if not isinstance(message, Mapping) or message.get("role") not in ROLES:
            raise ValidationError(
                {"messages": [f"Message {position} needs a role ({', '.join(ROLES)})."]}
            )
        turns.append((message["role"], _text(message.get("content"), position)))
    last_user = max((i for i, (role, _) in enumerate(turns) if role == "user"), default=None)
    if last_user is None or not turns[last_user][1].strip():
        raise ValidationError({"messages": ["The last user message is the question: send one."]})
    question = turns[last_user][1].strip()
    context = [f"[{role}] {text.strip()}" for role, text in turns[:last_user] if text.strip()]
    if not context:
        return question
    return "Conversation so far:\n" + "\n\n".join(context) + "\n\n" + question


def _text(content: Any, position: int) -> str:
    """A message's text: a string, or the text parts of a list of content parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, Mapping) or part.get("type") != "text":
                raise ValidationError(
                    {"messages": [f"Message {position}: only text content is supported."]}
                )
            texts.append(str(part.get("text", "")))
        return "\n".join(texts)
    raise ValidationError({"messages": [f"Message {position}: content must be text."]})


def chat_run_create(
    *,
    api_key: ApiKey,
    model: str,
    messages: Sequence[Mapping[str, Any]],
    worker_params: Mapping[str, Any] | None = None,
    end_user: str = "",
    depth: int = 0,
    called_from_step: int | None = None,
) -> Run:
    """Start the run a chat request asks for, on a pool of the key's project, as the key's user.

    ``depth`` is how many calls through this endpoint led here (0 for a client's own call);
    beyond ``CONDUCTOR_MAX_DEPTH`` the call is refused (DepthExceeded). ``called_from_step`` is
    the step whose worker made the call; it is linked only if it belongs to the key's project.
    Raises ModelNotFound, ValidationError (bad messages or options) and PermissionDenied.
    """
    limit = settings.CONDUCTOR_MAX_DEPTH
    if depth > limit:
        raise DepthExceeded(
            f"Nested too deep: this call is {depth} levels down and the limit is {limit} "
            "(does a pool call itself?)."
        )
    name = parse_model_name(model)
    pool = next(
        (p for p in api_pools(project=api_key.project_id) if p.api_slug == name.pool_slug), None
    )
    if pool is None:
        raise ModelNotFound(f"The model {model!r} does not exist or you do not have access to it.")
    input = conversation_input(messages)
    step_id = None
    if called_from_step is not None:
        step_id = (
            Step.objects.filter(pk=called_from_step, run__project_id=api_key.project_id)
            .values_list("pk", flat=True)
            .first()
        )
    return run_create(
        pool=pool,
        input=input,
        strategy=name.strategy,
        strategy_options=name.options,
        created_by=api_key.user,
        extra={
            "depth": depth,
            "called_from_id": step_id,
            "worker_params": dict(worker_params or {}),
            "end_user": end_user[:256],
        },
    )
