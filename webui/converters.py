"""Path converters: ``<id:name>`` is a row id, a whole number that fits a 64-bit key.

``<int:...>`` accepts any run of digits, and a lookup with a number past the database's integer
range fails inside the driver (a 500: "Python int too large to convert to SQLite INTEGER",
"bigint out of range"). Such a number is no row's id, so the path simply does not match (404).
"""

from __future__ import annotations

from django.urls import register_converter

MAX_ID = 2**63 - 1
"""The largest value of a BigAutoField on SQLite and PostgreSQL alike."""


class IdConverter:
    regex = "[0-9]{1,19}"

    def to_python(self, value: str) -> int:
        number = int(value)
        if number > MAX_ID:
            raise ValueError(f"{value} is past the largest id")
        return number

    def to_url(self, value: int) -> str:
        return str(value)


register_converter(IdConverter, "id")
