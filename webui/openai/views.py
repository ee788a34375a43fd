"""``/v1/models`` and ``/v1/chat/completions``: the OpenAI protocol over ordinary runs.

Async views (not DRF): a completion waits for its run, or streams its progress, without holding
a thread. A request's key is checked, then one service makes the run (``chat_run_create``); the
run executes like any other and this view follows its live events until ``run.finished``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import PermissionDenied, RequestDataTooBig, ValidationError
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from orchestrator import events, selectors, wire
from orchestrator.models import ApiKey, Run
from orchestrator.providers.calls import DEPTH_HEADER, STEP_HEADER
from orchestrator.services.api_keys import api_key_authenticate
from orchestrator.services.chat import (
    DepthExceeded,
    ModelNotFound,
    chat_run_create,
    model_ids,
)
from orchestrator.services.runs import run_watch
from webui.openai import protocol

logger = logging.getLogger(__name__)

# Seconds between looks at the database while no live event arrives (a lost channel-layer
# message must not leave a client waiting forever).
EVENT_POLL_SECONDS = 1.0
MAX_BODY_BYTES = 1_000_000
# Options that ask for something a run cannot give.
UNSUPPORTED = ("tools", "tool_choice", "functions", "function_call", "audio", "prediction")
WORKER_PARAMS = ("temperature", "top_p")


class _Refused(Exception):
    def __init__(self, response: JsonResponse) -> None:
        self.response = response


async def _authenticate(request: HttpRequest) -> ApiKey:
    header = request.headers.get("Authorization", "")
    scheme, _, key = header.partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise _Refused(
            protocol.error_response(
                401,
                "Send your API key as 'Authorization: Bearer <key>' (create one on your "
                "account page).",
                type="invalid_request_error",
                code="invalid_api_key",
            )
        )
    api_key = await sync_to_async(api_key_authenticate)(key=key.strip())
    if api_key is None:
        raise _Refused(
            protocol.error_response(
                401,
                "Incorrect API key provided, or the key was revoked.",
                type="invalid_request_error",
                code="invalid_api_key",
            )
        )
    if await _over_rate_limit(api_key.pk):
        raise _Refused(
            protocol.error_response(
                429,
                f"Rate limit reached: {settings.CONDUCTOR_API_RATE_LIMIT} requests per minute "
                "per key. Try again shortly.",
                type="requests",
                code="rate_limit_exceeded",
                headers={"Retry-After": str(60 - int(time.time()) % 60)},
            )
        )
    return api_key


async def _over_rate_limit(key_id: int) -> bool:
    """Count one request of the key in this minute's window; True past the limit."""
    window = f"v1-rate:{key_id}:{int(time.time()) // 60}"
    await cache.aadd(window, 0, timeout=120)
    try:
        count = await cache.aincr(window)
    except ValueError:  # the window expired between the two calls
        await cache.aset(window, 1, timeout=120)
        count = 1
    return count > settings.CONDUCTOR_API_RATE_LIMIT


@csrf_exempt
async def unknown_route(request: HttpRequest) -> HttpResponse:
    """Any other /v1 path (embeddings, completions, ...): a 404 in OpenAI's shape."""
    return protocol.error_response(
        404,
        f"{request.path} is not served here: this server offers /v1/chat/completions and "
        "/v1/models.",
        type="invalid_request_error",
        code="unknown_url",
    )


def _method_not_allowed(method: str) -> JsonResponse:
    return protocol.error_response(
        405, f"Use {method} here.", type="invalid_request_error", code="method_not_allowed"
    )


async def models_list(request: HttpRequest) -> HttpResponse:
    """``GET /v1/models``: every model name the key may use."""
    if request.method != "GET":
        return _method_not_allowed("GET")
    try:
        api_key = await _authenticate(request)
    except _Refused as refused:
        return refused.response
    models = await _models(api_key)
    return JsonResponse({"object": "list", "data": models})


async def model_detail(request: HttpRequest, model: str) -> HttpResponse:
    """``GET /v1/models/<model>``: one model name, if the key may use it."""
    if request.method != "GET":
        return _method_not_allowed("GET")
    try:
        api_key = await _authenticate(request)
    except _Refused as refused:
        return refused.response
    for entry in await _models(api_key):
        if entry["id"] == model:
            return JsonResponse(entry)
    return _model_not_found(f"The model {model!r} does not exist or you do not have access to it.")


async def _models(api_key: ApiKey) -> list[dict[str, Any]]:
    pools = await sync_to_async(selectors.api_pools)(project=api_key.project_id)
    return [
        protocol.model_entry(
            model_id, created=int(pool.created_at.timestamp()), owned_by=api_key.project.slug
        )
        for pool in pools
        for model_id in model_ids(pool)
    ]


def _model_not_found(message: str) -> JsonResponse:
    return protocol.error_response(
        404, message, type="invalid_request_error", code="model_not_found", param="model"
    )


def _bad_request(
    message: str, *, param: str | None = None, code: str | None = None
) -> JsonResponse:
    return protocol.error_response(
        400, message, type="invalid_request_error", param=param, code=code
    )


class _ChatRequest:
    """A chat request's body, checked: what it asks for or why it cannot be served."""

    def __init__(self, body: Any) -> None:
        if not isinstance(body, dict):
            raise _Refused(_bad_request("The body must be a JSON object."))
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise _Refused(_bad_request("Give a model (GET /v1/models lists them).", param="model"))
        self.model = model
        self.messages = body.get("messages")
        if not isinstance(self.messages, list):
            raise _Refused(
                _bad_request("Give messages: a list of chat messages.", param="messages")
            )
        for name in UNSUPPORTED:
            if body.get(name) not in (None, [], {}):
                raise _Refused(
                    _bad_request(
                        f"{name} is not supported: a run answers in text only.",
                        param=name,
                        code="unsupported_parameter",
                    )
                )
        if body.get("n") not in (None, 1):
            raise _Refused(
                _bad_request(
                    "n must be 1: one run, one answer.", param="n", code="unsupported_parameter"
                )
            )
        if body.get("logprobs"):
            raise _Refused(
                _bad_request(
                    "logprobs are not available for a run.",
                    param="logprobs",
                    code="unsupported_parameter",
                )
            )
        response_format = body.get("response_format")
        if response_format not in (None, {}) and (
            not isinstance(response_format, dict) or response_format.get("type") != "text"
        ):
            raise _Refused(
                _bad_request(
                    "Only the text response format is supported.",
                    param="response_format",
                    code="unsupported_parameter",
                )
            )
        self.stream = body.get("stream") or False
        if not isinstance(self.stream, bool):
            raise _Refused(_bad_request("stream must be true or false.", param="stream"))
        options = body.get("stream_options") or {}
        if not isinstance(options, dict):
            raise _Refused(
                _bad_request("stream_options must be an object.", param="stream_options")
            )
        self.include_usage = bool(options.get("include_usage"))
        self.max_tokens = None
        for name in ("max_completion_tokens", "max_tokens"):
            value = body.get(name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise _Refused(_bad_request(f"{name} must be a positive integer.", param=name))
            self.max_tokens = value
            break
        self.worker_params: dict[str, float] = {}
        for name, high in (("temperature", 2.0), ("top_p", 1.0)):
            value = body.get(name)
            if value is None:
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not 0 <= value <= high
            ):
                raise _Refused(
                    _bad_request(f"{name} must be a number from 0 to {high:g}.", param=name)
                )
            self.worker_params[name] = float(value)
        user = body.get("user") or ""
        if not isinstance(user, str) or len(user) > 256:
            raise _Refused(
                _bad_request("user must be a string of at most 256 characters.", param="user")
            )
        self.user = user


def _header_int(request: HttpRequest, name: str) -> int | None:
    raw = request.headers.get(name)
    if raw is None or raw == "":
        return None
    if not raw.strip().isdigit() or len(raw.strip()) > 18:
        raise _Refused(_bad_request(f"The {name} header must be a whole number."))
    return int(raw.strip())


@csrf_exempt
async def chat_completions(request: HttpRequest) -> HttpResponse:
    """``POST /v1/chat/completions``: a run of the question on the model's pool and strategy."""
    if request.method != "POST":
        return _method_not_allowed("POST")
    try:
        api_key = await _authenticate(request)
        try:
            raw_body = request.body
        except RequestDataTooBig:
            raise _Refused(_bad_request(f"The body is over {MAX_BODY_BYTES} bytes.")) from None
        if len(raw_body) > MAX_BODY_BYTES:
            raise _Refused(_bad_request(f"The body is over {MAX_BODY_BYTES} bytes."))
        try:
            body = json.loads(raw_body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise _Refused(_bad_request("The body is not valid JSON.")) from None
        chat = _ChatRequest(body)
        depth = _header_int(request, DEPTH_HEADER) or 0
        step = _header_int(request, STEP_HEADER)
        try:
            run = await sync_to_async(chat_run_create)(
                api_key=api_key,
                model=chat.model,
                messages=chat.messages,
                worker_params=chat.worker_params,
                end_user=chat.user,
                depth=depth,
                called_from_step=step,
            )
        except ModelNotFound as error:
            raise _Refused(_model_not_found(str(error))) from None
        except DepthExceeded as error:
            raise _Refused(_bad_request(str(error), code="depth_limit_exceeded")) from None
        except PermissionDenied as error:
            raise _Refused(
                protocol.error_response(
                    403, str(error), type="permission_error", code="permission_denied"
                )
            ) from None
        except ValidationError as error:
            field, messages = next(
                iter(getattr(error, "message_dict", {"": error.messages}).items())
            )
            # The model name chose the pool, strategy and options: a problem there is the model's.
            param = {
                "input": "messages",
                "strategy": "model",
                "strategy_options": "model",
                "pool": "model",
            }.get(field, field or None)
            raise _Refused(_bad_request(" ".join(messages), param=param)) from None
    except _Refused as refused:
        return refused.response

    run_url = request.build_absolute_uri(f"/runs/{run.pk}/")
    headers = protocol.run_headers(run, run_url)
    if chat.stream:
        writer = protocol.ChunkWriter(
            run, model=chat.model, run_url=run_url, include_usage=chat.include_usage
        )
        response = StreamingHttpResponse(
            _stream(run.pk, writer, max_tokens=chat.max_tokens),
            content_type="text/event-stream",
            headers={**headers, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
        return response
    async for _ in run_events(run.pk):
        pass
    run = await _finished_run(run.pk)
    if run.status != Run.Status.SUCCEEDED:
        return protocol.error_response(
            500,
            protocol.run_failed_message(run, run_url),
            type="server_error",
            code=f"run_{run.status}",
            headers=headers,
            run_url=run_url,
        )
    body = protocol.completion(run, model=chat.model, run_url=run_url, max_tokens=chat.max_tokens)
    return JsonResponse(body, headers=headers)


async def _stream(
    run_id: int, writer: protocol.ChunkWriter, *, max_tokens: int | None
) -> AsyncIterator[str]:
    yield writer.start()
    async for event in run_events(run_id):
        chunk = writer.progress(event)
        if chunk is not None:
            yield chunk
    run = await _finished_run(run_id)
    if run.status != Run.Status.SUCCEEDED:
        yield writer.error(
            protocol.run_failed_message(run, writer.run_url), code=f"run_{run.status}"
        )
    else:
        for part in writer.answer(run, max_tokens=max_tokens):
            yield part
    yield protocol.DONE


@sync_to_async
def _finished_run(run_id: int) -> Run:
    return selectors.run_finished_row(run_id=run_id)


async def run_events(run_id: int) -> AsyncIterator[dict[str, Any]]:
    """The events of a run in seq order, from its first to its ``run.finished``.

    Joins the run's channel group first, then reads what is stored, so no event falls between
    the two; live events repeat stored ones at most, and those are dropped by seq. While nothing
    arrives the stored events are read again every ``EVENT_POLL_SECONDS``.
    """
    layer = get_channel_layer()
    channel = await layer.new_channel() if layer is not None else None
    group = events.group_name(run_id)
    if channel is not None:
        await layer.group_add(group, channel)
        # Then marked watched, before the first read: what that read misses is sent here.
        await sync_to_async(run_watch)(run_id=run_id)
    seen = 0
    try:
        while True:
            for event in await sync_to_async(selectors.run_events_after)(run_id=run_id, seq=seen):
                if event["seq"] <= seen:
                    continue
                seen = event["seq"]
                yield event
                if event["type"] == wire.RUN_FINISHED:
                    return
            if channel is None:
                await asyncio.sleep(EVENT_POLL_SECONDS)
                continue
            while True:
                try:
                    message = await asyncio.wait_for(layer.receive(channel), EVENT_POLL_SECONDS)
                except TimeoutError:
                    break  # read the stored events again
                if message.get("type") == events.LAYER_BATCH_TYPE:
                    batch = message.get("events") or []
                else:
                    batch = [message.get("event") or {}]
                gap = False
                for event in batch:
                    seq = event.get("seq", 0)
                    if seq <= seen:
                        continue
                    if seq != seen + 1:
                        gap = True
                        break
                    seen = seq
                    yield event
                    if event["type"] == wire.RUN_FINISHED:
                        return
                if gap:
                    break  # take the missing ones from the database
    finally:
        if channel is not None:
            await layer.group_discard(group, channel)
