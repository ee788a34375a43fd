"""API clients logged in as each role."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient


def client_for(user) -> APIClient:
    client = APIClient()
    if user is not None:
        client.force_authenticate(user)
    return client


@pytest.fixture
def api_as():
    return client_for
