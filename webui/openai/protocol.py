"""The OpenAI wire shapes this server sends: errors, completions, stream chunks, models.

Defined once here; the views only fill them in. A completion and each chunk carry the run in an
extension field, ``conductor``, that standard clients ignore: ``run_id``, ``run_url`` and, on a
chunk, the run's progress (``event``: a live event's type, with the step or status it reports).
"""

from __future__ import annotations

import json
import math
from typing import Any, Final

from django.http import JsonResponse

from orchestrator.models import Run

RUN_ID_HEADER: Final = "X-Conductor-Run-Id"
RUN_URL_HEADER: Final = "X-Conductor-Run-Url"
DONE: Final = "data: [DONE]\n\n"
# What a step's progress chunk tells of it (the live event's STEP, without the long fields).
PROGRESS_STEP_FIELDS: Final = (
    "id",
    "round",
    "index",
    "worker",
    "model",
    "instruction",
    "status",
    "tokens_in",
    "tokens_out",
    "latency",
    "error",
)
# About four characters a token: how max_tokens is applied to an answer made by several models
# with different tokenizers.
CHARS_PER_TOKEN: Final = 4
ANSWER_PIECE_CHARS: Final = 64


def error_body(
    message: str, *, type: str, code: str | None = None, param: str | None = None, **extra: Any
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code, **extra}}


def error_response(
    status: int,
    message: str,
    *,
    type: str,
    code: str | None = None,
    param: str | None = None,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> JsonResponse:
    """An error as OpenAI sends one: ``{"error": {message, type, param, code}}``."""
    body = error_body(message, type=type, code=code, param=param, **extra)
    return JsonResponse(body, status=status, headers=headers)


def run_headers(run: Run, run_url: str) -> dict[str, str]:
    return {RUN_ID_HEADER: str(run.pk), RUN_URL_HEADER: run_url}


def completion_id(run: Run) -> str:
    return f"chatcmpl-run-{run.pk}"


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def cut_answer(answer: str, max_tokens: int | None) -> tuple[str, str]:
    """The answer within ``max_tokens`` (estimated) and the finish reason (``stop``/``length``)."""
    if max_tokens is None or estimate_tokens(answer) <= max_tokens:
        return answer, "stop"
    return answer[: max_tokens * CHARS_PER_TOKEN], "length"


def usage(run: Run) -> dict[str, int]:
    """The run's totals over every model call, the conductor's included."""
    return {
        "prompt_tokens": run.tokens_in,
        "completion_tokens": run.tokens_out,
        "total_tokens": run.tokens_in + run.tokens_out,
    }


def run_extension(run: Run, run_url: str) -> dict[str, Any]:
    return {
        "run_id": run.pk,
        "run_url": run_url,
        "status": run.status,
        "score": run.score,
        "cost": run.cost,
        "model_calls": run.model_calls,
        "steps": run.step_count,
    }


def completion(run: Run, *, model: str, run_url: str, max_tokens: int | None) -> dict[str, Any]:
    """A finished, succeeded run as a chat completion."""
    text, finish_reason = cut_answer(run.answer, max_tokens)
    return {
        "id": completion_id(run),
        "object": "chat.completion",
        "created": int(run.created_at.timestamp()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish_reason,
                "logprobs": None,
            }
        ],
        "usage": usage(run),
        "conductor": run_extension(run, run_url),
    }


def run_failed_message(run: Run, run_url: str) -> str:
    why = run.error or f"the run ended {run.status}"
    return f"The run {run.status}: {why} (see {run_url})"


class ChunkWriter:
    """Builds the Server-Sent Events of one streamed completion."""

    def __init__(self, run: Run, *, model: str, run_url: str, include_usage: bool) -> None:
        self.base = {
            "id": completion_id(run),
            "object": "chat.completion.chunk",
            "created": int(run.created_at.timestamp()),
            "model": model,
        }
        self.run_id = run.pk
        self.run_url = run_url
        self.include_usage = include_usage

    def chunk(
        self,
        delta: dict[str, Any],
        *,
        finish_reason: str | None = None,
        progress: dict[str, Any] | None = None,
    ) -> str:
        data: dict[str, Any] = {
            **self.base,
            "choices": [
                {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
            ],
        }
        if self.include_usage:
            data["usage"] = None
        if progress is not None:
            data["conductor"] = {"run_id": self.run_id, "run_url": self.run_url, **progress}
        return _sse(data)

    def start(self) -> str:
        return self.chunk({"role": "assistant", "content": ""}, progress={"event": "run.created"})

    def progress(self, event: dict[str, Any]) -> str | None:
        """A live event as a progress chunk (an empty delta); None for events not shown."""
        kind = event["type"]
        if kind in ("step.started", "step.finished", "step.failed"):
            step = event["step"]
            shown = {field: step.get(field) for field in PROGRESS_STEP_FIELDS}
            return self.chunk({}, progress={"event": kind, "step": shown})
        if kind == "run.status":
            return self.chunk({}, progress={"event": kind, "status": event["status"]})
        if kind == "plan.created":
            plan = event["plan"]
            return self.chunk(
                {}, progress={"event": kind, "round": plan["round"], "steps": plan["step_count"]}
            )
        return None

    def answer(self, run: Run, *, max_tokens: int | None) -> list[str]:
        """The answer as content deltas, the finishing chunk and, if asked, the usage chunk."""
        text, finish_reason = cut_answer(run.answer, max_tokens)
        parts = [
            self.chunk({"content": text[start : start + ANSWER_PIECE_CHARS]})
            for start in range(0, len(text), ANSWER_PIECE_CHARS)
        ]
        parts.append(
            self.chunk(
                {},
                finish_reason=finish_reason,
                progress={"event": "run.finished", **run_extension(run, self.run_url)},
            )
        )
        if self.include_usage:
            parts.append(_sse({**self.base, "choices": [], "usage": usage(run)}))
        return parts

    def error(self, message: str, *, code: str) -> str:
        return _sse(error_body(message, type="server_error", code=code, run_url=self.run_url))


def _sse(data: dict[str, Any]) -> str:
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n"


def model_entry(model_id: str, *, created: int, owned_by: str) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": created, "owned_by": owned_by}
