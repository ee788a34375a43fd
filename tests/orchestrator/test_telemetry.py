"""OpenTelemetry export against a real OTLP/HTTP receiver on 127.0.0.1 that decodes the
protobuf the exporter sends."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from orchestrator import telemetry
from orchestrator.models import Run, Step
from orchestrator.services.runs import run_create, run_execute
from tests.factories import make_pool

pytestmark = pytest.mark.django_db(transaction=True)


class Receiver:
    """An OTLP/HTTP trace receiver: keeps every span it is sent. While ``holding`` it answers
    nothing until ``release`` is set (or ``HOLD_LIMIT_SECONDS`` pass); ``held`` is set once a
    request has come in and waits, ``answered`` once one has been answered."""

    HOLD_LIMIT_SECONDS = 30.0

    def __init__(self) -> None:
        self.spans: list = []
        self.resources: list = []
        self.holding = False
        self.held = threading.Event()
        self.release = threading.Event()
        self.answered = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                if receiver.holding:
                    receiver.held.set()
                    receiver.release.wait(receiver.HOLD_LIMIT_SECONDS)
                for resource_spans in request.resource_spans:
                    receiver.resources.append(resource_spans.resource)
                    for scope_spans in resource_spans.scope_spans:
                        receiver.spans.extend(scope_spans.spans)
                payload = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if self.path == "/v1/traces" else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                receiver.answered.set()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def attributes(span) -> dict:
    def value(any_value):
        kind = any_value.WhichOneof("value")
        if kind == "array_value":
            return [value(v) for v in any_value.array_value.values]
        return getattr(any_value, kind)

    return {item.key: value(item.value) for item in span.attributes}


@pytest.fixture
def receiver(monkeypatch):
    made = Receiver()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", made.endpoint)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    yield made
    telemetry.flush()
    made.close()


def execute(pool, admin, question="What is 17 * 23?", **kwargs):
    run = run_create(pool=pool, input=question, created_by=admin, enqueue=False, **kwargs)
    run_execute(run_id=run.pk)
    run.refresh_from_db()
    return run


def test_a_run_is_one_trace_of_rounds_plans_and_steps(receiver, project, project_admin, settings):
    settings.CONDUCTOR_OTEL_CAPTURE_MESSAGES = False
    pool = make_pool(project=project, workers=3, name="Trace pool")
    run = execute(pool, project_admin, reference="391", strategy="moa")
    telemetry.flush()

    spans = receiver.spans
    assert {bytes(span.trace_id) for span in spans} == {bytes(spans[0].trace_id)}
    by_id = {bytes(span.span_id): span for span in spans}
    [root] = [span for span in spans if not span.parent_span_id]
    assert root.name == "invoke_agent Trace pool"
    root_attributes = attributes(root)
    assert root_attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root_attributes["openinference.span.kind"] == "AGENT"
    assert root_attributes["gen_ai.usage.input_tokens"] == run.tokens_in
    assert root_attributes["gen_ai.usage.output_tokens"] == run.tokens_out
    assert root_attributes["conductor.run.id"] == run.pk
    assert root_attributes["conductor.run.score"] == 1.0
    assert "input.value" not in root_attributes  # messages only when the setting allows
    rounds = [span for span in spans if span.name.startswith("round ")]
    assert [bytes(r.parent_span_id) for r in rounds] == [bytes(root.span_id)]

    steps = {s.pk: s for s in Step.objects.filter(run=run)}
    step_spans = {
        attributes(span)["conductor.step.id"]: span
        for span in spans
        if "conductor.step.id" in attributes(span)
    }
    assert set(step_spans) == set(steps)
    for step_id, span in step_spans.items():
        step, found = steps[step_id], attributes(span)
        assert span.name == f"chat {step.model}"
        assert bytes(span.parent_span_id) == bytes(rounds[0].span_id)
        assert found["gen_ai.operation.name"] == "chat"
        assert found["gen_ai.system"] == "simulator"
        assert found["gen_ai.request.model"] == step.model
        assert found["gen_ai.usage.input_tokens"] == step.tokens_in
        assert found["gen_ai.usage.output_tokens"] == step.tokens_out
        assert found["openinference.span.kind"] == "LLM"
        assert found["llm.token_count.total"] == step.tokens_in + step.tokens_out
        assert "llm.input_messages.0.message.content" not in found
        # Links follow the access list: the aggregator reads every proposer.
        linked = {
            attributes(by_id[bytes(link.span_id)])["conductor.step.id"] for link in span.links
        }
        assert linked == set(step.reads)
        assert span.start_time_unix_nano <= span.end_time_unix_nano
        assert root.start_time_unix_nano <= span.start_time_unix_nano
    aggregator = max(steps.values(), key=lambda s: s.index)
    assert len(step_spans[aggregator.pk].links) == aggregator.index >= 2


def test_conductor_calls_and_messages_when_the_setting_allows(
    receiver, project, project_admin, settings
):
    settings.CONDUCTOR_OTEL_CAPTURE_MESSAGES = True
    pool = make_pool(project=project, workers=2, name="Conducted")
    run = execute(pool, project_admin)
    telemetry.flush()
    plan = run.plans.get(round=0)
    [call] = [span for span in receiver.spans if attributes(span).get("conductor.plan.round") == 0]
    found = attributes(call)
    assert call.name == "chat sim/conductor"
    assert found["gen_ai.usage.output_tokens"] == plan.attempts[0]["tokens_out"]
    assert found["llm.input_messages.0.message.role"] == "system"
    assert found["llm.output_messages.0.message.content"] == plan.attempts[0]["raw"]
    [root] = [span for span in receiver.spans if not span.parent_span_id]
    assert attributes(root)["output.value"] == run.answer
    service = {a.key: a.value.string_value for a in receiver.resources[0].attributes}
    assert service["service.name"] == "conductor-studio"


def test_a_slow_or_absent_collector_never_slows_or_fails_a_run(monkeypatch, project, project_admin):
    slow = Receiver()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", slow.endpoint)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "10")
    pool = make_pool(project=project, workers=2)
    try:
        execute(pool, project_admin)  # warms up the run's code paths
        # The test database is SQLite in shared-cache memory, where a reader locks whole tables:
        # let the first export read before the held run writes (a file in WAL mode has no such
        # lock).
        telemetry.flush()
        slow.holding = True  # the collector answers nothing until released
        slow.answered.clear()
        run = execute(pool, project_admin)
        assert run.status == "succeeded"
        assert not slow.answered.is_set()  # the run ended while its collector had not answered
        assert slow.held.wait(10)  # and its trace did go out
        slow.release.set()
    finally:
        slow.release.set()
        telemetry.flush()
        slow.close()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")  # nothing listens
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    assert execute(pool, project_admin).status == "succeeded"
    telemetry.flush()


def test_a_nested_run_continues_its_callers_trace_under_the_calling_step(
    receiver, project, project_admin
):
    pool = make_pool(project=project, workers=2)
    outer = execute(pool, project_admin, strategy="single")
    telemetry.flush()  # see the slow collector's test: one writer or reader at a time here
    inner = execute(pool, project_admin, strategy="single")
    telemetry.flush()
    calling = Step.objects.get(run=outer)
    Run.objects.filter(pk=inner.pk).update(called_from=calling, depth=1)
    receiver.spans.clear()
    telemetry.run_trace_enqueue(run_id=outer.pk)
    telemetry.run_trace_enqueue(run_id=inner.pk)
    telemetry.run_trace_enqueue(run_id=outer.pk)  # exported again: the same spans
    telemetry.flush()

    def step_span(step_id):
        return [s for s in receiver.spans if attributes(s).get("conductor.step.id") == step_id]

    first, again = step_span(calling.pk)
    assert (bytes(first.trace_id), bytes(first.span_id)) == (
        bytes(again.trace_id),
        bytes(again.span_id),
    )
    [inner_root] = [s for s in receiver.spans if attributes(s).get("conductor.run.id") == inner.pk]
    assert bytes(inner_root.trace_id) == bytes(first.trace_id)
    assert bytes(inner_root.parent_span_id) == bytes(first.span_id)
    assert attributes(first)["conductor.step.nested_runs"] == [inner.pk]
