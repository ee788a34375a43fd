"""The local delivery bus: events sent from this process's event loop, straight to the consumers
on the same loop, before the channel layer's copy arrives.

A fast path for consumers in the process that executes the run (the inline backend): the
channel layer copies each event once per consumer and wakes each one through several loop
turns, which on a run watched by a hundred clients delays the first of them by ~15 ms. Local
listeners get the event (and its JSON, encoded once) the moment it is sent. The layer still
delivers every event, so a listener may skip any it cannot take in order.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

logger = logging.getLogger(__name__)

LocalListener = Callable[[dict[str, Any], str], Awaitable[None]]
_local_listeners: dict[int, dict[LocalListener, asyncio.AbstractEventLoop]] = {}


def listen_locally(run_id: int, listener: LocalListener) -> None:
    """Have ``listener(event, json_text)`` called with each event of the run sent from this
    event loop (call it from the loop; undo with ``stop_listening_locally``)."""
    _local_listeners.setdefault(run_id, {})[listener] = asyncio.get_running_loop()


def listening_locally(run_id: int) -> bool:
    """Whether anything in this process listens to the run's events (``listen_locally``): a
    socket does once it has opened, its checks and first reads done."""
    return bool(_local_listeners.get(run_id))


def stop_listening_locally(run_id: int, listener: LocalListener) -> None:
    listeners = _local_listeners.get(run_id)
    if listeners is not None:
        listeners.pop(listener, None)
        if not listeners:
            _local_listeners.pop(run_id, None)


async def deliver_locally(event: dict[str, Any]) -> bool:
    """Hand an event to the run's listeners on the running loop, in the order they joined.
    True if there were any."""
    listeners = _local_listeners.get(event["run"])
    if not listeners:
        return False
    loop = asyncio.get_running_loop()
    text = json.dumps(event)
    for listener, listener_loop in list(listeners.items()):
        if listener_loop is not loop:
            continue  # another loop's consumer: the channel layer reaches it
        try:
            await listener(event, text)
        except Exception:  # one broken socket must not stop the others
            logger.debug("local listener of run %s failed", event["run"], exc_info=True)
            stop_listening_locally(event["run"], listener)
    return True
