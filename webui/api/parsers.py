"""Request bodies the API accepts: JSON, checked for depth before it is decoded.

Python's json decoder recurses once per nesting level, so a body nested a few thousand levels
deep raises RecursionError (a 500) instead of a parse error, and one nested a few hundred levels
deep survives parsing only to break whatever walks it next. No API body needs more than a few
levels, so the nesting is measured on the raw text first and a deeper body is refused with a
400 naming the top-level field it is in. The body's size is bounded before it reaches a parser
(``DATA_UPLOAD_MAX_MEMORY_SIZE``; see ``webui.api.errors``).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.parsers import JSONParser

MAX_JSON_DEPTH = 20
"""The deepest nesting of arrays and objects a JSON body may have."""

# A string (with its escapes; followed by ":" when it is an object key) or a bracket. Strings
# are matched whole so that brackets inside them are not counted.
_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"(\s*:)?|[\[\]{}]', re.DOTALL)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
BODY = "non_field_errors"
"""The error key for a problem with the body as a whole (DRF's key for errors of no field)."""


class BoundedJSONParser(JSONParser):
    """JSONParser that refuses, with a 400 naming the field, bodies nested deeper than
    MAX_JSON_DEPTH and strings that are not valid Unicode (lone surrogates, which no database
    stores); and, with a 400, numbers too large for a float (``1e999``) and NaN/Infinity."""

    def parse(self, stream, media_type=None, parser_context=None) -> Any:
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = stream.read().decode(encoding)
        except UnicodeDecodeError as error:
            raise ParseError(f"JSON parse error - the body is not valid {encoding}.") from error
        check_json_depth(text)
        try:
            data = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
        except (ValueError, RecursionError) as error:
            raise ParseError(f"JSON parse error - {error}") from error
        if _SURROGATE_ESCAPE.search(text):
            _check_unicode(data, field=BODY)
        return data


def check_json_depth(text: str, *, limit: int = MAX_JSON_DEPTH) -> None:
    """Raise ValidationError, keyed by the top-level field it is in, if the JSON ``text`` nests
    arrays and objects deeper than ``limit``."""
    field = too_deep_in(text, limit=limit)
    if field is not None:
        raise ValidationError({field: [f"Nested deeper than {limit} levels."]})


def too_deep_in(text: str, *, limit: int = MAX_JSON_DEPTH) -> str | None:
    """The top-level key (BODY when there is none) under which the JSON ``text`` first nests
    arrays and objects deeper than ``limit``; None when it never does. Linear in the length of
    the text, and never recurses."""
    depth = 0
    field = BODY
    for token in _TOKENS.finditer(text):
        first = token.group()[0]
        if first == '"':
            if depth == 1 and token.group(1):
                field = _key(token.group()[: token.start(1) - token.start()])
        elif first in "[{":
            depth += 1
            if depth > limit:
                return field
        else:
            depth -= 1
    return None


def _key(quoted: str) -> str:
    try:
        key = json.loads(quoted)
    except ValueError:
        return BODY
    return key if isinstance(key, str) and _is_unicode(key) else BODY


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_unicode(value: Any, *, field: str) -> None:
    """Raise ValidationError naming ``field`` if any string in ``value`` has a lone surrogate.
    Recursion is bounded by MAX_JSON_DEPTH, checked before."""
    if isinstance(value, str):
        if not _is_unicode(value):
            raise ValidationError({field: ["Contains a lone surrogate (\\ud800-\\udfff)."]})
    elif isinstance(value, dict):
        for key, item in value.items():
            inner = field if field != BODY else (key if _is_unicode(key) else BODY)
            _check_unicode(key, field=inner)
            _check_unicode(item, field=inner)
    elif isinstance(value, list):
        for item in value:
            _check_unicode(item, field=field)


def _refuse_constant(name: str) -> None:
    raise ValueError(f'"{name}" is not a valid JSON value')


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is out of range for a number")
    return value
