"""On PostgreSQL the recorder stores a run's events in one statement with its other writes:
the schema check sees each of them all the same."""

from __future__ import annotations

import pytest

from tests.orchestrator.test_event_checks import (
    test_a_cancel_and_a_comment_are_checked_too,  # noqa: F401
    test_every_event_an_execution_stores_is_checked,  # noqa: F401
)

pytestmark = pytest.mark.production
