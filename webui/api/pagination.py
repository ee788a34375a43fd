"""Pagination without a COUNT: a page of a large table costs one indexed slice."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import BasePagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param

MAX_PAGE = 100_000
"""The highest page number a list accepts (pages and the API alike): a larger one would ask the
database for an offset past its integer range (a 500), and no one pages that far."""


class PagePagination(BasePagination):
    """``?page=N`` (from 1, at most MAX_PAGE) and ``?page_size=M`` (at most MAX_PAGE_SIZE).

    Fetches one row more than the page to know whether a next page exists, instead of counting
    every matching row (which costs a scan of the filtered table).
    """

    PAGE_SIZE = 50
    MAX_PAGE_SIZE = 200

    def paginate_queryset(self, queryset: QuerySet, request: Request, view: Any = None) -> list:
        self.request = request
        self.page = self._positive_int(request, "page", 1, maximum=MAX_PAGE, refuse_above=True)
        self.page_size = self._positive_int(
            request, "page_size", self.PAGE_SIZE, maximum=self.MAX_PAGE_SIZE, refuse_above=True
        )
        start = (self.page - 1) * self.page_size
        rows = list(queryset[start : start + self.page_size + 1])
        self.has_next = len(rows) > self.page_size
        return rows[: self.page_size]

    def _positive_int(
        self, request: Request, name: str, default: int, *, maximum: int, refuse_above: bool = False
    ) -> int:
        """The parameter ``name`` as a whole number from 1; above ``maximum`` it is refused
        (``refuse_above``) or lowered to it."""
        raw = request.query_params.get(name)
        if raw in (None, ""):
            return default
        # isdigit() alone accepts "²", which int() refuses: that was a 500, not a 400.
        digits = raw.lstrip("0") if raw.isascii() and raw.isdigit() else ""
        if not digits:
            raise ValidationError({name: ["Give a positive whole number."]})
        # int() of thousands of digits is slow (and refused past 4,300): the length says enough.
        value = int(digits) if len(digits) <= len(str(maximum)) else maximum + 1
        if value > maximum and refuse_above:
            raise ValidationError({name: [f"Give a whole number from 1 to {maximum}."]})
        return min(value, maximum)

    def get_paginated_response(self, data: list) -> Response:
        url = self.request.build_absolute_uri()
        next_url = replace_query_param(url, "page", self.page + 1) if self.has_next else None
        if self.page <= 1:
            previous_url = None
        elif self.page == 2:
            previous_url = remove_query_param(url, "page")
        else:
            previous_url = replace_query_param(url, "page", self.page - 1)
        return Response(
            {"page": self.page, "next": next_url, "previous": previous_url, "results": data}
        )

    def get_paginated_response_schema(self, schema: dict) -> dict:
        return {
            "type": "object",
            "required": ["page", "results"],
            "properties": {
                "page": {"type": "integer", "example": 1},
                "next": {"type": "string", "nullable": True, "format": "uri"},
                "previous": {"type": "string", "nullable": True, "format": "uri"},
                "results": schema,
            },
        }

    def get_schema_operation_parameters(self, view: Any) -> list[dict]:
        return [
            {
                "name": "page",
                "required": False,
                "in": "query",
                "description": f"Page number, from 1 to {MAX_PAGE}.",
                "schema": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE},
            },
            {
                "name": "page_size",
                "required": False,
                "in": "query",
                "description": (
                    f"Runs per page (default {self.PAGE_SIZE}, at most {self.MAX_PAGE_SIZE})."
                ),
                "schema": {"type": "integer", "minimum": 1, "maximum": self.MAX_PAGE_SIZE},
            },
        ]
