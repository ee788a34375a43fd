"""What a test does when something it needs (a browser, a sandbox, a service) is not here."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def unavailable(problem: str, *, required_by: str) -> NoReturn:
    """Skip, saying ``problem``; or fail when the environment variable ``required_by`` is "1"
    (CI sets it, so there a missing piece is a failure, never a skip)."""
    if os.environ.get(required_by) == "1":
        pytest.fail(f"{required_by}=1 but {problem}", pytrace=False)
    pytest.skip(problem)
