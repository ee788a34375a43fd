"""A real OpenAI-compatible HTTP server on 127.0.0.1 for tests outside the provider tests
(connection tests, the pools page, the secret test): the same handler as
``tests/orchestrator/providers/test_litellm_client.py``, whose model name picks the behaviour."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import ThreadingHTTPServer

from tests.orchestrator.providers.test_litellm_client import KEY_ENV, SECRET, FakeOpenAI

__all__ = ["KEY_ENV", "SECRET", "FakeOpenAI", "running_openai_server"]


@contextmanager
def running_openai_server(host: str = "127.0.0.1") -> Iterator[str]:
    """Serve FakeOpenAI on a free port while the block runs; yields its API base (``.../v1``)."""
    httpd = ThreadingHTTPServer((host, 0), FakeOpenAI)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    FakeOpenAI.reset()
    try:
        yield f"http://{host}:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()
