"""Pages laid out for the window they are in: four runs compared in a 1,440 px window with no
sideways scrolling, and the runs list at 1024 px and 390 px with every run's figures in reach
without scrolling sideways."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.browser

QUESTIONS = (
    "What is 17 * 23?",
    "What is 6 times 7?",
    "Name the capital of France.",
    "What is 2+2?",
)


@pytest.fixture
def four_runs(make_run) -> list[int]:
    runs = [
        make_run(question, strategy)
        for question, strategy in zip(
            QUESTIONS, ("conductor", "single", "reflection", "moa"), strict=True
        )
    ]
    for run in runs:
        make_run.wait(run)
    return runs


def page_overflow(page) -> int:
    """How many pixels the page is wider than its window (0: no sideways scrolling)."""
    return page.evaluate("document.documentElement.scrollWidth - window.innerWidth")


def test_four_runs_compared_fit_a_1440_window(browser_page, four_runs):
    page = browser_page
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"/compare/?runs={','.join(map(str, four_runs))}")
    page.wait_for_selector("#compare-page[data-state=ready]")

    assert page_overflow(page) == 0
    # The outcome table is read without scrolling it either.
    assert (
        page.evaluate(
            "(() => { const w = document.querySelector('#compare-outcome').closest('.table-wrap');"
            " return w.scrollWidth - w.clientWidth; })()"
        )
        == 0
    )
    tops = page.eval_on_selector_all(
        ".compare-graph-card",
        "cards => cards.map((c) => Math.round(c.getBoundingClientRect().top))",
    )
    assert len(tops) == 4 and len(set(tops)) == 1  # side by side, one row
    # Every aligned row is shown: no button offers to show them all.
    assert page.locator("#compare-steps tbody tr").count() == 5
    assert not page.is_visible("#compare-steps-more")


def test_the_runs_list_at_1024_px_folds_its_figures_into_the_row(browser_page, four_runs):
    page = browser_page
    page.set_viewport_size({"width": 1024, "height": 768})
    page.goto("/")
    row = page.locator(f'#runs-table tr[data-run-id="{four_runs[-1]}"]')

    frame = "(() => { const w = document.querySelector('#runs-table').closest('.table-wrap');"
    assert page.evaluate(f"{frame} return w.scrollWidth - w.clientWidth; }})()") == 0
    assert page_overflow(page) == 0
    # Cost, steps, duration and when it was made: in the row, on screen.
    facts = row.locator(".row-facts")
    assert facts.is_visible()
    text = facts.inner_text()
    assert "5 steps" in text and "$0.00" in text and " s" in text and " by admin" in text
    box = facts.bounding_box()
    assert box and box["x"] + box["width"] <= 1024
    assert row.locator("td.run-input").is_visible() and row.locator(".verdict").is_visible()


def test_the_runs_list_at_390_px_is_a_list_of_cards(browser_page, four_runs):
    page = browser_page
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto("/")
    row = page.locator(f'#runs-table tr[data-run-id="{four_runs[-1]}"]')

    assert page_overflow(page) == 0
    for part in ("a.row-link", ".verdict", "td.run-input", ".row-facts", "td.run-answer-cell"):
        box = row.locator(part).first.bounding_box()
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= 390, part
    facts = row.locator(".row-facts").inner_text()
    assert "moa · Offline demo (simulated)" in facts and "5 steps" in facts
