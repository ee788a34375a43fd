"""Who gets what, everywhere: every URL pattern of the site (pages, REST API, /v1, the Django
admin) and the websocket route, for each role, with the status each must answer.

The routes are walked from the resolver, so a route added without a line in ``MATRIX`` fails
``test_every_route_has_an_entry``. Adding one is one line: ``(route, method): statuses`` in the
order of ``ROLES``. A route of the API must list every method its view implements.

Writes are sent with an empty body: a 400 from a role shows it got past the access check and
was stopped by validation, having changed nothing; each request runs in a transaction rolled
back afterwards, so a delete by one role leaves the object for the next.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser
from django.db import transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from orchestrator.models import Membership, Run, Step
from orchestrator.services.api_keys import api_key_create
from orchestrator.services.batches import batch_create
from orchestrator.services.datasets import dataset_ensure_suite
from orchestrator.services.experiments import experiment_create, parse_arms
from orchestrator.services.review import comment_create, failure_kinds_ensure
from orchestrator.services.runs import run_create
from tests.factories import make_member, make_project, make_step, make_user
from webui.consumers import CLOSE_REFUSED
from webui.routing import websocket_urlpatterns

ROLES = ("anonymous", "viewer", "reviewer", "other_admin", "admin", "superuser")

# Login redirect (pages), API refusal of an anonymous user, /v1 without a key.
LOGIN, NO, NOKEY = 302, 403, 401
# (route, method): statuses for anonymous, viewer, reviewer, admin of another project, admin,
# superuser. Routes are the resolver's patterns joined ("api/runs/<id:run_id>/").
MATRIX: dict[tuple[str, str], tuple[int, ...]] = {
    # Pages
    ("", "GET"): (LOGIN, 200, 200, 200, 200, 200),
    ("runs/<id:run_id>/", "GET"): (LOGIN, 200, 200, 404, 200, 200),
    ("account/", "GET"): (LOGIN, 200, 200, 200, 200, 200),
    ("account/", "POST"): (LOGIN, 400, 400, 400, 400, 400),
    ("account/keys/<id:key_id>/revoke/", "POST"): (LOGIN, 404, 404, 404, 302, 404),
    ("pools/", "GET"): (LOGIN, 200, 200, 200, 200, 200),
    ("pools/new/", "GET"): (LOGIN, 403, 403, 200, 200, 200),
    ("pools/new/", "POST"): (LOGIN, 403, 403, 400, 400, 400),
    ("pools/<id:pool_id>/", "GET"): (LOGIN, 200, 200, 404, 200, 200),
    ("pools/<id:pool_id>/", "POST"): (LOGIN, 403, 403, 404, 400, 400),
    ("projects/switch/", "POST"): (LOGIN, 404, 404, 404, 404, 404),
    ("projects/<slug:slug>/members/", "GET"): (LOGIN, 200, 200, 404, 200, 200),
    ("projects/<slug:slug>/members/", "POST"): (LOGIN, 403, 403, 404, 400, 400),
    ("projects/<slug:slug>/members/<id:membership_id>/role/", "POST"): (
        LOGIN,
        403,
        403,
        404,
        400,
        400,
    ),
    ("projects/<slug:slug>/members/<id:membership_id>/remove/", "POST"): (
        LOGIN,
        403,
        403,
        404,
        302,
        302,
    ),
    ("audit/", "GET"): (LOGIN, 403, 403, 200, 200, 200),
    ("audit/export.csv", "GET"): (LOGIN, 403, 403, 200, 200, 200),
    # Accounts
    ("batches/", "GET"): (302, 200, 200, 200, 200, 200),
    ("batches/<id:batch_id>/", "GET"): (302, 200, 200, 404, 200, 200),
    ("batches/new/", "GET"): (302, 403, 403, 403, 200, 200),
    ("compare/", "GET"): (302, 400, 400, 400, 400, 400),
    ("datasets/", "GET"): (302, 200, 200, 200, 200, 200),
    ("datasets/<id:dataset_id>/", "GET"): (302, 200, 200, 404, 200, 200),
    ("datasets/suite/", "GET"): (302, 405, 405, 405, 405, 405),
    ("experiments/", "GET"): (302, 200, 200, 200, 200, 200),
    ("experiments/<id:experiment_id>/", "GET"): (302, 200, 200, 404, 200, 200),
    ("review/", "GET"): (302, 200, 200, 200, 200, 200),
    ("review/insights/", "GET"): (302, 200, 200, 200, 200, 200),
    ("analytics/", "GET"): (302, 200, 200, 200, 200, 200),
    ("runs/<id:run_id>/family/", "GET"): (302, 200, 200, 404, 200, 200),
    ("runs/changes/", "GET"): (302, 400, 400, 400, 400, 400),
    ("accounts/login/", "GET"): (200, 200, 200, 200, 200, 200),
    ("accounts/logout/", "POST"): (302, 302, 302, 302, 302, 302),
    ("accounts/password_change/", "GET"): (LOGIN, 200, 200, 200, 200, 200),
    ("accounts/password_change/done/", "GET"): (LOGIN, 200, 200, 200, 200, 200),
    ("accounts/password_reset/", "GET"): (200, 200, 200, 200, 200, 200),
    ("accounts/password_reset/done/", "GET"): (200, 200, 200, 200, 200, 200),
    ("accounts/reset/<uidb64>/<token>/", "GET"): (200, 200, 200, 200, 200, 200),
    ("accounts/reset/done/", "GET"): (200, 200, 200, 200, 200, 200),
    # REST API
    ("api/schema/", "GET"): (200, 200, 200, 200, 200, 200),
    ("api/runs/", "GET"): (NO, 200, 200, 200, 200, 200),
    ("api/runs/", "POST"): (NO, 400, 400, 400, 400, 400),
    ("api/runs/<id:run_id>/", "GET"): (NO, 200, 200, 404, 200, 200),
    ("api/runs/<id:run_id>/graph/", "GET"): (NO, 200, 200, 404, 200, 200),
    ("api/runs/<id:run_id>/steps/", "GET"): (NO, 200, 200, 404, 200, 200),
    ("api/runs/<id:run_id>/cancel/", "POST"): (NO, 403, 200, 404, 200, 200),
    ("api/steps/<id:step_id>/", "GET"): (NO, 200, 200, 404, 200, 200),
    ("api/pools/", "GET"): (NO, 200, 200, 200, 200, 200),
    ("api/pools/", "POST"): (NO, 400, 400, 400, 400, 400),
    ("api/pools/<id:pool_id>/", "GET"): (NO, 200, 200, 404, 200, 200),
    ("api/pools/<id:pool_id>/", "PATCH"): (NO, 403, 403, 404, 200, 200),
    ("api/pools/<id:pool_id>/usage/", "GET"): (NO, 200, 200, 404, 200, 200),
    ("api/pools/<id:pool_id>/test-connection/", "POST"): (NO, 403, 403, 404, 200, 200),
    ("api/pools/<id:pool_id>/workers/", "POST"): (NO, 403, 403, 404, 400, 400),
    ("api/pools/<id:pool_id>/workers/reorder/", "POST"): (NO, 403, 403, 404, 400, 400),
    ("api/pools/<id:pool_id>/workers/<id:worker_id>/", "PATCH"): (NO, 403, 403, 404, 200, 200),
    ("api/pools/<id:pool_id>/workers/<id:worker_id>/", "DELETE"): (NO, 403, 403, 404, 200, 200),
    ("api/pools/<id:pool_id>/workers/<id:worker_id>/disable/", "POST"): (
        NO,
        403,
        403,
        404,
        200,
        200,
    ),
    ("api/pools/<id:pool_id>/workers/<id:worker_id>/test-connection/", "POST"): (
        NO,
        403,
        403,
        404,
        200,
        200,
    ),
    ("api/projects/", "GET"): (NO, 200, 200, 200, 200, 200),
    ("api/projects/<str:project_slug>/members/", "GET"): (NO, 200, 200, 404, 200, 200),
    ("api/projects/<str:project_slug>/members/", "POST"): (NO, 403, 403, 404, 400, 400),
    ("api/projects/<str:project_slug>/members/<id:membership_id>/", "PATCH"): (
        NO,
        403,
        403,
        404,
        400,
        400,
    ),
    ("api/projects/<str:project_slug>/members/<id:membership_id>/", "DELETE"): (
        NO,
        403,
        403,
        404,
        204,
        204,
    ),
    ("api/projects/<str:project_slug>/audit/", "GET"): (NO, 403, 403, 404, 200, 200),
    ("api/projects/<str:project_slug>/audit/export.csv", "GET"): (NO, 403, 403, 404, 200, 200),
    ("api/keys/", "GET"): (NO, 200, 200, 200, 200, 200),
    ("api/keys/", "POST"): (NO, 400, 400, 400, 400, 400),
    ("api/keys/<id:key_id>/revoke/", "POST"): (NO, 404, 404, 404, 200, 404),
    ("api/export/trajectories.jsonl", "GET"): (NO, 200, 200, 200, 200, 200),
    ("api/runs/export.csv", "GET"): (NO, 200, 200, 200, 200, 200),
    ("api/runs/export.jsonl", "GET"): (NO, 200, 200, 200, 200, 200),
    # Analytics: a project is required (a 400 without one).
    ("api/analytics/", "GET"): (NO, 400, 400, 400, 400, 400),
    ("api/batches/", "GET"): (403, 200, 200, 200, 200, 200),
    ("api/batches/", "POST"): (403, 400, 400, 400, 400, 400),
    ("api/batches/<id:batch_id>/", "GET"): (403, 200, 200, 404, 200, 200),
    ("api/comments/<id:comment_id>/", "PATCH"): (403, 403, 403, 404, 400, 403),
    ("api/comments/<id:comment_id>/", "DELETE"): (403, 403, 403, 404, 204, 204),
    ("api/compare/", "GET"): (403, 400, 400, 400, 400, 400),
    ("api/datasets/", "GET"): (403, 200, 200, 200, 200, 200),
    ("api/datasets/", "POST"): (403, 400, 400, 400, 400, 400),
    ("api/datasets/<id:dataset_id>/", "GET"): (403, 200, 200, 404, 200, 200),
    ("api/datasets/<id:dataset_id>/export/", "GET"): (403, 200, 200, 404, 200, 200),
    ("api/datasets/<id:dataset_id>/items/", "POST"): (403, 400, 400, 400, 400, 400),
    ("api/datasets/suite/", "POST"): (403, 400, 400, 400, 400, 400),
    ("api/experiments/", "GET"): (403, 200, 200, 200, 200, 200),
    ("api/experiments/", "POST"): (403, 400, 400, 400, 400, 400),
    ("api/experiments/<id:experiment_id>/", "GET"): (403, 200, 200, 404, 200, 200),
    ("api/experiments/<id:experiment_id>/cancel/", "POST"): (403, 403, 200, 404, 200, 200),
    ("api/experiments/<id:experiment_id>/head-to-head/", "GET"): (403, 400, 400, 400, 400, 400),
    ("api/experiments/<id:experiment_id>/progress/", "GET"): (403, 200, 200, 404, 200, 200),
    ("api/experiments/<id:experiment_id>/resume/", "POST"): (403, 403, 200, 404, 200, 200),
    ("api/experiments/<id:experiment_id>/runs/", "GET"): (403, 400, 400, 400, 400, 400),
    ("api/failure-kinds/", "GET"): (403, 400, 400, 400, 400, 400),
    ("api/failure-kinds/", "POST"): (403, 400, 400, 400, 400, 400),
    ("api/failure-kinds/<id:kind_id>/", "PATCH"): (403, 400, 400, 404, 400, 400),
    ("api/failure-kinds/<id:kind_id>/", "DELETE"): (403, 403, 403, 404, 204, 204),
    ("api/review/insights/", "GET"): (403, 400, 400, 400, 400, 400),
    ("api/review/queue/", "GET"): (403, 200, 200, 200, 200, 200),
    ("api/runs/<id:run_id>/assignee/", "PUT"): (403, 403, 400, 404, 400, 400),
    ("api/runs/<id:run_id>/comments/", "GET"): (403, 200, 200, 404, 200, 200),
    ("api/runs/<id:run_id>/comments/", "POST"): (403, 403, 400, 404, 400, 400),
    ("api/runs/<id:run_id>/family/", "GET"): (403, 200, 200, 404, 200, 200),
    ("api/runs/<id:run_id>/flag/", "PUT"): (403, 403, 400, 404, 400, 400),
    ("api/runs/<id:run_id>/labels/", "POST"): (403, 403, 400, 404, 400, 400),
    ("api/runs/<id:run_id>/labels/<id:kind_id>/", "DELETE"): (403, 403, 200, 404, 200, 200),
    ("api/runs/<id:run_id>/replays/", "POST"): (403, 403, 403, 404, 400, 400),
    ("api/runs/<id:run_id>/resolution/", "PUT"): (403, 403, 200, 404, 200, 200),
    ("api/runs/<id:run_id>/resolution/", "DELETE"): (403, 403, 200, 404, 200, 200),
    ("api/runs/<id:run_id>/review/", "GET"): (403, 200, 200, 404, 200, 200),
    ("api/runs/<id:run_id>/score/", "PUT"): (403, 403, 400, 404, 400, 400),
    ("api/runs/changes/", "GET"): (403, 400, 400, 400, 400, 400),
    ("api/^[\\s\\S]*/$", "GET"): (404, 404, 404, 404, 404, 404),
    # OpenAI-compatible endpoint: its own keys, never a session
    ("v1/models", "GET"): (NOKEY, NOKEY, NOKEY, NOKEY, NOKEY, NOKEY),
    ("v1/models/<path:model>", "GET"): (NOKEY, NOKEY, NOKEY, NOKEY, NOKEY, NOKEY),
    ("v1/chat/completions", "POST"): (NOKEY, NOKEY, NOKEY, NOKEY, NOKEY, NOKEY),
    ("v1/^[\\s\\S]*$", "GET"): (404, 404, 404, 404, 404, 404),
    # The Django admin: superusers only (every other role is sent to its login page)
    ("admin/", "ADMIN"): (LOGIN, LOGIN, LOGIN, LOGIN, LOGIN, 200),
}
# Where a regular-expression route is tried (it has no parameters to fill in).
SAMPLE_PATHS = {"api/^[\\s\\S]*/$": "/api/no/such/thing/", "v1/^[\\s\\S]*$": "/v1/no/such/thing"}
# What the websocket route answers each role: its snapshot, or a refusal (close 4403).
WEBSOCKET = {
    "ws/runs/<int:run_id>/": ("closed", "snapshot", "snapshot", "closed", "snapshot", "snapshot")
}
API_METHODS = ("get", "post", "put", "patch", "delete")


def walk(patterns, prefix: str = "") -> Iterator[tuple[str, URLPattern]]:
    """(route, pattern) of every URL pattern, includes followed."""
    for pattern in patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            yield from walk(pattern.url_patterns, route)
        else:
            yield route, pattern


def site_routes() -> dict[str, URLPattern]:
    return dict(walk(get_resolver().url_patterns))


def entry_for(route: str) -> str:
    """The MATRIX route that covers ``route`` (the admin's are covered by one rule)."""
    return "admin/" if route.startswith("admin/") else route


def test_every_route_has_an_entry():
    covered = {route for route, _ in MATRIX}
    missing = sorted(r for r in site_routes() if entry_for(r) not in covered)
    stale = sorted(covered - {entry_for(r) for r in site_routes()})
    assert not missing, "routes with no line in MATRIX:\n" + "\n".join(missing)
    assert not stale, "lines in MATRIX for routes that no longer exist:\n" + "\n".join(stale)
    ws_routes = {str(p.pattern) for p in websocket_urlpatterns}
    assert ws_routes == set(WEBSOCKET)


def test_every_api_method_has_an_entry():
    missing = []
    for route, pattern in site_routes().items():
        view = getattr(pattern.callback, "cls", None)
        if view is None or not route.startswith("api/"):
            continue
        for method in API_METHODS:
            if hasattr(view, method) and (route, method.upper()) not in MATRIX:
                missing.append(f"{method.upper()} {route}")
    assert not missing, "API methods with no line in MATRIX:\n" + "\n".join(missing)


@pytest.fixture
def world(db):
    return build_world()


def build_world():
    """A project with a stored run, a pool, a worker, members in each role, a key; another
    project with its own admin; a superuser."""
    from orchestrator.providers.simulator import demo_pool
    from orchestrator.services.pools import pool_sync_from_data

    project = make_project(name="Matrix")
    pool, _ = pool_sync_from_data(project=project, data=demo_pool(latency=0))
    users = {
        "anonymous": None,
        "viewer": make_member(project=project, role=Membership.Role.VIEWER),
        "reviewer": make_member(project=project, role=Membership.Role.REVIEWER),
        "other_admin": make_member(project=make_project(), role=Membership.Role.ADMIN),
        "admin": make_member(project=project, role=Membership.Role.ADMIN),
        "superuser": make_user(is_superuser=True, is_staff=True),
    }
    run = run_create(pool=pool, input="What is 2 + 3?", enqueue=False)
    make_step(run=run, worker=pool.workers.first())
    api_key, _ = api_key_create(user=users["admin"], project=project, name="matrix")
    kind = failure_kinds_ensure(project=project)[-1]
    comment = comment_create(actor=users["admin"], run=run, body="A comment.")
    dataset = dataset_ensure_suite(project=project)
    experiment = experiment_create(
        dataset=dataset, arms=parse_arms("single:0", pool=pool), sample=1, enqueue=False
    )
    # A finished run of the project for a batch to replay (the run above stays queued).
    failed = run_create(pool=pool, input="What is 3 + 4?", enqueue=False)
    Run.objects.filter(pk=failed.pk).update(status=Run.Status.FAILED)
    batch = batch_create(
        project=project,
        actor=users["admin"],
        filters={},
        override={"kind": "instruction", "match": "literal", "pattern": "a", "replacement": "b"},
        enqueue=False,
    )
    values = {
        "run_id": run.pk,
        "step_id": Step.objects.filter(run=run).first().pk,
        "pool_id": pool.pk,
        "worker_id": pool.workers.first().pk,
        "key_id": api_key.pk,
        "slug": project.slug,
        "project_slug": project.slug,
        "membership_id": Membership.objects.get(user=users["reviewer"]).pk,
        "uidb64": "MQ",
        "token": "set-password",
        "model": pool.api_slug,
        "kind_id": kind.pk,
        "comment_id": comment.pk,
        "dataset_id": dataset.pk,
        "experiment_id": experiment.pk,
        "batch_id": batch.pk,
    }
    return users, values


def url_of(route: str, pattern: URLPattern, values: dict) -> str:
    if route in SAMPLE_PATHS:
        return SAMPLE_PATHS[route]
    converters = getattr(pattern.pattern, "converters", {})
    path = "/" + route
    for name, converter in converters.items():
        kind = next(k for k, c in _converter_names().items() if isinstance(converter, c))
        path = path.replace(f"<{kind}:{name}>", str(values[name]))
    for name in values:  # untyped <name>
        path = path.replace(f"<{name}>", str(values[name]))
    return path


def _converter_names() -> dict:
    from django.urls.converters import get_converters

    return {name: type(converter) for name, converter in get_converters().items()}


def status_for(client: Client, method: str, url: str) -> int:
    return response_for(client, method, url).status_code


def response_for(client: Client, method: str, url: str):
    """Send one request in a transaction that is rolled back."""
    with transaction.atomic():
        if method == "GET":
            response = client.get(url)
        else:
            send = getattr(client, method.lower())
            response = send(url, data="{}", content_type="application/json")
        transaction.set_rollback(True)
    return response


def clients(users) -> list[Client]:
    result = []
    for role in ROLES:
        client = Client()
        if users[role] is not None:
            client.force_login(users[role])
        result.append(client)
    return result


NON_ADMIN_ROUTES = sorted(key for key in MATRIX if key[1] != "ADMIN")


@pytest.mark.parametrize(
    ("route", "method"), NON_ADMIN_ROUTES, ids=[f"{m} {r}" for r, m in NON_ADMIN_ROUTES]
)
def test_each_role_gets_its_status(world, route, method):
    users, values = world
    pattern = site_routes()[route]
    url = url_of(route, pattern, values)
    got = tuple(status_for(client, method, url) for client in clients(users))
    assert dict(zip(ROLES, got, strict=True)) == dict(
        zip(ROLES, MATRIX[route, method], strict=True)
    ), url


def admin_samples(values) -> list[tuple[str, str]]:
    """(route, url) for every admin route, ids filled from rows of the model it administers."""
    from django.contrib.contenttypes.models import ContentType

    found = []
    for route, pattern in site_routes().items():
        if not route.startswith("admin/"):
            continue
        model_admin = getattr(pattern.callback, "model_admin", None)
        model = getattr(model_admin, "model", None)
        obj = model.objects.first() if model is not None else None
        fill = {
            "object_id": obj.pk if obj is not None else 1,
            "id": obj.pk if obj is not None else 1,
            "app_label": "orchestrator",
            "content_type_id": ContentType.objects.get_for_model(Membership).pk,
            "url": "no-such-page/",
        }
        path = "/" + route
        for name, converter in getattr(pattern.pattern, "converters", {}).items():
            kind = next(k for k, c in _converter_names().items() if isinstance(converter, c))
            path = path.replace(f"<{kind}:{name}>", str(fill[name]))
        if not hasattr(pattern.pattern, "converters") or "(?P" in route:
            path = {
                "app_list": "/admin/orchestrator/",
                "view_on_site": "/admin/r/1/1/",
            }.get(pattern.name or "", "/admin/no-such-page/")
        found.append((route, path))
    return found


def test_the_django_admin_is_for_superusers_alone(world):
    """Every other role is sent to the admin's login page; a superuser gets the page (or a
    redirect that is not the login page, a 403 on read-only models' add pages, a 404 for no
    such page), never an error."""
    users, values = world
    expected = dict(zip(ROLES, MATRIX["admin/", "ADMIN"], strict=True))
    wrong = []
    role_clients = clients(users)
    for route, url in admin_samples(values):
        if route in ("admin/login/", "admin/logout/"):
            continue  # open to all: the way in and out
        for role, client in zip(ROLES, role_clients, strict=True):
            response = response_for(client, "GET", url)
            to_login = response.status_code == 302 and "/admin/login/" in response["Location"]
            if (expected[role] == LOGIN) != to_login or response.status_code >= 500:
                wrong.append(f"{role} GET {url}: {response.status_code}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("async_db_connections_closed")
async def test_the_websocket_route_admits_members_only():
    users, values = await sync_to_async(build_world)()
    (route,) = WEBSOCKET
    got = []
    for role in ROLES:
        communicator = WebsocketCommunicator(
            URLRouter(websocket_urlpatterns), route.replace("<int:run_id>", str(values["run_id"]))
        )
        communicator.scope["user"] = users[role] or AnonymousUser()
        try:
            await communicator.connect()
            output = await communicator.receive_output(timeout=3)
        finally:
            await communicator.disconnect()
        if output["type"] == "websocket.close":
            assert output["code"] == CLOSE_REFUSED
            got.append("closed")
        else:
            got.append(json.loads(output["text"])["type"])
    assert dict(zip(ROLES, got, strict=True)) == dict(zip(ROLES, WEBSOCKET[route], strict=True))
