"""The local delivery bus: events sent from this process's event loop, straight to the consumers
on the same loop, before the channel layer's copy arrives.

A fast path for consumers in the process that executes the run (the inline backend): the
channel layer copies each event once per consumer and wakes each one through several loop
turns, which on a run watched by a hundred clients delays the first of them by ~15 ms. Local
listeners get the event (and its JSON, encoded once) the moment it is sent. The layer still
delivers every event, so a listener may skip any it cannot take in order.

It also knows which runs this process executes (``send_through``): events another thread stores
for such a run (a cancel, a review) are handed to the execution's one sender, behind what it has
committed and not sent yet, so that every event of the run leaves this process in seq order.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any

logger = logging.getLogger(__name__)

LocalListener = Callable[[dict[str, Any], str], Awaitable[None]]
_local_listeners: dict[int, dict[LocalListener, asyncio.AbstractEventLoop]] = {}

# The sender of each run executing in this process: takes committed events, from any thread.
RunSender = Callable[[list[dict[str, Any]]], None]
_run_senders: dict[int, RunSender] = {}
_run_senders_lock = threading.Lock()


def send_through(run_id: int, sender: RunSender | None) -> None:
    """Have the run's committed events that others store handed to ``sender`` (from the thread
    that committed them) while this process executes the run; None when it stops."""
    with _run_senders_lock:
        if sender is None:
            _run_senders.pop(run_id, None)
        else:
            _run_senders[run_id] = sender


def run_sender(run_id: int) -> RunSender | None:
    """The sender of the run's execution in this process (``send_through``), if any."""
    with _run_senders_lock:
        return _run_senders.get(run_id)


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
