"""OpenTelemetry export: each finished run as a trace, sent over OTLP/HTTP in the background.

Enabled by ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``); the SDK's
other ``OTEL_*`` variables (headers, service name, timeout) apply as usual. A run is exported
after it ends, from stored rows, by one background thread: nothing here runs on a run's path,
and a failed export is logged, never raised.

The trace: a root span for the run (``invoke_agent <pool>``, OpenInference kind AGENT), a span
per round (CHAIN) holding a span per conductor call (``chat <model>``, LLM) and a span per step
(``chat <model>``, LLM) whose links point at the spans of the steps it read (its access list).
Spans carry the GenAI semantic conventions (``gen_ai.*``: operation, provider, request model,
usage tokens) and the OpenInference attributes Phoenix and Langfuse read (``openinference.span.
kind``, ``llm.*``, ``input.value``/``output.value``). Messages and responses are included only
with ``CONDUCTOR_OTEL_CAPTURE_MESSAGES`` on.

Ids are stable, derived from the site's address and the run, round, plan and step ids: a run
started through ``/v1`` by another run's step (recursion) continues its caller's trace, its root
span a child of the calling step's span, and a run exported twice gives the same spans.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings

logger = logging.getLogger(__name__)

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
INSTRUMENTATION_NAME = "conductor-studio"

_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="otel-export")
_provider_lock = threading.Lock()
_provider: Any = None
_provider_endpoint: str | None = None


def telemetry_endpoint() -> str:
    """Where traces go ("" when export is off)."""
    for name in ENDPOINT_VARIABLES:
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return ""


def run_trace_enqueue(*, run_id: int) -> None:
    """Export a finished run's trace in the background (nothing when export is off)."""
    if telemetry_endpoint():
        _executor.submit(_export_logging_errors, run_id)


def flush(timeout: float = 30.0) -> None:
    """Wait for the queued exports and send what the exporter holds (tests, shutdown)."""
    _executor.submit(lambda: None).result(timeout=timeout)
    provider = _current_provider()
    if provider is not None:
        provider.force_flush(int(timeout * 1000))


def _export_logging_errors(run_id: int) -> None:
    from django.db import connections

    try:
        run_trace_export(run_id=run_id)
    except Exception:  # an export must never fail anything else
        logger.warning("exporting run %s to OpenTelemetry failed", run_id, exc_info=True)
    finally:
        connections.close_all()  # this thread's own connections only


class _StableIds:
    """The SDK's id generator, handing out the ids ``_emit`` chose for the next span (one
    export thread at a time uses it); random ones otherwise."""

    def __init__(self) -> None:
        self.local = threading.local()

    def next(self, *, span_id: int, trace_id: int | None = None) -> None:
        self.local.span_id, self.local.trace_id = span_id, trace_id

    def generate_span_id(self) -> int:
        span_id = getattr(self.local, "span_id", None)
        self.local.span_id = None
        return span_id or random.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        trace_id = getattr(self.local, "trace_id", None)
        self.local.trace_id = None
        return trace_id or random.getrandbits(128) or 1

    def is_trace_id_random(self) -> bool:
        return False


_STABLE_IDS = _StableIds()


def stable_id(*parts: object, bits: int = 64) -> int:
    """A nonzero id of ``bits`` bits for these parts, the same on every export of this site."""
    text = ":".join(str(part) for part in (settings.CONDUCTOR_BASE_URL, *parts))
    value = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=bits // 8).digest(), "big")
    return value or 1


def _current_provider() -> Any:
    """The tracer provider for the configured endpoint, made again if the endpoint changed."""
    global _provider, _provider_endpoint
    endpoint = telemetry_endpoint()
    with _provider_lock:
        if endpoint and endpoint != _provider_endpoint:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor

            if _provider is not None:
                _provider.shutdown()
            resource = Resource.create(
                {"service.name": INSTRUMENTATION_NAME}
                if not os.environ.get("OTEL_SERVICE_NAME")
                else {}
            )
            _provider = TracerProvider(resource=resource, id_generator=_STABLE_IDS)
            _provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
            _provider_endpoint = endpoint
        return _provider if endpoint else None


def run_trace_export(*, run_id: int) -> None:
    """Build and queue the trace of one run (from what is stored) on the configured exporter."""
    from orchestrator.models import Plan, Run, Step

    provider = _current_provider()
    if provider is None:
        return
    run = Run.objects.select_related("pool").filter(pk=run_id).first()
    if run is None or not run.is_finished:
        return
    plans = list(Plan.objects.filter(run_id=run_id).order_by("round"))
    steps = list(Step.objects.filter(run_id=run_id).order_by("round", "index"))
    nested = {}
    for step_id, nested_id in Run.objects.filter(called_from__run_id=run_id).values_list(
        "called_from_id", "pk"
    ):
        nested.setdefault(step_id, []).append(nested_id)
    _emit(provider.get_tracer(INSTRUMENTATION_NAME), run, plans, steps, nested, _top_run_id(run))


def _top_run_id(run: Any) -> int:
    """The run at the top of a chain of nested runs (whose trace they all join)."""
    from orchestrator.models import Step

    top, step_id = run.pk, run.called_from_id
    for _ in range(64):  # far past any depth limit: a bound, not a rule
        if step_id is None:
            break
        row = Step.objects.filter(pk=step_id).values_list("run_id", "run__called_from_id").first()
        if row is None:
            break
        top, step_id = row
    return top


def _ns(moment: datetime | None) -> int | None:
    return int(moment.timestamp() * 1_000_000_000) if moment else None


def provider_name(model: str) -> str:
    """The GenAI provider of a litellm model string (``openai/gpt-5`` -> ``openai``)."""
    if model.startswith("sim/"):
        return "simulator"
    return model.split("/", 1)[0] if "/" in model else "openai"


def _llm_attributes(
    *,
    model: str,
    tokens_in: int,
    tokens_out: int,
    messages: Sequence[Mapping[str, Any]] | None,
    output: str | None,
) -> dict:
    provider = provider_name(model)
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.system": provider,
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": model,
        "gen_ai.response.model": model,
        "gen_ai.usage.input_tokens": tokens_in,
        "gen_ai.usage.output_tokens": tokens_out,
        "openinference.span.kind": "LLM",
        "llm.system": provider,
        "llm.provider": provider,
        "llm.model_name": model,
        "llm.token_count.prompt": tokens_in,
        "llm.token_count.completion": tokens_out,
        "llm.token_count.total": tokens_in + tokens_out,
    }
    if settings.CONDUCTOR_OTEL_CAPTURE_MESSAGES and messages is not None:
        shown = [
            {"role": str(m.get("role", "")), "content": str(m.get("content", ""))} for m in messages
        ]
        attributes["gen_ai.input.messages"] = json.dumps(shown)
        attributes["input.value"] = json.dumps(shown)
        attributes["input.mime_type"] = "application/json"
        for number, message in enumerate(shown):
            attributes[f"llm.input_messages.{number}.message.role"] = message["role"]
            attributes[f"llm.input_messages.{number}.message.content"] = message["content"]
        if output is not None:
            attributes["gen_ai.output.messages"] = json.dumps(
                [{"role": "assistant", "content": output}]
            )
            attributes["output.value"] = output
            attributes["llm.output_messages.0.message.role"] = "assistant"
            attributes["llm.output_messages.0.message.content"] = output
    return attributes


def _emit(
    tracer: Any, run: Any, plans: list, steps: list, nested: dict[int, list[int]], top_run: int
) -> None:
    from opentelemetry import trace
    from opentelemetry.trace import (
        Link,
        NonRecordingSpan,
        SpanContext,
        SpanKind,
        Status,
        StatusCode,
        TraceFlags,
    )

    ids = _STABLE_IDS
    trace_id = stable_id("trace", top_run, bits=128)
    parent = None
    if run.called_from_id:
        # The calling step's span, in the caller's trace (exported with the caller's run).
        calling = SpanContext(
            trace_id=trace_id,
            span_id=stable_id("step", run.called_from_id),
            is_remote=True,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )
        parent = trace.set_span_in_context(NonRecordingSpan(calling))

    capture = settings.CONDUCTOR_OTEL_CAPTURE_MESSAGES
    run_start = run.started_at or run.created_at
    run_end = run.finished_at or run_start
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": run.pool.name,
        "gen_ai.agent.id": str(run.pool_id),
        "gen_ai.conversation.id": str(run.pk),
        "gen_ai.usage.input_tokens": run.tokens_in,
        "gen_ai.usage.output_tokens": run.tokens_out,
        "openinference.span.kind": "AGENT",
        "llm.token_count.prompt": run.tokens_in,
        "llm.token_count.completion": run.tokens_out,
        "llm.token_count.total": run.tokens_in + run.tokens_out,
        "conductor.run.id": run.pk,
        "conductor.run.url": f"{settings.CONDUCTOR_BASE_URL.rstrip('/')}/runs/{run.pk}/",
        "conductor.run.status": run.status,
        "conductor.run.strategy": run.strategy,
        "conductor.run.cost": run.cost,
        "conductor.run.model_calls": run.model_calls,
        "conductor.run.depth": run.depth,
    }
    if run.score is not None:
        attributes["conductor.run.score"] = run.score
    if run.called_from_id:
        attributes["conductor.run.called_from_step"] = run.called_from_id
    if run.end_user:
        attributes["user.id"] = run.end_user
    if capture:
        attributes["input.value"] = run.input
        attributes["output.value"] = run.answer
    ids.next(span_id=stable_id("run", run.pk), trace_id=trace_id)
    root = tracer.start_span(
        f"invoke_agent {run.pool.name}",
        context=parent,
        kind=SpanKind.INTERNAL,
        attributes=attributes,
        start_time=_ns(run_start),
    )
    root_context = trace.set_span_in_context(root)
    rounds = sorted({plan.round for plan in plans} | {step.round for step in steps})
    plans_by_round = {plan.round: plan for plan in plans}
    for round_ in rounds:
        plan = plans_by_round.get(round_)
        round_steps = [step for step in steps if step.round == round_]
        starts = [s.started_at for s in round_steps if s.started_at]
        ends = [s.finished_at for s in round_steps if s.finished_at]
        plan_start, plan_spans = _plan_times(plan, run_start)
        round_start = min([plan_start, *starts]) if plan else min(starts, default=run_start)
        round_end = max([*ends, plan.created_at if plan else round_start, round_start])
        ids.next(span_id=stable_id("round", run.pk, round_))
        round_span = tracer.start_span(
            f"round {round_}",
            context=root_context,
            start_time=_ns(round_start),
            attributes={
                "openinference.span.kind": "CHAIN",
                "conductor.round": round_,
                "conductor.plan.strategy": plan.strategy if plan else run.strategy,
                "conductor.plan.error": plan.error if plan else "",
            },
        )
        round_context = trace.set_span_in_context(round_span)
        for number, (attempt, start, end) in enumerate(plan_spans):
            ids.next(span_id=stable_id("plan", plan.pk, number))
            call = tracer.start_span(
                f"chat {run.pool.conductor_model}",
                context=round_context,
                start_time=_ns(start),
                attributes={
                    **_llm_attributes(
                        model=run.pool.conductor_model,
                        tokens_in=int(attempt.get("tokens_in") or 0),
                        tokens_out=int(attempt.get("tokens_out") or 0),
                        messages=plan.messages if capture else None,
                        output=attempt.get("raw") if capture else None,
                    ),
                    "conductor.plan.round": round_,
                    "conductor.plan.attempt": number,
                    "conductor.plan.parse_error": attempt.get("error") or "",
                },
            )
            if attempt.get("error"):
                call.set_status(Status(StatusCode.ERROR, attempt["error"]))
            call.end(end_time=_ns(end))
        spans_by_id: dict[int, Any] = {}
        for step in round_steps:
            links = [
                Link(spans_by_id[read].get_span_context(), {"conductor.link": "reads"})
                for read in step.reads or []
                if read in spans_by_id
            ]
            start = step.started_at or step.finished_at or round_start
            ids.next(span_id=stable_id("step", step.pk))
            span = tracer.start_span(
                f"chat {step.model}",
                context=round_context,
                links=links,
                start_time=_ns(start),
                attributes={
                    **_llm_attributes(
                        model=step.model,
                        tokens_in=step.tokens_in,
                        tokens_out=step.tokens_out,
                        messages=step.messages if capture else None,
                        output=step.response if capture else None,
                    ),
                    "conductor.step.id": step.pk,
                    "conductor.step.round": step.round,
                    "conductor.step.index": step.index,
                    "conductor.step.worker": step.worker_name,
                    "conductor.step.status": step.status,
                    "conductor.step.reads": [int(read) for read in step.reads or []],
                    "conductor.step.attempts": step.attempts,
                    "conductor.step.nested_runs": nested.get(step.pk, []),
                    **({"conductor.step.instruction": step.instruction} if capture else {}),
                },
            )
            if step.status != "succeeded":
                span.set_status(Status(StatusCode.ERROR, step.error or step.status))
            span.end(end_time=_ns(step.finished_at or start))
            spans_by_id[step.pk] = span
        round_span.end(end_time=_ns(round_end))
    if run.status != "succeeded":
        root.set_status(Status(StatusCode.ERROR, run.error or run.status))
    root.end(end_time=_ns(run_end))


def _plan_times(
    plan: Any, fallback: datetime
) -> tuple[datetime, list[tuple[dict, datetime, datetime]]]:
    """When a round's conductor calls ran: the plan is stored right after its last call, and each
    attempt records its latency, so the calls are laid end to end before that moment."""
    if plan is None:
        return fallback, []
    end = plan.created_at
    calls = []
    for attempt in reversed(plan.attempts or []):
        start = end - timedelta(seconds=float(attempt.get("latency") or 0.0))
        calls.append((attempt, start, end))
        end = start
    calls.reverse()
    return end, calls
