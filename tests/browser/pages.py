"""What a browser test reads off a run page."""

from __future__ import annotations

import json


def step_states(page) -> list[tuple[int, str]]:
    """(step id, status) of every item of the step list, in order."""
    return [
        (int(step_id), status)
        for step_id, status in page.eval_on_selector_all(
            "#step-list li", "items => items.map((li) => [li.dataset.stepId, li.dataset.status])"
        )
    ]


def record_frames(page) -> list[dict]:
    """Every websocket message the page receives, parsed."""
    frames: list[dict] = []

    def on_socket(socket):
        socket.on(
            "framereceived",
            lambda payload: (
                frames.append(json.loads(payload)) if isinstance(payload, str) else None
            ),
        )

    page.on("websocket", on_socket)
    return frames
