"""Browser-test fixtures: a real server in a subprocess, headless Chromium, a logged-in page.

Every test here drives Debian's Chromium through Playwright. Without the browser or the package
they are skipped with the reason, unless CONDUCTOR_REQUIRE_BROWSER=1 (CI), which makes that a
failure. The server runs on its own SQLite file, not the pytest-django test database: reach its
data through the API (``make_run``) or ``live_server.manage(...)`` / ``live_server.shell(...)``.

Fixtures: ``live_server`` (url, db_path, manage(), shell(), restart()), ``live_server_url``,
``admin_credentials``, ``browser``, ``browser_page`` (logged in as admin), ``make_run``, and
``slow_server`` / ``slow_page`` (workers that take about a second a step).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.server import (
    CHROMIUM_ARGS,
    CHROMIUM_PATH,
    LiveServer,
    RunMaker,
    browser_missing_reason,
    log_in,
    start_live_server,
)
from tests.availability import unavailable

BROWSER_DIR = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    # Every test in this directory is a browser test, so `-m "not browser"` leaves them out.
    for item in items:
        if BROWSER_DIR in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.browser)


@pytest.fixture(autouse=True, scope="session")
def _browser_available():
    reason = browser_missing_reason()
    if reason is not None:
        unavailable(f"browser tests skipped: {reason}", required_by="CONDUCTOR_REQUIRE_BROWSER")


@pytest.fixture(autouse=True)
def _live_server_helper():
    """Turn off pytest-django's helper for its own ``live_server``: it would set up the test
    database for every test that names ``live_server``, and ours lives in another process."""
    yield


@pytest.fixture(scope="session")
def live_server(tmp_path_factory, _browser_available) -> LiveServer:
    """A migrated, seeded Daphne server with inline execution, stopped at the end of the session.

    This replaces pytest-django's ``live_server`` in this directory: it is a separate process, so
    websockets and inline runs behave as in ``make demo``.
    """
    server = start_live_server(tmp_path_factory.mktemp("live-server"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def live_server_url(live_server: LiveServer) -> str:
    return live_server.url


@pytest.fixture(scope="session")
def admin_credentials(live_server: LiveServer) -> tuple[str, str]:
    return live_server.admin_username, live_server.admin_password


@pytest.fixture(scope="module")
def browser(_browser_available):
    """Chromium for one test module. Playwright's sync API keeps an event loop marked running in
    this thread while it is started, which Django then takes for an async context; stopping it
    after each module means tests collected after the browser tests run in a normal thread."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM_PATH, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def browser_page(browser, live_server: LiveServer, live_server_url):
    """A page in a fresh browser context, logged in as the demo admin through the login form."""
    context = browser.new_context(base_url=live_server_url, viewport={"width": 1400, "height": 900})
    context.set_default_timeout(15_000)
    page = context.new_page()
    log_in(page, live_server)
    yield page
    context.close()


@pytest.fixture(scope="module")
def slow_server(tmp_path_factory, _browser_available) -> LiveServer:
    """A server whose simulated workers answer in about a second: runs last long enough to watch
    (and to cancel). One per test module that uses it."""
    server = start_live_server(
        tmp_path_factory.mktemp("slow-server"), extra_env={"CONDUCTOR_SIM_LATENCY_SCALE": "1"}
    )
    yield server
    server.stop()


@pytest.fixture
def slow_page(browser, slow_server: LiveServer):
    """A logged-in page on ``slow_server``."""
    context = browser.new_context(base_url=slow_server.url, viewport={"width": 1400, "height": 900})
    context.set_default_timeout(20_000)
    page = context.new_page()
    log_in(page, slow_server)
    yield page
    context.close()


@pytest.fixture
def make_run(browser_page, live_server: LiveServer) -> RunMaker:
    """``make_run(input, strategy="conductor", pool=None) -> run id``, created through the API.

    ``pool=None`` means the simulated demo pool. ``make_run.wait(run_id)`` polls until it ends.
    """
    return RunMaker(browser_page, live_server)
