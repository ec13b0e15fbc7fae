"""A backend's urlPrefix may carry a Basic-auth password (`http://user:password@host/...`: the
wire client sends it as an Authorization header). No role sees it: not the backends page, not
the curl command or the fixture a developer copies out, not the audit trail that records the
copy. A real proxy and backend; each role logged in as it would be."""
from __future__ import annotations

import json

import pytest
import requests
from django.contrib.auth.models import Group, User
from django.test import Client
from rest_framework.authtoken.models import Token

from tests.conftest import fixture_bytes, pass_all
from tests.test_per_backend import FILTER_NAMES, config_for, only_call, post

PASSWORD = "S3cr3tPassw0rd"


def token_session(role: str) -> requests.Session:
    user = User.objects.create_user(f"u-{role}", password="pw")
    user.groups.add(Group.objects.get(name=role))
    session = requests.Session()
    session.headers["Authorization"] = f"Token {Token.objects.create(user=user).key}"
    return session


@pytest.mark.parametrize("userinfo, secret, shown", [
    (f"svc-user:{PASSWORD}", PASSWORD, "svc-user:[redacted]@"),  # Basic auth: the user is kept
    ("ghp_0123456789abcdefTOKEN", "ghp_0123456789abcdefTOKEN", "[redacted]@"),  # a token as the user name
])
def test_a_backends_url_credentials_reach_no_role(backend_server, proxy, write_config, admin_client,
                                                   userinfo, secret, shown):
    """The backends page, the curl command and the fixture copied out, and the audit trail."""
    backend = backend_server({"filter": pass_all})
    server = proxy(write_config(config_for(backend.url.replace("http://", f"http://{userinfo}@"), nodeCacheCapable=True)))
    assert post(server, "/extender/gpu/filter", fixture_bytes(FILTER_NAMES)).status_code == 200
    call = only_call(admin_client, server)

    viewer = User.objects.create_user("u-viewer", password="pw")
    viewer.groups.add(Group.objects.get(name="viewer"))
    page = Client()
    page.force_login(viewer)
    backends = page.get("/backends/").content.decode()
    assert secret not in backends and f"{shown}127.0.0.1" in backends

    developer = token_session("developer")
    curl = developer.get(server.url + f"/api/calls/{call['id']}/curl")
    fixture = developer.get(server.url + f"/api/calls/{call['id']}/fixture")
    assert curl.status_code == 200 and fixture.status_code == 200
    assert secret not in curl.text and shown in curl.text
    assert secret not in fixture.text and "[redacted]" in json.loads(fixture.text)["target"]["url"]

    trail = token_session("auditor").get(server.url + "/api/audit/")
    assert trail.status_code == 200 and "copy" in trail.text.lower()
    assert secret not in trail.text


@pytest.mark.parametrize("url, shown", [
    ("http://:token@host/x", "http://:[redacted]@host/x"),  # an empty user
    ("http://dev:p@ss@host:8/x", "http://dev:[redacted]@host:8/x"),  # "@" in the password
    ("https://a:b@[::1]:9/x?q=1", "https://a:[redacted]@[::1]:9/x?q=1"),
    ("http://host/a@b:c", "http://host/a@b:c"),  # "@" in the path: no userinfo
    ("http://h?a:b@c", "http://h?a:b@c"),  # "@" in the query: no userinfo (Go cuts the query first)
    ("http://u:p@h#f@x", "http://u:[redacted]@h#f@x"),  # "@" in the fragment: the host is h
    ("http://u:p@[::1/x", "http://u:[redacted]@[::1/x"),  # not a URL Python's parser takes
    ("//u:p@h/x", "//u:[redacted]@h/x"),  # no scheme
])
def test_a_url_password_is_redacted_as_the_url_parser_reads_it(url, shown):
    from extproxy.redaction import url_without_password
    from extproxy.semantics.errors import reply_error_text
    from extproxy.semantics.urls import url_password_replaced

    assert url_password_replaced(url, "<gone>") == shown.replace("[redacted]", "<gone>")
    assert url_without_password(url) == shown
    assert reply_error_text(None, "refused", url) == f'Post "{shown.replace("[redacted]", "***")}": refused'


def test_go_shows_a_lone_user_name_where_the_records_hide_it():
    """Go's client hides a password only: the combined form's Error names the URL as it would
    (the scheduler's own words); what extproxy stores and shows hides the token too."""
    from extproxy.redaction import url_without_password
    from extproxy.semantics.errors import reply_error_text

    assert reply_error_text(None, "refused", "http://tok123456@host/") == 'Post "http://tok123456@host/": refused'
    assert url_without_password("http://tok123456@host/") == "http://[redacted]@host/"


@pytest.mark.parametrize("url, shown", [
    ("http://ghp_abcdef123@host/", "http://[redacted]@host/"),  # git's way: a token as the user name
    ("https://TOKEN@host", "https://[redacted]@host"),
    ("http://user@host:8/x", "http://[redacted]@host:8/x"),  # a user alone cannot be told from a token
    ("http://tok:@host/", "http://[redacted]@host/"),  # beside an empty password
    ("https://TOK:x-oauth-basic@github.com/o", "https://[redacted]:x-oauth-basic@github.com/o"),  # says so
    ("http://@host/", "http://@host/"),  # nothing to hide
    ("postgresql://postgres@db:5432/x", "postgresql://postgres@db:5432/x"),  # not a web URL: an account's name
    ("ssh://git@host/repo", "ssh://git@host/repo"),
    ("postgresql://app:pw123@db/x", "postgresql://app:[redacted]@db/x"),  # a password, in any scheme
])
def test_a_user_name_without_a_password_is_redacted_whole(url, shown):
    """The rule: in a web URL the user is kept only beside a password (Basic auth, where it
    names the account); alone, it is how a token is passed, and is replaced (a database's or
    ssh's user alone names an account, and is kept). Free text follows it too
    (a stored error names a backend by its URL), and redacting again changes nothing."""
    from extproxy.config import RedactionConfig
    from extproxy.models import shown_target
    from extproxy.redaction import redact_text, url_without_password

    assert url_without_password(url) == shown
    assert url_without_password(shown) == shown
    assert redact_text(f'Post "{url}": refused', RedactionConfig()) == f'Post "{shown}": refused'
    assert shown_target({"kind": "url", "url": url}) == {"kind": "url", "url": shown}  # a replay's target
