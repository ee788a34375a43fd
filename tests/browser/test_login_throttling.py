"""Login throttling on the real server (Daphne, async): after the limit, the right password fails."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.browser

USERNAME = "mallory-throttled"
PASSWORD = "the-right-one-31"
LIMIT = 5  # the default of CONDUCTOR_LOGIN_FAILURE_LIMIT


def submit(page, password: str):
    page.goto("/accounts/login/")
    page.fill("#id_username", USERNAME)
    page.fill("#id_password", password)
    with page.expect_navigation() as navigation:
        page.click("button[type=submit]")
    return navigation.value


def test_wrong_passwords_lock_the_account_on_this_address(browser, live_server):
    live_server.shell(
        "from django.contrib.auth import get_user_model\n"
        f"get_user_model().objects.create_user({USERNAME!r}, password={PASSWORD!r})\n"
    )
    context = browser.new_context(base_url=live_server.url)
    page = context.new_page()
    try:
        answers = [submit(page, "wrong-guess").status for _ in range(LIMIT)]
        assert answers[: LIMIT - 1] == [200] * (LIMIT - 1)  # the form again, with its error
        assert answers[-1] == 429

        locked = submit(page, PASSWORD)
        assert locked.status == 429
        assert "Too many attempts" in page.text_content("h1")
        assert not any(c["name"] == "sessionid" for c in context.cookies())
    finally:
        context.close()
        live_server.manage("axes_reset_username", USERNAME)
