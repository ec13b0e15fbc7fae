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


def test_a_backends_url_password_reaches_no_role(backend_server, proxy, write_config, admin_client):
    backend = backend_server({"filter": pass_all})
    with_password = backend.url.replace("http://", f"http://svc-user:{PASSWORD}@")
    server = proxy(write_config(config_for(with_password, nodeCacheCapable=True)))
    assert post(server, "/extender/gpu/filter", fixture_bytes(FILTER_NAMES)).status_code == 200
    call = only_call(admin_client, server)

    viewer = User.objects.create_user("u-viewer", password="pw")
    viewer.groups.add(Group.objects.get(name="viewer"))
    page = Client()
    page.force_login(viewer)
    backends = page.get("/backends/").content.decode()
    assert PASSWORD not in backends and "svc-user:[redacted]@127.0.0.1" in backends

    developer = token_session("developer")
    curl = developer.get(server.url + f"/api/calls/{call['id']}/curl")
    fixture = developer.get(server.url + f"/api/calls/{call['id']}/fixture")
    assert curl.status_code == 200 and fixture.status_code == 200
    assert PASSWORD not in curl.text and "svc-user:[redacted]@" in curl.text
    assert PASSWORD not in fixture.text and "[redacted]" in json.loads(fixture.text)["target"]["url"]

    trail = token_session("auditor").get(server.url + "/api/audit/")
    assert trail.status_code == 200 and "copy" in trail.text.lower()
    assert PASSWORD not in trail.text


@pytest.mark.parametrize("url, shown", [
    ("http://:token@host/x", "http://:[redacted]@host/x"),  # an empty user
    ("http://dev:p@ss@host:8/x", "http://dev:[redacted]@host:8/x"),  # "@" in the password
    ("https://a:b@[::1]:9/x?q=1", "https://a:[redacted]@[::1]:9/x?q=1"),
    ("http://host/a@b:c", "http://host/a@b:c"),  # "@" in the path: no userinfo
    ("http://user@host/", "http://user@host/"),
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
