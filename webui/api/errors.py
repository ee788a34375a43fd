"""How the API reports errors, for every view in one place: a service's ValidationError as a 400
keyed by field, invalid input flattened to one level of keys, bodies over the size limit."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import status
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

# The key of an error about the body as a whole (DRF's own name for it).
NON_FIELD = "non_field_errors"


class RequestTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "request_too_large"


def flat_errors(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """Errors keyed by one level of names, as the services name fields and the pages look them
    up: a subfield joined with a dot (``override.pattern``), an entry of a list by its index in
    brackets (``edits[0].step``); an error about a nested object as a whole takes its name.
    Entries without an error are left out."""
    if isinstance(detail, dict):
        flat: dict[str, list[str]] = {}
        for key, value in detail.items():
            if isinstance(key, int):
                name = f"{prefix}[{key}]"
            elif key == NON_FIELD and prefix:  # about the nested object as a whole
                name = prefix
            else:
                name = f"{prefix}.{key}" if prefix else str(key)
            flat.update(flat_errors(value, name))
        return flat
    if isinstance(detail, list) and all(isinstance(item, str) for item in detail):
        return {prefix or NON_FIELD: [str(item) for item in detail]} if detail else {}
    if isinstance(detail, list):
        flat = {}
        for position, item in enumerate(detail):
            flat.update(flat_errors(item, f"{prefix}[{position}]"))
        return flat
    return {prefix or NON_FIELD: [str(detail)]}


def from_django(error: DjangoValidationError) -> ValidationError:
    """A service's ValidationError as DRF's, keyed by the fields it names (``non_field_errors``
    when it names none)."""
    if hasattr(error, "error_dict"):
        detail: dict[str, list[str]] = error.message_dict
    else:
        detail = {NON_FIELD: error.messages}
    return ValidationError(detail)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler (which also turns Django's Http404 and PermissionDenied into 404 and 403
    with their message), and:

    - a service's ``django.core.exceptions.ValidationError`` is a 400 keyed by field, so no view
      catches it;
    - a 400's errors are flat (``flat_errors``), however deeply the input nests;
    - a body larger than ``DATA_UPLOAD_MAX_MEMORY_SIZE`` is a 413 naming the limit (Django raises
      RequestDataTooBig, which would be a bare 400 page)."""
    if isinstance(exc, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        exc = RequestTooLarge(
            f"The request body is larger than the limit of {limit:,} bytes "
            f"(DATA_UPLOAD_MAX_MEMORY_SIZE)."
        )
    elif isinstance(exc, DjangoValidationError):
        exc = from_django(exc)
    if isinstance(exc, ValidationError) and isinstance(exc.detail, dict | list):
        exc.detail = flat_errors(exc.detail)
    return drf_exception_handler(exc, context)
