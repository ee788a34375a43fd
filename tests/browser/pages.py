"""What a browser test reads off a run page."""

from __future__ import annotations

import json
from pathlib import Path


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


AXE_SOURCE = Path(__file__).resolve().parents[2] / "node_modules" / "axe-core" / "axe.min.js"


def axe_violations(page) -> list[dict]:
    """What axe-core (from npm, devDependencies) finds wrong on the page as it is now: one dict
    per violated rule, with the selectors of its nodes. Evaluated through the debugging
    protocol, as the site's Content-Security-Policy refuses injected scripts."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.evaluate(AXE_SOURCE.read_text(encoding="utf-8") + "\n;true")
    results = page.evaluate(
        "async () => (await axe.run(document, {resultTypes: ['violations']})).violations"
        ".map((v) => ({id: v.id, impact: v.impact, help: v.help,"
        " nodes: v.nodes.map((n) => [n.target.join(' '), n.failureSummary])}))"
    )
    return results
