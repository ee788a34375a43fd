"""The runs list and run page through Django's test client: access, filters, paging, query count."""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from orchestrator.models import Membership, Pool, Project, Run, Step, Worker

pytestmark = pytest.mark.django_db


@pytest.fixture
def project():
    return Project.objects.create(name="Team", slug="team")


@pytest.fixture
def user(project):
    member = get_user_model().objects.create_user("ada", password="pw-for-tests")
    Membership.objects.create(project=project, user=member, role=Membership.Role.REVIEWER)
    return member


@pytest.fixture
def pool(project):
    pool = Pool.objects.create(project=project, name="Offline demo (simulated)")
    Worker.objects.create(pool=pool, name="sim-math", model="sim/math", description="Arithmetic.")
    return pool


@pytest.fixture
def client_in(client, user):
    client.force_login(user)
    return client


def make_run(pool, *, user=None, minutes_ago=0, **fields) -> Run:
    fields.setdefault("input", "What is 2 + 2?")
    run = Run.objects.create(project=pool.project, pool=pool, created_by=user, **fields)
    if minutes_ago:
        Run.objects.filter(pk=run.pk).update(
            created_at=timezone.now() - dt.timedelta(minutes=minutes_ago)
        )
    return run


def shown_run_ids(response) -> list[int]:
    """The run ids of the table rows, in page order (what the user sees)."""
    return [int(i) for i in re.findall(r'data-run-id="(\d+)"', response.content.decode())]


def row_html(html: str, run_id: int) -> str:
    return re.search(rf'<tr data-run-id="{run_id}".*?</tr>', html, re.DOTALL).group(0)


def test_pages_require_login(client, pool):
    run = make_run(pool)
    for url in ("/", f"/runs/{run.pk}/"):
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith("/accounts/login/?next=")


def test_login_page_renders(client):
    response = client.get("/accounts/login/")
    assert response.status_code == 200
    assert b'name="username"' in response.content and b'name="password"' in response.content


def test_list_shows_runs_newest_first_with_their_columns(client_in, pool, user):
    old = make_run(pool, user=user, minutes_ago=10, input="Old question\nsecond line")
    new = make_run(
        pool,
        user=user,
        input="Newest question",
        answer="Four\nbecause 2 + 2 = 4",
        status=Run.Status.SUCCEEDED,
        score=1.0,
        step_count=3,
        tokens_in=1000,
        tokens_out=234,
        cost=0.0125,
        wall_time=2.5,
    )
    response = client_in.get("/")
    assert response.status_code == 200
    assert shown_run_ids(response) == [new.pk, old.pk]
    html = response.content.decode()
    assert "Old question" in html and "second line" not in html
    # The answer itself in the row; the full response one click away (a closed <details>).
    row = row_html(html, new.pk)
    assert '<span class="answer-shown">Four</span>' in row
    assert "because 2 + 2" not in row.split("<summary")[1].split("</summary>")[0]
    assert '<pre class="response-text">Four\nbecause 2 + 2 = 4</pre>' in row
    assert "verdict-right" in row
    assert "1,234" in html  # tokens in + out
    assert "$0.01" in html and "2.5 s" in html and "1.00" in html
    assert "ada" in html
    # The simulator is labelled wherever its pool shows.
    assert "sim-badge" in row_html(html, new.pk)
    assert "simulated pool" in html


def test_a_failed_run_shows_its_error_where_the_answer_would_be(client_in, pool):
    run = make_run(pool, status=Run.Status.FAILED, error="the conductor could not be reached\nmore")
    row = row_html(client_in.get("/").content.decode(), run.pk)
    assert "the conductor could not be reached" in row and "more" not in row


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("status=failed", {"failed"}),
        ("strategy=single", {"single"}),
        ("q=PARIS", {"paris"}),
        ("score_min=0.9", {"scored"}),
        ("score_max=0.4&score_min=0.1", {"half"}),
        ("worker=sim-math", {"worked"}),
        ("status=failed&q=nothing-matches", set()),
    ],
)
def test_filters_narrow_the_list(client_in, pool, user, query, expected):
    runs = {
        "failed": make_run(pool, status=Run.Status.FAILED, input="Broken"),
        "single": make_run(pool, strategy="single", input="Solo"),
        "paris": make_run(pool, input="Capital?", answer="Paris is the capital"),
        "scored": make_run(pool, input="Good", score=1.0),
        "half": make_run(pool, input="Half", score=0.25),
        "worked": make_run(pool, input="Used a worker"),
    }
    Step.objects.create(
        run=runs["worked"],
        round=0,
        index=0,
        instruction="Add",
        worker_index=0,
        worker_name="sim-math",
        model="sim/math",
    )
    response = client_in.get(f"/?{query}")
    assert response.status_code == 200
    assert set(shown_run_ids(response)) == {runs[name].pk for name in expected}


def test_pool_and_date_filters(client_in, pool, project, user):
    other_pool = Pool.objects.create(
        project=project, name="Real models", conductor_model="openai/x"
    )
    in_other = make_run(other_pool, input="Other pool")
    last_week = make_run(pool, input="Last week", minutes_ago=7 * 24 * 60)
    today = make_run(pool, input="Today")

    response = client_in.get(f"/?pool={other_pool.pk}")
    assert shown_run_ids(response) == [in_other.pk]
    assert "sim-badge" not in row_html(response.content.decode(), in_other.pk)
    today_text = timezone.localdate().isoformat()
    assert set(shown_run_ids(client_in.get(f"/?created_after={today_text}"))) == {
        in_other.pk,
        today.pk,
    }
    week_ago = (timezone.localdate() - dt.timedelta(days=7)).isoformat()
    assert shown_run_ids(client_in.get(f"/?created_before={week_ago}")) == [last_week.pk]


def test_failed_quick_filter_link_keeps_other_filters(client_in, pool):
    make_run(pool)
    html = client_in.get("/?strategy=single&page=2").content.decode()
    link = re.search(r'<a href="([^"]*)" id="quick-failed"', html).group(1).replace("&amp;", "&")
    assert "status=failed" in link and "strategy=single" in link and "page=" not in link


def test_invalid_filter_is_reported_and_ignored(client_in, pool):
    run = make_run(pool)
    response = client_in.get("/?score_min=lots")
    assert response.status_code == 200
    assert shown_run_ids(response) == [run.pk]
    assert "Score ≥: Enter a number." in response.content.decode()


def test_pages_follow_the_filter(client_in, pool):
    failed = [
        make_run(pool, status=Run.Status.FAILED, input=f"failed {i}", minutes_ago=i)
        for i in range(55)
    ]
    make_run(pool, status=Run.Status.SUCCEEDED, input="fine")

    first = client_in.get("/?status=failed")
    assert shown_run_ids(first) == [r.pk for r in failed[:50]]
    next_link = re.search(r'href="([^"]*)" rel="next"', first.content.decode()).group(1)
    next_link = next_link.replace("&amp;", "&")
    assert "status=failed" in next_link and "page=2" in next_link

    second = client_in.get("/" + next_link if next_link.startswith("?") else next_link)
    assert shown_run_ids(second) == [r.pk for r in failed[50:]]
    assert 'rel="next"' not in second.content.decode()
    assert 'rel="prev"' in second.content.decode()


def test_other_projects_stay_hidden(client_in, pool, user):
    mine = make_run(pool, input="Mine")
    stranger_project = Project.objects.create(name="Elsewhere", slug="elsewhere")
    stranger_pool = Pool.objects.create(project=stranger_project, name="Their pool")
    theirs = make_run(stranger_pool, input="Theirs")

    response = client_in.get("/")
    assert shown_run_ids(response) == [mine.pk]
    assert "Their pool" not in response.content.decode()
    assert client_in.get(f"/runs/{theirs.pk}/").status_code == 404
    assert client_in.get("/runs/999999/").status_code == 404


def test_admin_link_is_for_staff_only(client_in, user):
    assert 'href="/admin/"' not in client_in.get("/").content.decode()
    user.is_staff = True
    user.save(update_fields=["is_staff"])
    assert 'href="/admin/"' in client_in.get("/").content.decode()


def test_viewers_get_no_new_run_form(client_in, pool, user):
    assert 'id="new-run"' in client_in.get("/").content.decode()
    Membership.objects.filter(user=user).update(role=Membership.Role.VIEWER)
    html = client_in.get("/").content.decode()
    assert 'id="new-run"' not in html and 'id="new-run-unavailable"' in html


def test_members_of_two_projects_see_both_and_can_narrow_to_one(client_in, pool, user):
    second = Project.objects.create(name="Second", slug="second")
    Membership.objects.create(project=second, user=user, role=Membership.Role.VIEWER)
    second_pool = Pool.objects.create(project=second, name="Second pool")
    first_run = make_run(pool, input="In the first project", minutes_ago=1)
    second_run = make_run(second_pool, input="In the second project")

    assert shown_run_ids(client_in.get("/")) == [second_run.pk, first_run.pk]
    assert shown_run_ids(client_in.get(f"/?project={second.pk}")) == [second_run.pk]
    assert shown_run_ids(client_in.get(f"/?project={pool.project_id}")) == [first_run.pk]


def test_list_costs_the_same_queries_for_5_or_50_runs(client_in, pool, user):
    def count_queries() -> int:
        with CaptureQueriesContext(connection) as queries:
            response = client_in.get("/")
        assert response.status_code == 200
        return len(queries)

    for i in range(5):
        make_run(pool, user=user, input=f"q{i}", status=Run.Status.FAILED, error="e")
    with_5 = count_queries()
    for i in range(45):
        make_run(pool, user=user, input=f"q{i + 5}", status=Run.Status.FAILED, error="e")
    with_50 = count_queries()
    assert with_50 == with_5
    assert with_5 <= 10


def test_run_page_renders_the_snapshot(client_in, pool):
    run = make_run(pool, input="Shown on its page")
    response = client_in.get(f"/runs/{run.pk}/")
    assert response.status_code == 200
    assert "runs/detail.html" in [t.name for t in response.templates]
    assert response.context["ws_path"] == f"/ws/runs/{run.pk}/"
    state = response.context["page_state"]
    assert state["state"]["run"]["id"] == run.pk
    assert "Shown on its page" in response.content.decode()


def test_run_page_embeds_one_state_with_its_seq_and_nothing_to_fetch_again(client_in, pool):
    run = make_run(pool, status=Run.Status.RUNNING)
    Run.objects.filter(pk=run.pk).update(last_seq=3)
    html = client_in.get(f"/runs/{run.pk}/").content.decode()
    blocks = re.findall(
        r'<script id="run-state" type="application/json">(.*?)</script>', html, re.DOTALL
    )
    assert len(blocks) == 1
    state = json.loads(blocks[0])
    # The page's socket asks for what came after this seq; the graph is already laid out.
    assert state["seq"] == 3
    assert state["state"]["run"]["id"] == run.pk
    assert set(state["graph"]) >= {"nodes", "edges", "groups"}
    # No second copy to load: no preload of the graph API, no other snapshot block.
    assert f"/api/runs/{run.pk}/graph/" not in html
    assert 'id="run-snapshot"' not in html


def test_run_page_offers_cancel_only_to_who_may_cancel_and_names_every_step_status(
    client_in, pool, user
):
    run = make_run(pool, status=Run.Status.RUNNING)
    html = client_in.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="run-cancel"' in html and f'action="/api/runs/{run.pk}/cancel/"' in html
    # The legend and the page's scripts take the statuses from the server.
    legend = re.search(r'<div id="graph-legend".*?</ul>', html, re.S).group(0)
    for status in Step.Status:
        assert f"status-{status}" in legend
    assert '"step_finished": ["succeeded", "failed", "cancelled", "skipped"]' in html

    Membership.objects.filter(user=user).update(role=Membership.Role.VIEWER)
    assert 'id="run-cancel"' not in client_in.get(f"/runs/{run.pk}/").content.decode()
