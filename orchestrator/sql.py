"""What the database in use can do, for the few writes done in plain SQL on the hot path."""

from __future__ import annotations

from django.db import connection


def can_return() -> bool:
    """Whether UPDATE/INSERT ... RETURNING works here (PostgreSQL; SQLite 3.35 and later)."""
    return connection.vendor == "postgresql" or (
        connection.vendor == "sqlite" and connection.features.can_return_columns_from_insert
    )
