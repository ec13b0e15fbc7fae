"""Roles with meaning: every route and the websocket check one permission, and every role is
tried against every route, allowed and denied.

The meta-tests walk the URL resolver and the websocket routes: a route that is not in ROUTES
(or PUBLIC, with its reason) fails, and so does a route whose view declares no permission.
When you add a route, add one line to ROUTES: its example URL and the roles that may use it.
"""
from __future__ import annotations


import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from extproxy.config import RecordingConfig, RedactionConfig
from extproxy.recorder import Recorder
from extproxy.roles import ROLES, Perm
from tests.test_recorder import make_trace

pytestmark = pytest.mark.django_db(transaction=True)

EVERYONE = {"viewer", "developer", "auditor", "admin", "superuser"}
AUDITORS = {"auditor", "admin", "superuser"}
DEVELOPERS = {"developer", "admin", "superuser"}
# Who is tried: no login, a user without a role, each role, and a superuser.
PERSONAS = ["anonymous", "norole", "viewer", "developer", "auditor", "admin", "superuser"]

# route pattern -> (example URL, roles allowed). {call} is a recorded call's id.
ROUTES: dict[str, tuple[str, set[str]]] = {
    "api/schema/": ("/api/schema/", EVERYONE),
    "api/": ("/api/", EVERYONE),
    "api/calls/": ("/api/calls/", EVERYONE),
    "api/calls/<pk>/": ("/api/calls/{call}/", EVERYONE),
    "api/audit/": ("/api/audit/", AUDITORS),
    "api/audit/<pk>/": ("/api/audit/{audit}/", AUDITORS),
    "api/export/": ("/api/export/?format=csv", AUDITORS),
    "api/export/<str:export_id>/manifest/": ("/api/export/{export}/manifest/", AUDITORS),
    "api/export/signing-key/": ("/api/export/signing-key/", AUDITORS),
    "api/audit/export/": ("/api/audit/export/", AUDITORS),
    "api/gaps/": ("/api/gaps/", EVERYONE),
    "": ("/", EVERYONE),
    "feed/calls/": ("/feed/calls/", EVERYONE),
    "feed/attempts/": ("/feed/attempts/", EVERYONE),
    "feed/summary/": ("/feed/summary/", EVERYONE),
    "feed/record-status/": ("/feed/record-status/", EVERYONE),
    "pods/<podnamespace:namespace>/<podname:name>/": ("/pods/ml/trainer/", EVERYONE),
    "backends/": ("/backends/", EVERYONE),
    "pending/": ("/pending/", EVERYONE),
    "audit/": ("/audit/", AUDITORS),
    # replay lane: bodies and copy-out (view_bodies), replays (replay_calls)
    "api/calls/<int:pk>/request": ("/api/calls/{call}/request", DEVELOPERS),
    "api/calls/<int:pk>/response": ("/api/calls/{call}/response", DEVELOPERS),
    "api/calls/<int:pk>/backend-calls/<int:bc>/request": ("/api/calls/{combined}/backend-calls/{part}/request", DEVELOPERS),
    "api/calls/<int:pk>/backend-calls/<int:bc>/response": ("/api/calls/{combined}/backend-calls/{part}/response", DEVELOPERS),
    "api/calls/<int:pk>/curl": ("/api/calls/{call}/curl?url=http://127.0.0.1:9/filter", DEVELOPERS),
    "api/calls/<int:pk>/fixture": ("/api/calls/{call}/fixture", DEVELOPERS),
    "api/fixtures/": ("/api/fixtures/", DEVELOPERS),
    "api/replays/": ("/api/replays/", DEVELOPERS),
    "api/replays/<int:pk>/": ("/api/replays/{replay}/", DEVELOPERS),
    "api/replays/<int:pk>/items/<int:item>/": ("/api/replays/{replay}/items/{item}/", DEVELOPERS),
    "api/replays/<int:pk>/cancel/": ("/api/replays/{replay}/cancel/", DEVELOPERS),
    "calls/<int:pk>/": ("/calls/{call}/", DEVELOPERS),
    "replays/": ("/replays/", DEVELOPERS),
    "replays/<int:pk>/": ("/replays/{replay}/", DEVELOPERS),
    "replays/<int:pk>/items/<int:item>/": ("/replays/{replay}/items/{item}/", DEVELOPERS),
    "shadows/": ("/shadows/", EVERYONE),
    "api/shadows/": ("/api/shadows/", EVERYONE),
}
# Routes anyone may reach, and why.
PUBLIC = {
    "healthz": "liveness probe",
    "readyz": "readiness probe",
    "metrics": "Prometheus scrape (no call data)",
    "favicon.ico": "the dashboard's icon, which browsers ask for on any page",
    "accounts/login/": "the login page",
    "accounts/logout/": "logging out",
    "api/auth/token/": "a script's login",
    "admin/login/": "the admin's login form (throttled like the others)",
}
WEBSOCKETS = {"ws/live/": EVERYONE}


def _clean(pattern: str) -> str:
    return pattern.replace("(?P<pk>[^/.]+)", "<pk>").replace("^", "").replace("$", "")


def resolver_routes() -> dict[str, object]:
    """Every route of the human face: pattern -> view callback (the admin site checks staff itself)."""
    found: dict[str, object] = {}

    def walk(patterns, prefix):
        for p in patterns:
            if isinstance(p, URLResolver):
                if str(p.pattern) != "admin/":
                    walk(p.url_patterns, prefix + _clean(str(p.pattern)))
            elif isinstance(p, URLPattern) and "format" not in str(p.pattern):  # format suffixes: same views
                found[prefix + _clean(str(p.pattern))] = p.callback

    walk(get_resolver().url_patterns, "")
    return found


def declared_permissions(callback) -> set[str]:
    """The permissions a view says it checks: Django views (roles.requires) or DRF views."""
    if getattr(callback, "required_permission", None):
        return {callback.required_permission}
    view_class = getattr(callback, "cls", None) or getattr(callback, "view_class", None)
    classes = getattr(callback, "initkwargs", {}).get("permission_classes") or getattr(view_class, "permission_classes", ())
    return {getattr(c, "required_permission", "") for c in classes} - {""}


def test_it_knows_every_route_and_every_route_checks_a_permission():
    routes = resolver_routes()
    unknown = set(routes) - set(ROUTES) - set(PUBLIC)
    assert not unknown, f"routes missing from ROUTES (add them with the roles allowed): {sorted(unknown)}"
    assert not set(ROUTES) - set(routes), "ROUTES lists routes that no longer exist"
    unchecked = [r for r in ROUTES if not declared_permissions(routes[r])]
    assert not unchecked, f"routes without a permission check: {unchecked}"


def test_it_knows_every_websocket_route_and_each_checks_a_permission():
    from dashboard.routing import websocket_urlpatterns

    routes = {str(p.pattern): p.callback for p in websocket_urlpatterns}
    assert set(routes) == set(WEBSOCKETS)
    for route, app in routes.items():
        assert getattr(app.consumer_class, "required_permission", ""), route


def test_it_gives_each_role_its_permissions_and_no_more():
    expected = {
        "viewer": {Perm.VIEW_CALLS},
        "developer": {Perm.VIEW_CALLS, Perm.VIEW_BODIES, Perm.REPLAY_CALLS},
        "auditor": {Perm.VIEW_CALLS, Perm.EXPORT_CALLS, Perm.VIEW_AUDIT},
    }
    for role, perms in expected.items():
        user = make_user(role)
        assert {p for p in user.get_all_permissions() if p.startswith("extproxy.")} == perms, role
    admin = make_user("admin")
    assert {p for p in admin.get_all_permissions() if p.startswith("extproxy.")} == {
        Perm.VIEW_CALLS, Perm.VIEW_BODIES, Perm.REPLAY_CALLS, Perm.EXPORT_CALLS, Perm.VIEW_AUDIT, Perm.MANAGE_ACCESS
    }
    assert admin.has_perm("auth.add_user") and admin.has_perm("authtoken.add_tokenproxy")
    assert set(ROLES) == {"viewer", "developer", "auditor", "admin"}


def make_user(persona: str) -> User:
    user = User.objects.create_user(f"u-{persona}", password="pw", is_superuser=persona == "superuser")
    if persona in ROLES:
        user.groups.add(Group.objects.get(name=persona))
    return User.objects.get(pk=user.pk)  # fresh: no cached permissions


def api_client(persona: str) -> APIClient:
    client = APIClient()
    if persona != "anonymous":
        client.credentials(HTTP_AUTHORIZATION="Token " + Token.objects.create(user=make_user(persona)).key)
    return client


def page_client(persona: str) -> Client:
    client = Client()
    if persona != "anonymous":
        client.force_login(make_user(persona))
    return client


@pytest.fixture
def records():
    from extproxy.audit import audit

    stored = Recorder(RecordingConfig(), RedactionConfig()).write_batch([make_trace()])
    audit(None, "test", target="something", actor="tester", source="test")
    from django.utils import timezone

    from extproxy.models import AuditEvent, Export

    Export.objects.create(export_id="e-1", kind="calls", format="csv", started_at=timezone.now(), manifest={"records": 0})
    from extproxy.models import Call, ReplayItem, ReplayRun

    combined = Recorder(RecordingConfig(), RedactionConfig()).write_batch(
        [make_trace(form="combined", backend="combined", backend_calls=[make_trace()])]
    )[0]["id"]
    run = ReplayRun.objects.create(selector={"call": stored[0]["id"]}, status="done")
    item = ReplayItem.objects.create(run=run, original_id=stored[0]["id"])
    return {"call": stored[0]["id"], "audit": AuditEvent.objects.get(action="test").pk, "export": "e-1",
            "combined": combined, "part": Call.objects.get(pk=combined).backend_calls.get().pk,
            "replay": run.pk, "item": item.pk}


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_it_lets_exactly_the_allowed_roles_use_each_route(route, records):
    example, allowed = ROUTES[route]
    url = example.format(**records)
    for persona in PERSONAS:
        api = url.startswith("/api/")
        response = (api_client if api else page_client)(persona).get(url)
        where = f"{route} as {persona}: {response.status_code}"
        if persona in allowed:
            assert response.status_code == 200, where
        elif persona == "anonymous" and api:
            assert response.status_code == 401 and response["WWW-Authenticate"].startswith("Token"), where
        elif persona == "anonymous":
            assert response.status_code == 302 and "/accounts/login/" in response["Location"], where
        else:
            assert response.status_code == 403, where
            if api:
                assert b"permission" in response.content, where


@pytest.mark.parametrize("route", sorted(WEBSOCKETS))
async def test_it_lets_exactly_the_allowed_roles_open_each_websocket(route):
    from extproxy.asgi import application

    for persona in PERSONAS:
        query = ""
        if persona != "anonymous":
            user = await database_sync_to_async(make_user)(persona)
            query = "?token=" + (await database_sync_to_async(Token.objects.create)(user=user)).key
        communicator = WebsocketCommunicator(application, f"/{route}{query}")
        connected, _ = await communicator.connect()
        assert connected, persona  # refusals are accepted first, so that the close code reaches the client
        first = await communicator.receive_output(timeout=2)
        if persona in WEBSOCKETS[route]:
            assert first["type"] == "websocket.send", persona
        else:
            assert first == {"type": "websocket.close", "code": 4401 if persona == "anonymous" else 4403}, persona
        await communicator.disconnect()


def test_it_answers_401_with_www_authenticate_for_a_bad_token():
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token not-a-token")
    response = client.get("/api/calls/")
    assert response.status_code == 401 and response["WWW-Authenticate"] == 'Token'
    assert "token" in response.json()["detail"].lower()


def test_it_migrates_the_old_groups_to_the_new_roles(django_db_blocker):
    from importlib import import_module
    from types import SimpleNamespace

    from django.apps import apps
    from django.db import connection

    migration = import_module("extproxy.migrations.0002_roles_audit")
    Group.objects.filter(name__in=["viewer", "auditor"]).delete()
    old = Group.objects.create(name="operators")
    user = make_user("norole")
    user.groups.add(old)
    Group.objects.create(name="auditors")
    migration.rename_groups(apps, SimpleNamespace(connection=connection))  # what it reads of a schema editor
    assert list(user.groups.values_list("name", flat=True)) == ["viewer"]
    assert Group.objects.filter(name="auditor").exists() and not Group.objects.filter(name="auditors").exists()
    # "developers" stays: a "developer" group already exists, and nothing is merged by guessing
    assert Group.objects.filter(name="developer").exists()
