"""The error responses every operation can give, added to the OpenAPI schema in one place.

DRF answers errors the same way for every view: ``{"detail": "..."}`` (403, 404, 413, 415)
or, for invalid input, an object keyed by field (400). Writing these on each view would repeat
them and drift; this hook documents them for every operation from what the operation takes
(path parameters, query parameters, a body), so the schema lists every status a client can get.
It also says that an empty optional query parameter counts as absent, as DRF reads it, and
that a request body takes no field it does not declare (``webui.api.inputs.InputSerializer``).
"""

from __future__ import annotations

from typing import Any

DETAIL = "ErrorDetail"
INVALID = "InvalidInput"

_COMPONENTS = {
    DETAIL: {
        "type": "object",
        "description": "Why the request was refused.",
        "properties": {"detail": {"type": "string"}},
        "required": ["detail"],
    },
    INVALID: {
        "type": "object",
        "description": (
            "What is wrong with the input, keyed by field (non_field_errors: the body as a "
            "whole; detail: a body that is not valid JSON)."
        ),
        # A field's messages; a list or nested field's are keyed by index or subfield.
        "additionalProperties": {
            "anyOf": [
                {"type": "string"},
                {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "object"}]}},
                {"type": "object"},
            ]
        },
    },
}

_METHODS = ("get", "put", "post", "patch", "delete")


def _response(description: str, component: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{component}"}}},
    }


def _closed(schema: dict[str, Any], components: dict[str, Any], seen: set[str]) -> None:
    """Mark every object of a request body's schema as taking only the properties it lists."""
    reference = schema.get("$ref")
    if reference:
        name = reference.rsplit("/", 1)[-1]
        if name not in seen and name in components:
            seen.add(name)
            _closed(components[name], components, seen)
        return
    if "properties" in schema:
        schema.setdefault("additionalProperties", False)
        for child in schema["properties"].values():
            _closed(child, components, seen)
    for key in ("items",):
        if isinstance(schema.get(key), dict):
            _closed(schema[key], components, seen)
    for key in ("allOf", "oneOf", "anyOf"):
        for child in schema.get(key, []):
            _closed(child, components, seen)


def document_error_responses(result: dict[str, Any], generator, request, public) -> dict:
    """drf-spectacular postprocessing hook: add the error responses each operation can give."""
    result.setdefault("components", {}).setdefault("schemas", {}).update(_COMPONENTS)
    for path_item in result.get("paths", {}).values():
        for method in _METHODS:
            operation = path_item.get(method)
            if operation is None:
                continue
            parameters = operation.get("parameters", [])
            for parameter in parameters:
                # DRF reads an empty optional query parameter (``?pool=``) as an absent one.
                if parameter.get("in") == "query" and not parameter.get("required"):
                    parameter["allowEmptyValue"] = True
            # DRF answers a missing or wrong credential with 403, not 401: the first
            # authentication class (session) sends no WWW-Authenticate challenge.
            errors = {
                "403": _response(
                    "Not authenticated (no session, no valid token), or not allowed.", DETAIL
                ),
            }
            if any(parameter.get("in") == "query" for parameter in parameters):
                errors["400"] = _response("Invalid input.", INVALID)
            if any(parameter.get("in") == "path" for parameter in parameters):
                errors["404"] = _response("No such object among those you can see.", DETAIL)
            if "requestBody" in operation:
                for media in operation["requestBody"].get("content", {}).values():
                    _closed(media.get("schema", {}), result["components"]["schemas"], set())
                errors["400"] = _response("Invalid input.", INVALID)
                errors["413"] = _response("The request body is over the size limit.", DETAIL)
                errors["415"] = _response("The body is not JSON.", DETAIL)
            responses = operation.setdefault("responses", {})
            for code, response in errors.items():
                responses.setdefault(code, response)
    return result
