"""Runs started at the same time on the embedded server (SQLite, inline) all finish.

Each inline run writes from a database thread of its own; on SQLite two writers used to
collide with "database is locked" and leave a run stuck in "planning".
"""

from __future__ import annotations

import uuid


def test_runs_started_together_all_finish(make_run):
    token = uuid.uuid4().hex[:8]
    questions = [
        "What is the capital city of Poland?",
        "What is the chemical symbol for gold?",
        "What is the capital city of Japan?",
        "What is the chemical symbol for iron?",
    ]
    run_ids = [
        make_run(f"{question} ({token}-{n})", strategy=strategy)
        for n, question in enumerate(questions)
        for strategy in ("conductor", "moa")
    ]

    statuses = {run_id: make_run.wait(run_id)["status"] for run_id in run_ids}

    assert statuses == dict.fromkeys(run_ids, "succeeded")
