"""Fixture: one /v1 server for the session (see ``tests.webui.openai.v1server``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.webui.openai.v1server import V1Server, start_v1_server


@pytest.fixture(scope="session")
def v1(tmp_path_factory) -> V1Server:
    made = start_v1_server(Path(tmp_path_factory.mktemp("v1-server")))
    yield made
    made.server.stop()
