"""The snapshot a run socket sends first, encoded once per process for all the sockets that open
the same run at the same seq.

Sockets open in crowds on the runs being watched (a page reloaded by many, a dashboard of viewers
reconnecting), and a snapshot is the same for every user who may see the run: reading and
encoding it once per (run, seq) instead of once per socket takes most of the cost of opening a
socket away. The caller checks access first; this module never decides who sees what.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from datetime import datetime

from orchestrator import selectors

# Runs kept (the most recently opened), and the longest text kept: a run of thousands of steps
# is read for each socket, as before, rather than held in every process's memory.
KEEP_RUNS = 32
KEEP_MAX_CHARS = 1_000_000

_lock = threading.Lock()
# run id -> (the run's created_at, the seq the text is current to, the text)
_kept: OrderedDict[int, tuple[datetime, int, str]] = OrderedDict()


def snapshot_text(*, run_id: int, created_at: datetime, seq: int) -> tuple[int, str]:
    """The JSON of the run's snapshot message (``selectors.run_snapshot_message``) current to
    ``seq`` or later, and the seq it is current to. ``seq`` and ``created_at`` are the run's as
    the caller's access check read them: a kept text of an earlier seq is read again, and
    ``created_at`` tells the run from a deleted one that had the same id.

    Synchronous (reads the database when nothing fits); called from any thread."""
    with _lock:
        kept = _kept.get(run_id)
        if kept is not None and kept[0] == created_at and kept[1] >= seq:
            _kept.move_to_end(run_id)
            return kept[1], kept[2]
    message = selectors.run_snapshot_message(run_id=run_id)
    text = json.dumps(message)
    if len(text) <= KEEP_MAX_CHARS:
        with _lock:
            kept = _kept.get(run_id)
            if kept is None or kept[0] != created_at or kept[1] < message["seq"]:
                _kept[run_id] = (created_at, message["seq"], text)
            _kept.move_to_end(run_id)
            while len(_kept) > KEEP_RUNS:
                _kept.popitem(last=False)
    return message["seq"], text


def forget() -> None:
    """Drop every kept text (tests)."""
    with _lock:
        _kept.clear()
