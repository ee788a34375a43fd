"""Output serializers shared by several API views (runs, steps, plans, totals, pools), and the
input fields they share."""

from __future__ import annotations

import math
import re
import types
import typing

from django.contrib.auth import get_user_model
from django.urls import reverse
from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import ISO_8601, serializers
from rest_framework.settings import api_settings

from orchestrator import selectors, verdicts, wire
from orchestrator.models import Step

# What each kind of output field gives in JSON, as the wire shapes spell it.
_JSON_TYPES = (
    (serializers.BooleanField, bool),
    (serializers.IntegerField, int),
    (serializers.FloatField, float),
    (serializers.DateTimeField, str),
    (serializers.ChoiceField, str),
    (serializers.CharField, str),
    (serializers.ListField, list),
)


def _json_kind(hint) -> type:
    """The JSON type of a shape's type hint (a ``Literal`` is the type of its values)."""
    if typing.get_origin(hint) is typing.Literal:
        return type(typing.get_args(hint)[0])
    return typing.get_origin(hint) or hint


def follows(shape: type):
    """Class decorator: the serializer gives exactly ``shape``'s keys (``orchestrator/wire.py``),
    each of its type and nullable where the shape allows null. Checked at import, so an API
    output cannot drift from the live payload it repeats."""

    def check(serializer: type[serializers.Serializer]) -> type[serializers.Serializer]:
        fields = serializer().get_fields()
        hints = typing.get_type_hints(shape)
        if set(fields) != set(hints):
            raise TypeError(
                f"{serializer.__name__} gives {sorted(fields)}, {shape.__name__} is {sorted(hints)}"
            )
        for name, field in fields.items():
            hint = hints[name]
            if hint is typing.Any:  # any JSON value, null included
                continue
            union = typing.get_origin(hint) in (typing.Union, types.UnionType)
            options = typing.get_args(hint) if union else (hint,)
            kinds = {_json_kind(option) for option in options}
            nullable = type(None) in kinds
            given = next((kind for base, kind in _JSON_TYPES if isinstance(field, base)), None)
            if field.allow_null != nullable or (given is not None and given not in kinds):
                raise TypeError(f"{serializer.__name__}.{name} does not give {hint}")
        return serializer

    return check


class WholeNumberField(serializers.IntegerField):
    """An integer written as one: DRF's IntegerField also takes "1.0", 1.0 and " 1", which the
    schema (type integer) does not admit; this one takes an int or a string of ASCII digits."""

    _DIGITS = re.compile(r"-?[0-9]+")

    def to_internal_value(self, data):
        if isinstance(data, bool) or not (
            isinstance(data, int) or (isinstance(data, str) and self._DIGITS.fullmatch(data))
        ):
            self.fail("invalid")
        return super().to_internal_value(data)


class TextField(serializers.CharField):
    """Text that must arrive as a string: DRF's CharField also turns 0 or 1.5 into "0", "1.5".
    Its length is the length sent, as the schema's maxLength says (DRF counts it after trimming
    whitespace)."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        if self.max_length is not None and len(data) > self.max_length:
            self.fail("max_length", max_length=self.max_length)
        return super().to_internal_value(data)


@follows(wire.Totals)
class TotalsOutputSerializer(serializers.Serializer):
    """Sums over every model call of a run, the conductor's included."""

    tokens_in = serializers.IntegerField()
    tokens_out = serializers.IntegerField()
    cost = serializers.FloatField()
    model_calls = serializers.IntegerField()
    wall_time = serializers.FloatField(allow_null=True)
    step_count = serializers.IntegerField()


class PoolRefOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()


class RunPageUrlMixin(serializers.Serializer):
    """The run's page (absolute when the request is known) and its websocket path."""

    url = serializers.SerializerMethodField()
    ws = serializers.SerializerMethodField()

    def get_url(self, run) -> str:
        path = reverse("run-detail", args=[run.pk])
        request = self.context.get("request")
        return request.build_absolute_uri(path) if request else path

    def get_ws(self, run) -> str:
        return f"/ws/runs/{run.pk}/"


# A run as the runs list reads it (``values()``): what ``RunSummaryOutputSerializer`` writes.
_CREATOR_NAME = f"created_by__{get_user_model().USERNAME_FIELD}"
RUN_SUMMARY_COLUMNS = (
    *("id", "status", "strategy", "pool_id", "pool__name", "input", "answer", "grader"),
    *("score", "error", "tokens_in", "tokens_out", "cost", "model_calls", "wall_time"),
    *("step_count", "created_by_id", _CREATOR_NAME, "created_at", "started_at", "finished_at"),
    "last_seq",
    "fell_back",
)


def _fell_back(run) -> bool:
    return selectors.run_has_fallback(run=run)


def run_summary_row(run) -> dict[str, typing.Any]:
    """A run instance as the row ``values(*RUN_SUMMARY_COLUMNS)`` reads of it (``fell_back``
    read when the instance did not come annotated by ``selectors.run_list``)."""
    fell_back = _fell_back(run)
    return {
        **{
            column: getattr(run, column)
            for column in RUN_SUMMARY_COLUMNS
            if "__" not in column and column != "fell_back"
        },
        "fell_back": fell_back,
        "pool__name": run.pool.name,
        _CREATOR_NAME: run.created_by.get_username() if run.created_by_id else None,
    }


# Writes datetimes as every DateTimeField of the API does (ISO 8601, UTC as "Z").
_DATETIME = serializers.DateTimeField()


def _datetime_writer() -> typing.Callable[[typing.Any], str]:
    """``_DATETIME.to_representation`` for aware datetimes, with the time zone looked up once
    (per run written) instead of once per field."""
    if api_settings.DATETIME_FORMAT != ISO_8601:
        return _DATETIME.to_representation
    zone = _DATETIME.default_timezone()

    def write(value) -> str:
        if zone is None or timezone.is_naive(value):
            return _DATETIME.to_representation(value)
        text = value.astimezone(zone).isoformat()
        return text[:-6] + "Z" if text.endswith("+00:00") else text

    return write


class RunSummaryOutputSerializer(RunPageUrlMixin):
    """A run as lists show it."""

    id = serializers.IntegerField()
    status = serializers.CharField()
    strategy = serializers.CharField()
    pool = PoolRefOutputSerializer()
    input = serializers.CharField()
    answer = serializers.CharField()
    answer_shown = serializers.SerializerMethodField(
        help_text="The answer itself: what the grader reads of the final answer, one line."
    )
    score = serializers.FloatField(allow_null=True)
    verdict = serializers.SerializerMethodField(
        help_text="right, wrong, unscored, failed, cancelled or pending (not finished)."
    )
    error = serializers.CharField()
    totals = TotalsOutputSerializer(source="*")
    created_by = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    last_seq = serializers.IntegerField(help_text="The seq of the run's latest live event.")
    fallback = serializers.SerializerMethodField(
        help_text="True when a round's plan is the pool's plan_fallback, not one the conductor "
        "wrote (its plans say which and why)."
    )

    @extend_schema_field(serializers.BooleanField())
    def get_fallback(self, run) -> bool:
        return bool(_fell_back(run))

    def to_representation(self, run) -> dict[str, typing.Any]:
        """The fields above, written out by hand: the runs list serialises a page of these per
        request, and DRF's field-by-field walk (nested serializers, method fields) costs several
        times this. Subclasses take DRF's way unless they write their own fields by hand too
        (``RunDetailOutputSerializer``); the tests compare the two."""
        if type(self) is not RunSummaryOutputSerializer:
            return self.field_by_field(run)
        return self._summary(run_summary_row(run), _datetime_writer())

    def summaries(
        self, rows: typing.Iterable[dict[str, typing.Any]]
    ) -> list[dict[str, typing.Any]]:
        """Runs read as rows of ``run_summary_columns()`` (``values()``), written as
        ``to_representation`` writes a run: a page of rows costs less to read than a page of
        model instances."""
        when = _datetime_writer()
        return [self._summary(row, when) for row in rows]

    def _summary(self, row: dict[str, typing.Any], when) -> dict[str, typing.Any]:
        run_id = row["id"]
        status, score = row["status"], row["score"]
        return {
            "url": self._run_url(run_id),
            "ws": f"/ws/runs/{run_id}/",
            "id": run_id,
            "status": status,
            "strategy": row["strategy"],
            "pool": {"id": row["pool_id"], "name": row["pool__name"]},
            "input": row["input"],
            "answer": row["answer"],
            "answer_shown": wire.answer_shown(row["answer"], row["grader"]),
            "score": None if score is None else float(score),
            "verdict": verdicts.verdict(status, score),
            "error": row["error"],
            "totals": {
                "tokens_in": row["tokens_in"],
                "tokens_out": row["tokens_out"],
                "cost": float(row["cost"]),
                "model_calls": row["model_calls"],
                "wall_time": None if row["wall_time"] is None else float(row["wall_time"]),
                "step_count": row["step_count"],
            },
            "created_by": row[_CREATOR_NAME] if row["created_by_id"] else None,
            "created_at": when(row["created_at"]),
            "started_at": None if row["started_at"] is None else when(row["started_at"]),
            "finished_at": None if row["finished_at"] is None else when(row["finished_at"]),
            "last_seq": row["last_seq"],
            "fallback": row["fell_back"],
        }

    def _run_url(self, run_id: int) -> str:
        """``get_url``, with the route reversed once per serializer (a list reuses one for
        every row) rather than once per run."""
        template = getattr(self, "_url_template", None)
        if template is None:
            marker = 987654321987
            template = self.get_url(types.SimpleNamespace(pk=marker)).replace(str(marker), "{}")
            self._url_template = template
        return template.format(run_id)

    def field_by_field(self, run) -> dict[str, typing.Any]:
        """DRF's own serialisation of the declared fields (what ``to_representation`` spells
        out by hand; the tests compare the two)."""
        return dict(super().to_representation(run))

    @extend_schema_field(serializers.CharField())
    def get_answer_shown(self, run) -> str:
        return wire.answer_shown(run.answer, run.grader)

    @extend_schema_field(serializers.ChoiceField(choices=verdicts.VERDICTS))
    def get_verdict(self, run) -> str:
        return verdicts.verdict(run.status, run.score)

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_created_by(self, run) -> str | None:
        return run.created_by.get_username() if run.created_by_id else None


@follows(wire.StepAttempt)
class StepAttemptOutputSerializer(serializers.Serializer):
    """One call of a retried step as stored in ``Step.attempt_log``. Defaults as
    ``PlanAttemptOutputSerializer``: stored JSON from the admin may lack keys."""

    attempt = serializers.IntegerField(default=0, help_text="Its number, from 1.")
    offset = serializers.FloatField(
        default=0.0,
        help_text="When the call started, seconds after the step began calling (its waits for a "
        "slot of the worker's concurrency bound included).",
    )
    seconds = serializers.FloatField(default=0.0, help_text="How long the call took.")
    error = serializers.CharField(
        default="", help_text='Why it failed; "" for the one that did not.'
    )
    backoff = serializers.FloatField(default=0.0, help_text="Seconds waited before the next call.")


@follows(wire.Step)
class StepSummaryOutputSerializer(serializers.Serializer):
    """A step without the messages it was sent (``GET /api/steps/{id}/`` has them)."""

    id = serializers.IntegerField()
    round = serializers.IntegerField()
    index = serializers.IntegerField()
    worker = serializers.CharField(source="worker_name")
    worker_index = serializers.IntegerField()
    model = serializers.CharField()
    instruction = serializers.CharField()
    access = serializers.JSONField(help_text='As the plan gave it: "all" or earlier indices.')
    reads = serializers.ListField(child=serializers.IntegerField(), help_text="Step ids it read.")
    status = serializers.ChoiceField(
        choices=Step.Status.choices,
        help_text="cancelled: the run ended while it ran; skipped: it ended before it started. "
        "The error says why.",
    )
    tokens_in = serializers.IntegerField()
    tokens_out = serializers.IntegerField()
    cost = serializers.FloatField()
    latency = serializers.FloatField(allow_null=True, help_text="The call's own seconds.")
    queued = serializers.FloatField(
        help_text="Seconds its calls waited for a slot of the worker's concurrency bound "
        "(apart from latency; the step timeout counts from each call's start)."
    )
    attempts = serializers.IntegerField()
    error = serializers.CharField()
    attempt_log = StepAttemptOutputSerializer(
        many=True, help_text="Every call of the step when one failed (retried); else empty."
    )
    reused_from = serializers.IntegerField(source="reused_from_id", allow_null=True)
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)


class StepWithResponseOutputSerializer(StepSummaryOutputSerializer):
    response = serializers.CharField()


class MessageOutputSerializer(serializers.Serializer):
    role = serializers.CharField()
    content = serializers.CharField()


class NestedRunOutputSerializer(serializers.Serializer):
    """A run that a step's worker started through /v1 (a pool of this server as a worker)."""

    id = serializers.IntegerField()
    status = serializers.CharField()
    url = serializers.SerializerMethodField()

    def get_url(self, run) -> str:
        return reverse("run-detail", args=[run["id"]])


class StepDetailOutputSerializer(StepWithResponseOutputSerializer):
    """One step with exactly what it was sent and what came back."""

    run = serializers.IntegerField(source="run_id")
    messages = MessageOutputSerializer(many=True)
    nested_runs = serializers.SerializerMethodField()

    @extend_schema_field(NestedRunOutputSerializer(many=True))
    def get_nested_runs(self, step) -> list[dict]:
        runs = selectors.step_nested_runs(step=step)
        return NestedRunOutputSerializer(runs, many=True).data


class PlanAttemptOutputSerializer(serializers.Serializer):
    """One conductor call as stored in ``Plan.attempts``.

    Every field has a default (those of ``PlanAttempt``) because the stored JSON may come
    from older rows or the admin and lack keys; a missing key must not turn into a 500.
    """

    raw = serializers.CharField(default="")
    error = serializers.CharField(default="")
    tokens_in = serializers.IntegerField(default=0)
    tokens_out = serializers.IntegerField(default=0)
    cost = serializers.FloatField(default=0.0)
    latency = serializers.FloatField(default=0.0)
    queued = serializers.FloatField(
        default=0.0, help_text="Seconds it waited for a slot of the pool's conductor bound."
    )


class PlanStepOutputSerializer(serializers.Serializer):
    worker = serializers.IntegerField()
    instruction = serializers.CharField()
    access = serializers.JSONField()


class PlanOutputSerializer(serializers.Serializer):
    """How the workflow of one round came to be: the conductor's calls and what it wrote."""

    id = serializers.IntegerField()
    round = serializers.IntegerField()
    strategy = serializers.CharField()
    messages = MessageOutputSerializer(many=True)
    attempts = PlanAttemptOutputSerializer(many=True)
    workflow = PlanStepOutputSerializer(
        many=True,
        allow_null=True,
        help_text="null when no attempt could be used; [] accepts. With a fallback, the "
        "fallback's workflow, not the conductor's.",
    )
    error = serializers.CharField()
    form = serializers.CharField(
        help_text='What the conductor\'s workflow was read from: "lists" (the three Python '
        'lists) or "json"; "" for a fixed strategy or when no attempt could be used.'
    )
    constrained = serializers.CharField(
        help_text="How the conductor's output was held to the plan's JSON schema: openai, "
        'llamacpp, vllm, ollama or simulated; "" in text output.'
    )
    fallback = serializers.CharField(
        help_text='"" when the workflow is the strategy\'s own. "single": the conductor\'s '
        "plan was unusable (error says why) and the pool's first worker answered alone; "
        '"kept": the same in a later round, whose answer before was kept.'
    )
    created_at = serializers.DateTimeField()


class RunDetailOutputSerializer(RunSummaryOutputSerializer):
    """A run with its reference, options, plans and steps (with responses)."""

    strategy_options = serializers.JSONField()
    reference = serializers.CharField()
    grader = serializers.CharField()
    replay_of = serializers.IntegerField(source="replay_of_id", allow_null=True)
    edits = serializers.JSONField(
        help_text="A replay's edits of its source: [{step, round, index, field, before, after, "
        "who, when}] (GET /api/runs/{id}/family/ documents them)."
    )
    called_from = serializers.IntegerField(
        source="called_from_id",
        allow_null=True,
        help_text="The step whose worker started this run through /v1 (recursion), if any.",
    )
    depth = serializers.IntegerField(
        help_text="How many /v1 calls deep the run is (0: a client's)."
    )
    end_user = serializers.CharField(help_text="The `user` a /v1 client sent, if any.")
    plans = PlanOutputSerializer(many=True)
    steps = StepWithResponseOutputSerializer(many=True)

    def to_representation(self, run) -> dict[str, typing.Any]:
        """The fields above written out by hand, as the runs list writes its runs: DRF copies
        every declared field of the run, its plans and its steps for each request before
        writing one. The tests compare the two."""
        if type(self) is not RunDetailOutputSerializer:
            return self.field_by_field(run)
        when = _datetime_writer()
        return {
            **self._summary(run_summary_row(run), when),
            "strategy_options": run.strategy_options,
            "reference": run.reference,
            "grader": run.grader,
            "replay_of": run.replay_of_id,
            "edits": run.edits,
            "called_from": run.called_from_id,
            "depth": run.depth,
            "end_user": run.end_user,
            "plans": [_plan(plan, when) for plan in run.plans.all()],
            "steps": [_step_with_response(step, when) for step in run.steps.all()],
        }


# The hand-written serialisation of the run detail's plans and steps, field by field as the
# serializers above declare them. A stored JSON entry may lack keys (older rows, the admin):
# those with a default take it, as DRF does.


def _kept(entry: typing.Any, key: str, default, convert) -> typing.Any:
    """``entry[key]`` (an attribute for anything but a mapping, as DRF reads), or ``default``."""
    if isinstance(entry, typing.Mapping):
        value = entry.get(key, default)
    else:
        value = getattr(entry, key, default)
    return None if value is None else convert(value)


def _or_none(value, convert) -> typing.Any:
    return None if value is None else convert(value)


def _plan(plan, when) -> dict[str, typing.Any]:
    return {
        "id": plan.pk,
        "round": plan.round,
        "strategy": plan.strategy,
        "messages": _or_none(plan.messages, _messages),
        "attempts": _or_none(plan.attempts, _plan_attempts),
        "workflow": _or_none(plan.workflow, _workflow),
        "error": plan.error,
        "form": plan.form,
        "constrained": plan.constrained,
        "fallback": plan.fallback,
        "created_at": _or_none(plan.created_at, when),
    }


def _messages(messages) -> list[dict[str, typing.Any]]:
    return [
        {"role": _or_none(m["role"], str), "content": _or_none(m["content"], str)} for m in messages
    ]


def _plan_attempts(attempts) -> list[dict[str, typing.Any]]:
    return [
        {
            "raw": _kept(a, "raw", "", str),
            "error": _kept(a, "error", "", str),
            "tokens_in": _kept(a, "tokens_in", 0, int),
            "tokens_out": _kept(a, "tokens_out", 0, int),
            "cost": _kept(a, "cost", 0.0, float),
            "latency": _kept(a, "latency", 0.0, float),
            "queued": _kept(a, "queued", 0.0, float),
        }
        for a in attempts
    ]


def _workflow(workflow) -> list[dict[str, typing.Any]]:
    return [
        {
            "worker": _or_none(w["worker"], int),
            "instruction": _or_none(w["instruction"], str),
            "access": w["access"],
        }
        for w in workflow
    ]


def _step_attempts(attempt_log) -> list[dict[str, typing.Any]]:
    return [
        {
            "attempt": _kept(a, "attempt", 0, int),
            "offset": _kept(a, "offset", 0.0, float),
            "seconds": _kept(a, "seconds", 0.0, float),
            "error": _kept(a, "error", "", str),
            "backoff": _kept(a, "backoff", 0.0, float),
        }
        for a in attempt_log
    ]


def _step_with_response(step, when) -> dict[str, typing.Any]:
    """The live step (``wire.step_data``, its fields in its order), with what the declared
    fields write their own way (numbers, defaults of stored attempts, times), and the response."""
    return {
        **wire.step_data(step),
        "reads": _or_none(step.reads, lambda reads: [_or_none(r, int) for r in reads]),
        "cost": float(step.cost),
        "latency": _or_none(step.latency, float),
        "queued": float(step.queued),
        "attempt_log": _or_none(step.attempt_log, _step_attempts),
        "started_at": _or_none(step.started_at, when),
        "finished_at": _or_none(step.finished_at, when),
        "response": step.response,
    }


class NumberField(serializers.FloatField):
    """A finite JSON number: DRF's FloatField also takes "1.5", true, NaN and Infinity."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int | float) or not math.isfinite(data):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """true or false only: DRF's BooleanField also takes "yes", 1 and "on"."""

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


class TagListField(serializers.ListField):
    """A list of tags, each 1 to ``max_tag_length`` characters of text; errors come flat (one
    message naming the bad entry), not keyed by index, as the schema's 400 says."""

    def __init__(self, *, max_tag_length: int = 50, **kwargs):
        self.max_tag_length = max_tag_length
        super().__init__(child=serializers.CharField(max_length=max_tag_length), **kwargs)

    def to_internal_value(self, data):
        if not isinstance(data, list):
            self.fail("not_a_list", input_type=type(data).__name__)
        tags = []
        for index, tag in enumerate(data):
            if not isinstance(tag, str) or not tag.strip() or len(tag) > self.max_tag_length:
                raise serializers.ValidationError(
                    f"Entry {index}: give a tag of 1 to {self.max_tag_length} characters."
                )
            tags.append(tag.strip())
        if self.max_length is not None and len(tags) > self.max_length:
            self.fail("max_length", max_length=self.max_length)
        return tags
