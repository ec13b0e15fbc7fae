"""The audit trail: logins and failed logins (page and token), user and role changes from the
command and the admin site, tokens, configuration loads; who, what and from where; never a
password; readable by auditors through the API."""
from __future__ import annotations

import io

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from extproxy.models import AuditEvent

pytestmark = pytest.mark.django_db


def events(action: str | None = None) -> list[AuditEvent]:
    found = AuditEvent.objects.order_by("at", "id")
    return list(found.filter(action=action) if action else found)


def run(*args, stdin: str = "") -> str:
    out = io.StringIO()
    import sys

    old = sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        call_command(*args, stdout=out)
    finally:
        sys.stdin = old
    return out.getvalue()


def test_it_records_page_logins_and_failed_logins_with_their_source():
    User.objects.create_user("ann", password="right")
    client = Client(REMOTE_ADDR="10.1.2.3")
    client.post("/accounts/login/", {"username": "ann", "password": "wrong"})
    client.post("/accounts/login/", {"username": "ann", "password": "right"})
    client.post("/accounts/logout/")
    failed, login, logout = events("login-failed"), events("login"), events("logout")
    assert [(e.target, e.actor, e.source) for e in failed] == [("ann", "", "10.1.2.3")]
    assert [(e.target, e.actor, e.source) for e in login] == [("ann", "ann", "10.1.2.3")]
    assert [(e.target, e.actor) for e in logout] == [("ann", "ann")]
    assert "wrong" not in str([e.detail for e in events()]) and "right" not in str([e.detail for e in events()])


def test_it_records_token_logins_token_creation_and_failures():
    User.objects.create_user("bot", password="right")
    client = APIClient(REMOTE_ADDR="10.9.9.9")
    assert client.post("/api/auth/token/", {"username": "bot", "password": "nope"}).status_code == 400
    first = client.post("/api/auth/token/", {"username": "bot", "password": "right"}).json()["token"]
    again = client.post("/api/auth/token/", {"username": "bot", "password": "right"}).json()["token"]
    assert first == again
    assert [(e.target, e.source) for e in events("login-failed")] == [("bot", "10.9.9.9")]
    assert [(e.actor, e.detail) for e in events("login")] == [("bot", {"via": "token"})] * 2
    assert [(e.target, e.actor, e.source) for e in events("token-created")] == [("bot", "bot", "10.9.9.9")]


def test_it_adds_a_user_with_a_role_from_the_command_and_records_it():
    out = run("user", "add", "audrey", "--role", "auditor")
    password = out.split("password ")[1].split(" ")[0]
    user = User.objects.get(username="audrey")
    assert user.check_password(password) and list(user.groups.values_list("name", flat=True)) == ["auditor"]
    created, role = events("user-created")[0], events("role-added")[0]
    assert created.target == "audrey" and created.actor.startswith("cli") and created.source == "cli"
    assert role.target == "audrey" and role.detail == {"role": "auditor"}
    with pytest.raises(CommandError, match="exists"):
        run("user", "add", "audrey", "--role", "viewer")


def test_it_reads_the_password_from_stdin_and_never_prints_or_records_it():
    out = run("user", "add", "dev", "--role", "developer", "--password-stdin", stdin="s3cret-pass\n")
    assert "s3cret" not in out
    assert User.objects.get(username="dev").check_password("s3cret-pass")
    run("user", "role", "dev", "--role", "viewer")
    assert "s3cret" not in str([(e.target, e.detail) for e in events()])


def test_it_changes_roles_and_deactivates_users_with_a_trace():
    run("user", "add", "sam", "--role", "developer")
    run("user", "role", "sam", "--role", "viewer", "--role", "auditor")
    assert sorted(User.objects.get(username="sam").groups.values_list("name", flat=True)) == ["auditor", "viewer"]
    assert sorted(e.detail["role"] for e in events("role-removed")) == ["developer"]
    assert sorted(e.detail["role"] for e in events("role-added")) == ["auditor", "developer", "viewer"]
    run("user", "deactivate", "sam")
    assert not User.objects.get(username="sam").is_active
    assert [e.detail for e in events("user-changed")] == [{"is_active": False}]
    with pytest.raises(CommandError, match="no user"):
        run("user", "role", "nobody", "--role", "viewer")
    listing = run("user", "list")
    assert "sam\tauditor, viewer\tinactive" in listing


def test_it_prints_a_token_and_rotates_it():
    run("user", "add", "ci", "--role", "viewer")
    first = run("token", "ci").strip()
    assert run("token", "ci").strip() == first
    rotated = run("token", "ci", "--rotate").strip()
    assert rotated != first and Token.objects.get(user__username="ci").key == rotated
    assert len(events("token-created")) == 2 and len(events("token-deleted")) == 1
    assert all(first not in str(e.detail) and rotated not in str(e.detail) for e in events())
    response = APIClient(HTTP_AUTHORIZATION=f"Token {rotated}").get("/api/calls/")
    assert response.status_code == 200
    run("user", "deactivate", "ci")
    with pytest.raises(CommandError, match="deactivated"):
        run("token", "ci")


def test_it_attributes_admin_site_changes_to_the_admin_and_the_address():
    admin = User.objects.create_superuser("root", "", "pw")
    victim = User.objects.create_user("old-account", password="pw")
    client = Client(REMOTE_ADDR="192.0.2.7")
    client.force_login(admin)
    response = client.post(f"/admin/auth/user/{victim.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    deleted = events("user-deleted")
    assert [(e.target, e.actor, e.source) for e in deleted] == [("old-account", "root", "192.0.2.7")]


def test_it_records_the_configuration_load_at_start_up(monkeypatch):
    monkeypatch.setenv("EXTPROXY_ADMIN_PASSWORD", "pw")
    call_command("bootstrap", stdout=io.StringIO())
    loaded = events("config-loaded")
    assert len(loaded) == 1 and loaded[0].source == "start-up" and loaded[0].detail["backends"]
    assert [e.target for e in events("user-created")] == ["admin"]


def test_it_shows_the_trail_to_auditors_newest_first():
    run("user", "add", "audrey", "--role", "auditor")
    token = run("token", "audrey").strip()
    page = APIClient(HTTP_AUTHORIZATION=f"Token {token}").get("/api/audit/").json()
    actions = [e["action"] for e in page["results"]]
    assert actions[0] == "token-created" and "user-created" in actions
    assert set(page["results"][0]) == {"id", "at", "actor", "action", "target", "source", "detail"}


def test_it_lets_an_admin_role_into_the_admin_site_to_manage_users():
    run("user", "add", "boss", "--role", "admin", "--password-stdin", stdin="pw\n")
    client = Client()
    assert client.login(username="boss", password="pw")
    assert client.get("/admin/auth/user/").status_code == 200
    run("user", "role", "boss", "--role", "viewer")
    assert client.get("/admin/auth/user/").status_code == 302  # no longer staff: back to the admin login


def test_it_shows_auditors_the_trail_page_with_filters_exports_and_text_escaped():
    from extproxy.audit import audit

    audit(None, "login-failed", target="<script>alert(1)</script>", actor="", source="203.0.113.9")
    audit(None, "export", target="calls as csv", actor="audrey", source="10.0.0.1", detail={"filters": {"node": "n1"}})
    run("user", "add", "audrey", "--role", "auditor", "--password-stdin", stdin="pw\n")
    client = Client()
    assert client.login(username="audrey", password="pw")
    page = client.get("/audit/").content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert(1)" not in page
    assert "203.0.113.9" in page and "calls as csv" in page and 'href="/audit/"' in page
    filtered = client.get("/audit/?action=export").content.decode()
    assert "calls as csv" in filtered and "203.0.113.9" not in filtered
    assert "/api/audit/export/?action=export&amp;format=csv" in filtered
    assert client.get("/api/audit/export/?action=export&format=csv").status_code == 200
    bad = client.get("/audit/?since=last-week")
    assert bad.status_code == 200 and "since: Enter a valid date/time." in bad.content.decode()
    # An invalid selection has no export: its links would only answer 400.
    assert client.get("/api/audit/export/?since=last-week&format=csv").status_code == 400
    assert "/api/audit/export/" not in bad.content.decode()
    assert "correct the filters above to export" in bad.content.decode()


def test_it_hides_the_audit_link_from_viewers():
    run("user", "add", "val", "--role", "viewer", "--password-stdin", stdin="pw\n")
    client = Client()
    assert client.login(username="val", password="pw")
    assert 'href="/audit/"' not in client.get("/pending/").content.decode()
    assert client.get("/audit/").status_code == 403
