"""What the API's views take, shared by them: request bodies that refuse fields they do not
declare, the runs list's filters, the choices a run may use."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.request import Request

from orchestrator import selectors, verdicts
from orchestrator.models import Run
from webui.api.serializers import WholeNumberField
from webui.converters import MAX_ID

CHOICES = selectors.run_choices()


class InputSerializer(serializers.Serializer):
    """A request body, or an object inside one: a key it does not declare is a 400 naming it
    (so a misspelt option is never run with the default), with the errors of the fields it
    declares. Every serializer of a request body derives from it; those of query parameters do
    not (a query also carries ``page``, ``page_size``, ``format``)."""

    def to_internal_value(self, data: Any) -> Any:
        unknown: dict[str, list[str]] = {}
        if isinstance(data, Mapping):
            known = [name for name, field in self.fields.items() if not field.read_only]
            takes = ", ".join(known) if known else "nothing"
            unknown = {
                str(name): [f"Unknown field (this takes {takes})."]
                for name in data
                if name not in known
            }
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as error:
            if unknown and isinstance(error.detail, dict):
                raise serializers.ValidationError({**error.detail, **unknown}) from error
            raise
        if unknown:
            raise serializers.ValidationError(unknown)
        return value


class NoInputSerializer(InputSerializer):
    """The body of an operation that takes none: empty, or an empty object."""


def refuse_body(request: Request) -> None:
    """For an operation that takes no body: any field sent is a 400 naming it."""
    if request.data:
        NoInputSerializer(data=request.data).is_valid(raise_exception=True)


_SLUG = re.compile(r"[-a-zA-Z0-9_]{1,100}")


@extend_schema_field(
    {
        "oneOf": [
            {"type": "integer", "minimum": 1, "maximum": MAX_ID},
            {"type": "string", "pattern": r"^[-a-zA-Z0-9_]{1,100}$"},
        ],
        "description": "A project, by its id or its slug.",
    }
)
class ProjectField(serializers.Field):
    """A project named by its id (a number) or its slug (a string); ``lookups.project_or_400``
    finds it among the user's."""

    default_error_messages = {"invalid": "Name a project by its id or its slug."}

    def to_internal_value(self, data: Any) -> int | str:
        if isinstance(data, int) and not isinstance(data, bool) and 1 <= data <= MAX_ID:
            return data
        if isinstance(data, str) and _SLUG.fullmatch(data):
            return data
        self.fail("invalid")

    def to_representation(self, value: Any) -> Any:
        return value


class RunFilterSerializer(serializers.Serializer):
    """The runs list's filters (``GET /api/runs/``), which batches, the review queue, the list's
    changes and the training export take too."""

    status = serializers.ChoiceField(choices=Run.Status.choices, required=False)
    pool = WholeNumberField(required=False, min_value=1, max_value=MAX_ID)
    strategy = serializers.ChoiceField(choices=CHOICES.strategies, required=False)
    worker = serializers.CharField(
        required=False,
        max_length=100,
        help_text="Text in the name or model string of a worker used by any step "
        "(case-insensitive).",
    )
    verdict = serializers.ChoiceField(
        choices=verdicts.VERDICTS,
        required=False,
        help_text="right, wrong, unscored, failed, cancelled or pending.",
    )
    created_after = serializers.DateTimeField(required=False)
    created_before = serializers.DateTimeField(required=False)
    score_min = serializers.FloatField(required=False)
    score_max = serializers.FloatField(required=False)
    q = serializers.CharField(
        required=False, max_length=200, help_text="Text in the input or the answer."
    )


class RunFilterInputSerializer(InputSerializer, RunFilterSerializer):
    """The runs list's filters as an object in a body (a batch's ``filters``)."""
