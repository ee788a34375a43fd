"""What an outgoing model call says about the run that makes it.

A worker may be a pool of a Conductor Studio server (``openai/<pool>`` with the server's ``/v1``
as its API base): the call then carries, as headers, how deep the nested run will be (so a pool
that calls itself is stopped at the server's depth limit) and which step makes the call (so the
nested run is linked from it). The values live in context variables that the service executing
a run sets: the depth for the whole run, the step in each step's own task.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Final

DEPTH_HEADER: Final = "X-Conductor-Depth"
STEP_HEADER: Final = "X-Conductor-Step"

nested_depth: ContextVar[int | None] = ContextVar("conductor_nested_depth", default=None)
"""The depth a run started by a call from here would have (the calling run's depth + 1)."""

calling_step: ContextVar[int | None] = ContextVar("conductor_calling_step", default=None)
"""The id of the stored step whose worker is being called (None for the conductor's calls)."""


def outgoing_headers() -> dict[str, str]:
    """The headers for a call to an OpenAI-compatible server, from the current context."""
    headers: dict[str, str] = {}
    depth = nested_depth.get()
    if depth is not None:
        headers[DEPTH_HEADER] = str(depth)
    step = calling_step.get()
    if step is not None:
        headers[STEP_HEADER] = str(step)
    return headers
