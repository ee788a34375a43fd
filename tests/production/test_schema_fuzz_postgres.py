"""The Schemathesis run of tests/webui/api/test_schema_fuzz.py, on PostgreSQL."""

from __future__ import annotations

import pytest

from tests.webui.api.test_schema_fuzz import (  # noqa: F401 (fixtures are used by name)
    stored_runs,
    test_every_operation_keeps_to_its_schema,
    wsgi_app,
)

pytestmark = pytest.mark.production
