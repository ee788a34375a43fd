"""Every page is sent with a Content-Security-Policy, and none needs inline script or style."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from django.urls import reverse

from tests.factories import make_run

pytestmark = pytest.mark.django_db

POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self' ws: wss:; object-src 'none'; base-uri 'self'; frame-ancestors 'none'"
)
DATA_SCRIPT_TYPES = {"application/json", "application/ld+json"}


class InlineCode(HTMLParser):
    """Collects what a policy without 'unsafe-inline' would block: inline scripts, <style>
    elements, style="" attributes and on...="" handlers."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = dict(attrs)
        if tag == "script" and "src" not in names and names.get("type") not in DATA_SCRIPT_TYPES:
            self.found.append(f"inline <script> at line {self.getpos()[0]}")
        if tag == "style":
            self.found.append(f"<style> at line {self.getpos()[0]}")
        for name, _ in attrs:
            if name == "style" or name.startswith("on"):
                self.found.append(f'<{tag} {name}="..."> at line {self.getpos()[0]}')


def inline_code(html: str) -> list[str]:
    parser = InlineCode()
    parser.feed(html)
    return parser.found


def policy_of(response) -> dict[str, str]:
    directives = [d.strip() for d in response["Content-Security-Policy"].split(";")]
    return {d.split(" ", 1)[0]: d for d in directives if d}


def test_the_policy_allows_nothing_inline_and_nothing_from_elsewhere(client):
    response = client.get(reverse("login"))
    assert policy_of(response) == {
        d.split(" ", 1)[0]: d for d in (x.strip() for x in POLICY.split(";"))
    }


def test_every_page_has_the_policy_and_no_inline_code(client, sim_pool, superuser):
    run = make_run(pool=sim_pool)
    pages = [reverse("login")]
    client.force_login(superuser)
    pages += [
        reverse("runs"),
        reverse("run-detail", args=[run.pk]),
        reverse("admin:index"),
        reverse("admin:orchestrator_pool_change", args=[sim_pool.pk]),
        reverse("admin:orchestrator_run_changelist"),
    ]
    for page in pages:
        response = client.get(page)
        assert response.status_code == 200, page
        assert policy_of(response)["script-src"] == "script-src 'self'", page
        assert policy_of(response)["style-src"] == "style-src 'self'", page
        assert "unsafe-inline" not in response["Content-Security-Policy"]
        assert inline_code(response.content.decode()) == [], page


def test_the_lockout_page_has_no_inline_code_either(client, settings):
    settings.AXES_FAILURE_LIMIT = 1
    response = client.post(reverse("login"), {"username": "nobody", "password": "wrong"})
    assert response.status_code == 429
    assert inline_code(response.content.decode()) == []
