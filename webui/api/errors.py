"""How the API reports errors that are not a view's own: bodies over the size limit."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from rest_framework import status
from rest_framework.exceptions import APIException
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler


class RequestTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "request_too_large"


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler, plus a 413 naming the limit for a body larger than
    ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (Django raises RequestDataTooBig, which would be a bare 400
    page)."""
    if isinstance(exc, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        exc = RequestTooLarge(
            f"The request body is larger than the limit of {limit:,} bytes "
            f"(DATA_UPLOAD_MAX_MEMORY_SIZE)."
        )
    return drf_exception_handler(exc, context)
